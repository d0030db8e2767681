#!/usr/bin/env python3
"""CDK entry point: the respot stack from context values (docs/deploy.md), checked by cdk-nag.

`CDK_OUTDIR=cdk.out python app.py` writes cdk.out/<Stack>.template.json (the CDK CLI sets
CDK_OUTDIR itself). cdk-nag findings are synthesis errors: this exits non-zero on any.
"""

import os
import sys

import aws_cdk as cdk

from infra.nag import add_checks, errors
from infra.settings import DeploySettings
from infra.stack import RespotStack

app = cdk.App(outdir=os.environ.get("CDK_OUTDIR"))
settings = DeploySettings.from_context(app.node.try_get_context)
RespotStack(
    app,
    settings.stack_name,
    settings=settings,
    description="respot: train on spot GPUs, checkpointed to S3, resumed after interruptions",
    env=cdk.Environment(
        account=os.environ.get("CDK_DEFAULT_ACCOUNT"), region=os.environ.get("CDK_DEFAULT_REGION")
    ),
)
add_checks(app)
problems = errors(app.synth())
if problems:
    print("\n".join(["cdk-nag or synthesis errors:", *problems]), file=sys.stderr)
    sys.exit(1)
