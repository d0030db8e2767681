"""EC2's vCPU quotas per instance family, for the doctor: the spot and on-demand pair.

The table is `respot.core.quotas` (the one the control plane names in a refused launch);
this module pairs a family's two quotas and writes the increase command. EC2 counts running
spot and on-demand capacity in vCPUs per family class, per region; new accounts often have 0
for the GPU classes (G and VT, P), which makes every launch fail with
`MaxSpotInstanceCountExceeded` or `VcpuLimitExceeded`.
"""

from __future__ import annotations

from dataclasses import dataclass

from respot.core.job import Market
from respot.core.quotas import quota_for

SERVICE_CODE = "ec2"


@dataclass(frozen=True)
class FamilyQuotas:
    """The two vCPU quotas of one family class (a code is None where respot knows none)."""

    name: str  # e.g. "G and VT"
    spot_code: str | None  # "All <name> Spot Instance Requests"
    on_demand_code: str | None  # "Running On-Demand <name> instances"
    spot_name: str = ""
    on_demand_name: str = ""


def quotas_for(instance_type: str) -> FamilyQuotas | None:
    """The quotas that count this instance type, or None for a family not in the table."""
    spot = quota_for(instance_type, Market.SPOT)
    on_demand = quota_for(instance_type, Market.ON_DEMAND)
    if spot is None or on_demand is None:
        return None
    return FamilyQuotas(
        name=spot.quota_class,
        spot_code=spot.code,
        on_demand_code=on_demand.code,
        spot_name=spot.name,
        on_demand_name=on_demand.name,
    )


def increase_command(code: str, desired: int, region: str) -> str:
    """The AWS CLI command that asks for more of a quota."""
    return (
        f"aws service-quotas request-service-quota-increase --service-code {SERVICE_CODE} "
        f"--quota-code {code} --desired-value {desired} --region {region}"
    )
