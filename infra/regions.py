"""The fixed names that tie a satellite region to its home stack (infra/satellite.py).

The home stack is deployed first and satellites refer to it, so it cannot refer back to
their resources; it scopes its grants in their regions by these names and tags instead.
"""

from __future__ import annotations

# Subnets, security groups (every resource) of a satellite stack carry this tag, its value
# the home stack's name: the home control plane may launch into those only.
from respot.core.lifecycle import SATELLITE_TAG

__all__ = ["SATELLITE_TAG"]


def satellite_stack_name(home_stack: str, region: str) -> str:
    """`Respot-us-west-2` (`Respot-prod-us-west-2` with a stage)."""
    return f"{home_stack}-{region}"


def instance_role_name(home_stack: str, region: str) -> str:
    """The satellite's instance role: fixed, so the home stack can allow passing it."""
    return f"{home_stack}-{region}-instances"[:64]


# S3 bucket names are 3-63 characters, globally unique ("Bucket naming rules", Amazon S3 User
# Guide). A satellite's checkpoint bucket is `<home>-<account>-<region>-<8 hex>`: the 8 hex
# digits are the first group of its CloudFormation stack id's UUID, which is new for every
# created stack and fixed across updates. The bucket is retained (it holds checkpoints), so a
# fixed name would make the next create of the same stack (a retry after a failed first
# deploy, a deploy after `cdk destroy`) fail with "already exists"; this one changes then.
BUCKET_NAME_MAX = 63
STACK_SUFFIX_LEN = 8
ACCOUNT_ID_LEN = 12


def checkpoint_bucket_prefix(home_stack: str, account: str, region: str) -> str:
    """`<home>-<account>-<region>-`: what the satellite's checkpoint bucket name starts with.

    The home stack grants copying into `<prefix>*` (it cannot know the satellite's stack id);
    the home stack's name is cut so that the whole name fits S3's 63 characters (`account`
    may be a token: an account id has 12 digits)."""
    room = BUCKET_NAME_MAX - STACK_SUFFIX_LEN - ACCOUNT_ID_LEN - len(region) - 3
    home = home_stack.lower()[:room].rstrip("-")
    return f"{home}-{account}-{region}-"


def checkpoint_bucket_name(home_stack: str, account: str, region: str, stack_id: str) -> str:
    """The satellite's checkpoint bucket for the satellite stack whose id is `stack_id`
    (`arn:aws:cloudformation:<region>:<account>:stack/<name>/<uuid>`): the same computation
    `infra.satellite` gives CloudFormation, in Python (tests, the doctor)."""
    uuid = stack_id.split("/")[2]
    return checkpoint_bucket_prefix(home_stack, account, region) + uuid.split("-")[0]


def satellite_parameter_name(name_prefix: str) -> str:
    """The parameter, in each satellite region, telling the control plane what is there."""
    return f"/{name_prefix}/satellite"
