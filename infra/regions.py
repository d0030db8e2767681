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


def checkpoint_bucket_name(home_stack: str, account: str, region: str) -> str:
    """The satellite's checkpoint bucket: fixed, so the home stack can grant copying into it."""
    return f"{home_stack.lower()}-{account}-{region}"


def satellite_parameter_name(name_prefix: str) -> str:
    """The parameter, in each satellite region, telling the control plane what is there."""
    return f"/{name_prefix}/satellite"
