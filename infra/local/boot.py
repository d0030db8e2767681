"""A modelled EC2 boot for the local runtime: what a replacement instance takes on AWS.

The local runtime's default `FleetTiming` (15 s fulfilment + 45 s boot, simulated) keeps the
tests fast; it is not what EC2 takes. `modelled_ec2_timing()` builds the same `FleetTiming`
from the phases a replacement goes through on EC2, each with where its figure comes from:

- spot request -> `running`, 17 s: measured by others, not by AWS: "Pending -> Running"
  16.4-16.6 s across six instance families, on-demand, gp3 root (brevdev/ec2-coldboot-research
  on GitHub, 2025). AWS documents no launch or fulfilment time; an encrypted root volume
  launches slower (martysweet.co.uk, "EC2 Launch Times", 2023).
- the AMI boots to the user data, 45 s: an assumption (the fast boot's figure). The same
  research measured 3.2 s from boot to SSH on a minimal AMI, but the DLAMI starts an NVIDIA
  driver, Docker and the SSM and CloudWatch agents first, and no public figure exists;
  `respot selftest` prints the real one.
- the agent package from S3, 77.5 MiB at 50 MiB/s: the zipped size measured by
  `python -m bench.assets` (2026-11-26); 50 MiB/s is an assumption for one `aws s3 cp` on a
  g5.xlarge ("up to 10 Gbps").
- unpacking it, 9.3 s: `python -m zipfile -e` of that package, measured on this project's
  2-core machine at load 8; the agent's venv and `import respot.agent`, 2 s, assumed.
- `import torch` from a root volume still loading from its snapshot, 2.5 GiB at 100 MiB/s:
  a volume created from a snapshot downloads each block from S3 on first access ("volume
  initialization": increased latency, a default rate that "fluctuates"; a paid provisioned
  rate is 100-300 MiB/s; Amazon EBS User Guide, "Initialize Amazon EBS volumes"). 2.5 GiB is
  an estimate of the CUDA build's shared libraries that importing torch and initializing CUDA
  read (libtorch_cuda, cuDNN, cuBLAS); 100 MiB/s is the provisioned rate's floor.

Together: 17 s to `running`, then 83.5 s until the session's libraries are read (100.5 s),
against the fast boot's 15 + 45. The torch read happens after the agent starts on EC2; the model
puts it in the boot, which moves the same seconds to the same side of the changeover (the
replacement is ready that much later). On the local runtime the session's own `import torch`
then runs too, from a warm page cache: a few seconds counted twice.

Tests keep the fast boot; `bench.interruptions --boot ec2` reports the paused time under this
one, and `respot selftest` prints the real phases on AWS.
"""

from __future__ import annotations

from dataclasses import dataclass

from infra.local.fleet import FleetTiming

MIB = 2**20


@dataclass(frozen=True)
class Ec2BootModel:
    """The phases of a replacement's boot on EC2 (simulated seconds; sources above)."""

    fulfil_seconds: float = 17.0
    os_boot_seconds: float = 45.0
    agent_package_mib: float = 77.5
    s3_mib_per_second: float = 50.0
    unpack_seconds: float = 9.3
    agent_venv_seconds: float = 2.0
    cold_read_gib: float = 2.5
    snapshot_mib_per_second: float = 100.0

    @property
    def download_seconds(self) -> float:
        return self.agent_package_mib / self.s3_mib_per_second

    @property
    def cold_import_seconds(self) -> float:
        return self.cold_read_gib * 1024 / self.snapshot_mib_per_second

    @property
    def boot_seconds(self) -> float:
        """`running` -> the replacement's libraries are read (the local boot's length)."""
        return (
            self.os_boot_seconds
            + self.download_seconds
            + self.unpack_seconds
            + self.agent_venv_seconds
            + self.cold_import_seconds
        )

    def phases(self) -> dict[str, float]:
        """Each phase's seconds, in order (for reports)."""
        return {
            "fulfil": self.fulfil_seconds,
            "os_boot": self.os_boot_seconds,
            "agent_download": round(self.download_seconds, 2),
            "agent_unpack": self.unpack_seconds,
            "agent_venv": self.agent_venv_seconds,
            "cold_import_torch": round(self.cold_import_seconds, 2),
        }


def modelled_ec2_timing(model: Ec2BootModel | None = None) -> FleetTiming:
    """The fleet's timing with the boot modelled from EC2's phases (not the tests' default)."""
    model = model or Ec2BootModel()
    return FleetTiming(fulfil_seconds=model.fulfil_seconds, boot_seconds=model.boot_seconds)
