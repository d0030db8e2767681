"""EC2 vCPU quotas: which Service Quotas quota a launch counts against, and how to raise it.

EC2 counts running instances (and open spot requests) in vCPUs per *quota class*, per region
and per market. A launch beyond the quota fails with `VcpuLimitExceeded` (on-demand) or
`MaxSpotInstanceCountExceeded` (spot); a new account's G and P quotas are often 0. The codes
below are the Service Quotas codes of service `ec2` (checked against the EC2 user guide's
"Spot Instance quotas" list and public tools that call `GetServiceQuota` with them; P5 spot,
Trn and Inf on-demand as `aws service-quotas list-service-quotas --service-code ec2` lists
them by these names); a class without a verified code is named, and the message says how to
find its code. `respot doctor` reads the same table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from respot.core.job import Market

# EC2 error codes that mean "over a quota", not "no capacity right now".
QUOTA_ERRORS = frozenset(
    {"VcpuLimitExceeded", "MaxSpotInstanceCountExceeded", "InstanceLimitExceeded"}
)

# (family pattern, class name). The first match wins; order matters (e.g. "inf" before "i").
_CLASSES: tuple[tuple[str, str], ...] = (
    (r"^dl\d", "DL"),
    (r"^trn\d", "Trn"),
    (r"^inf\d", "Inf"),
    (r"^(g|vt)\d", "G and VT"),
    (r"^p[56]", "P5"),
    (r"^p\d", "P"),
    (r"^f\d", "F"),
    (r"^u-|^x\d", "X"),
    (r"^[acdhimrtz]\d", "Standard"),
)

# (market, class) -> (quota code, quota name as Service Quotas shows it).
_CODES: dict[tuple[Market, str], tuple[str | None, str]] = {
    (Market.SPOT, "Standard"): (
        "L-34B43A08",
        "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests",
    ),
    (Market.SPOT, "G and VT"): ("L-3819A6DF", "All G and VT Spot Instance Requests"),
    (Market.SPOT, "P"): ("L-7212CCBC", "All P4, P3 and P2 Spot Instance Requests"),
    (Market.SPOT, "P5"): ("L-C4BD4855", "All P5 Spot Instance Requests"),
    (Market.SPOT, "F"): ("L-88CF9481", "All F Spot Instance Requests"),
    (Market.SPOT, "Inf"): ("L-B5D1601B", "All Inf Spot Instance Requests"),
    (Market.SPOT, "DL"): ("L-85EED4F7", "All DL Spot Instance Requests"),
    (Market.SPOT, "X"): ("L-E3A00192", "All X Spot Instance Requests"),
    (Market.SPOT, "Trn"): ("L-6B0D517C", "All Trn Spot Instance Requests"),
    (Market.ON_DEMAND, "Standard"): (
        "L-1216C47A",
        "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances",
    ),
    (Market.ON_DEMAND, "G and VT"): ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    (Market.ON_DEMAND, "P"): ("L-417A185B", "Running On-Demand P instances"),
    (Market.ON_DEMAND, "P5"): ("L-417A185B", "Running On-Demand P instances"),
    (Market.ON_DEMAND, "X"): ("L-7295265B", "Running On-Demand X instances"),
    (Market.ON_DEMAND, "F"): ("L-74FC7D96", "Running On-Demand F instances"),
    (Market.ON_DEMAND, "Inf"): ("L-1945791B", "Running On-Demand Inf instances"),
    (Market.ON_DEMAND, "DL"): (None, "Running On-Demand DL instances"),
    (Market.ON_DEMAND, "Trn"): ("L-2C3B7624", "Running On-Demand Trn instances"),
}


@dataclass(frozen=True)
class Quota:
    """The vCPU quota one instance type counts against in one market."""

    market: Market
    quota_class: str
    code: str | None  # Service Quotas code of service "ec2", when known
    name: str


@dataclass(frozen=True)
class QuotaReading:
    """What the launch adapter learned when EC2 refused a launch for a quota."""

    quota: Quota
    value: float | None = None  # the quota's current value in vCPUs (GetServiceQuota)
    vcpus: int | None = None  # vCPUs of the instance type asked for (DescribeInstanceTypes)
    region: str | None = None

    @property
    def blocks_one_instance(self) -> bool:
        """True if even one instance cannot fit (a quota of 0, or smaller than one instance).

        Waiting cannot help then: only a quota increase can. An unknown value counts as
        blocking, so that a refusal never turns into a silent wait.
        """
        if self.value is None:
            return True
        return self.value < (self.vcpus or 1)

    def increase_command(self) -> str:
        """The exact AWS CLI command that asks for enough vCPUs for one more instance."""
        desired = int(max(self.value or 0, 0) + (self.vcpus or 4))
        region = f" --region {self.region}" if self.region else ""
        if self.quota.code is None:
            return (
                "aws service-quotas list-service-quotas --service-code ec2 --query "
                f"\"Quotas[?QuotaName=='{self.quota.name}'].QuotaCode\"{region}  # then "
                "aws service-quotas request-service-quota-increase --service-code ec2 "
                f"--quota-code <that code> --desired-value {desired}{region}"
            )
        return (
            "aws service-quotas request-service-quota-increase --service-code ec2 "
            f"--quota-code {self.quota.code} --desired-value {desired}{region}"
        )

    def describe(self) -> str:
        """One line for the timeline and Slack: the quota, its value and the fix."""
        value = "unknown" if self.value is None else f"{self.value:g} vCPUs"
        need = f"; one {self.vcpus}-vCPU instance needs more" if self.vcpus else ""
        code = f" ({self.quota.code})" if self.quota.code else ""
        return (
            f"EC2 quota '{self.quota.name}'{code} is {value}{need}. Raise it with: "
            f"{self.increase_command()}"
        )


def quota_for(instance_type: str, market: Market) -> Quota | None:
    """The vCPU quota `instance_type` counts against in `market`, or None if unknown."""
    family = instance_type.split(".", 1)[0].lower()
    for pattern, quota_class in _CLASSES:
        if re.match(pattern, family):
            code, name = _CODES[(market, quota_class)]
            return Quota(market=market, quota_class=quota_class, code=code, name=name)
    return None
