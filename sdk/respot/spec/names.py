"""How a job names things outside itself: an ECR image, an ARN's region, a job secret's name.

One rule each, read by the laptop and the commands function before anything is spent
(`reach`), by the agent on the instance (`respot.agent.regional`, `respot.agent.secrets`) and
by the stack's grants (the instance role may read secrets under `JOB_SECRET_PREFIX` only).
"""

from __future__ import annotations

import re

JOB_SECRET_PREFIX = "respot/jobs/"  # noqa: S105 - a name prefix, not a secret

# 123456789012.dkr.ecr.us-east-1.amazonaws.com/repo:tag (also .amazonaws.com.cn)
ECR_IMAGE = re.compile(
    r"^(?P<registry>\d{12}\.dkr\.ecr\.(?P<region>[a-z]{2}(-[a-z]+)+-\d)\.amazonaws\.com(\.cn)?)/"
)
_ARN_REGION = re.compile(r"^arn:aws[a-z-]*:[a-z0-9-]+:(?P<region>[a-z]{2}(-[a-z]+)+-\d):")


def arn_region(arn: str) -> str | None:
    """The region an ARN names (None for a global ARN or anything else)."""
    match = _ARN_REGION.match(arn)
    return match.group("region") if match else None


def registry_region(image: str) -> str | None:
    """The region of an image's ECR registry (None for any other registry)."""
    match = ECR_IMAGE.match(image)
    return match.group("region") if match else None
