#!/usr/bin/env python3
"""CDK entry point: the respot stack from context values (docs/deploy.md), checked by cdk-nag.

With `-c extra_regions=us-west-2,eu-west-1`, one satellite stack per extra region as well
(`infra/satellite.py`); the home stack then needs a concrete account and region (the CDK CLI
sets CDK_DEFAULT_ACCOUNT/CDK_DEFAULT_REGION from the shell's credentials).

`CDK_OUTDIR=cdk.out python app.py` writes cdk.out/<Stack>.template.json (the CDK CLI sets
CDK_OUTDIR itself). cdk-nag findings are synthesis errors: this exits non-zero on any.
"""

import os
import sys

import aws_cdk as cdk

from infra.nag import add_checks, errors
from infra.regions import satellite_stack_name
from infra.satellite import SatelliteStack
from infra.settings import DeploySettings
from infra.stack import RespotStack

app = cdk.App(outdir=os.environ.get("CDK_OUTDIR"))
settings = DeploySettings.from_context(app.node.try_get_context)
account, region = os.environ.get("CDK_DEFAULT_ACCOUNT"), os.environ.get("CDK_DEFAULT_REGION")
if settings.extra_regions and not (account and region):
    sys.exit(
        "extra_regions needs the home account and region: run through the CDK CLI with "
        "credentials, or set CDK_DEFAULT_ACCOUNT and CDK_DEFAULT_REGION"
    )
home = RespotStack(
    app,
    settings.stack_name,
    settings=settings,
    description="respot: train on spot GPUs, checkpointed to S3, resumed after interruptions",
    env=cdk.Environment(account=account, region=region),
)
for extra in settings.extra_regions:
    SatelliteStack(
        app,
        satellite_stack_name(settings.stack_name, extra),
        home=home,
        region=extra,
        settings=settings,
        description=f"respot satellite of {settings.stack_name}: GPU instances in {extra}",
    )
add_checks(app)
problems = errors(app.synth())
if problems:
    print("\n".join(["cdk-nag or synthesis errors:", *problems]), file=sys.stderr)
    sys.exit(1)
