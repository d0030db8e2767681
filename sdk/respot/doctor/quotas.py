"""EC2's vCPU quotas per instance family, as Service Quotas names them (service code `ec2`).

EC2 counts running spot and on-demand capacity in vCPUs per family group, one quota each for
spot requests and for running on-demand instances, per region. New accounts often have 0 for
the GPU families (G/VT, P), which makes every launch fail with `MaxSpotInstanceCountExceeded`
or `VcpuLimitExceeded`.

The codes are those `aws service-quotas list-service-quotas --service-code ec2` lists with
these names ("All G and VT Spot Instance Requests" L-3819A6DF, "Running On-Demand G and VT
instances" L-DB2E81BA, ...; the AWS CLI user guide's Service Quotas examples show
L-1216C47A, "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances"). P5 has a
spot quota of its own. Families not listed here (e.g. DL, High Memory) are not checked, and
the doctor says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SERVICE_CODE = "ec2"


@dataclass(frozen=True)
class FamilyQuotas:
    """The two vCPU quotas of one family group."""

    name: str  # e.g. "G and VT"
    spot_code: str  # "All <name> Spot Instance Requests"
    on_demand_code: str  # "Running On-Demand <name> instances"


STANDARD = FamilyQuotas("Standard (A, C, D, H, I, M, R, T, Z)", "L-34B43A08", "L-1216C47A")
G_VT = FamilyQuotas("G and VT", "L-3819A6DF", "L-DB2E81BA")
# (pattern on the instance type, quotas); the first match wins.
FAMILY_QUOTAS: tuple[tuple[re.Pattern[str], FamilyQuotas], ...] = (
    (re.compile(r"^(g|vt)\d"), G_VT),
    (re.compile(r"^p[234]"), FamilyQuotas("P4, P3 and P2", "L-7212CCBC", "L-417A185B")),
    (re.compile(r"^p5"), FamilyQuotas("P5", "L-C4BD4855", "L-417A185B")),
    (re.compile(r"^inf\d"), FamilyQuotas("Inf", "L-B5D1601B", "L-1945791B")),
    (re.compile(r"^trn\d"), FamilyQuotas("Trn", "L-6B0D517C", "L-2C3B7624")),
    (re.compile(r"^f\d"), FamilyQuotas("F", "L-88CF9481", "L-74FC7D96")),
    (re.compile(r"^x\d"), FamilyQuotas("X", "L-E3A00192", "L-7295265B")),
    (re.compile(r"^[acdhimrtz]\d"), STANDARD),
)


def quotas_for(instance_type: str) -> FamilyQuotas | None:
    """The quotas that count this instance type, or None for a family not in the table."""
    return next((q for pattern, q in FAMILY_QUOTAS if pattern.match(instance_type)), None)


def increase_command(code: str, desired: int, region: str) -> str:
    """The AWS CLI command that asks for more of a quota."""
    return (
        f"aws service-quotas request-service-quota-increase --service-code {SERVICE_CODE} "
        f"--quota-code {code} --desired-value {desired} --region {region}"
    )
