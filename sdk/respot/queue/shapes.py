"""vCPUs and GPUs of the GPU instance types respot is used with, for admission's arithmetic.

The control plane asks EC2 (`DescribeInstanceTypes`: `VCpuInfo`, `GpuInfo`) for a type this
table does not know; the benchmark uses the table alone. Values are from the EC2 instance type
pages (accelerated computing).
"""

from __future__ import annotations

# type -> (vCPUs, GPUs)
SHAPES: dict[str, tuple[int, int]] = {
    "g4dn.xlarge": (4, 1),
    "g4dn.2xlarge": (8, 1),
    "g4dn.4xlarge": (16, 1),
    "g4dn.8xlarge": (32, 1),
    "g4dn.12xlarge": (48, 4),
    "g4dn.16xlarge": (64, 1),
    "g4dn.metal": (96, 8),
    "g5.xlarge": (4, 1),
    "g5.2xlarge": (8, 1),
    "g5.4xlarge": (16, 1),
    "g5.8xlarge": (32, 1),
    "g5.12xlarge": (48, 4),
    "g5.16xlarge": (64, 1),
    "g5.24xlarge": (96, 4),
    "g5.48xlarge": (192, 8),
    "g6.xlarge": (4, 1),
    "g6.2xlarge": (8, 1),
    "g6.4xlarge": (16, 1),
    "g6.8xlarge": (32, 1),
    "g6.12xlarge": (48, 4),
    "g6.16xlarge": (64, 1),
    "g6.24xlarge": (96, 4),
    "g6.48xlarge": (192, 8),
    "g6e.xlarge": (4, 1),
    "g6e.2xlarge": (8, 1),
    "g6e.12xlarge": (48, 4),
    "g6e.48xlarge": (192, 8),
    "p3.2xlarge": (8, 1),
    "p3.8xlarge": (32, 4),
    "p3.16xlarge": (64, 8),
    "p4d.24xlarge": (96, 8),
    "p5.48xlarge": (192, 8),
}


def shape(instance_type: str) -> tuple[int, int] | None:
    """(vCPUs, GPUs) of `instance_type`, or None if the table does not know it."""
    return SHAPES.get(instance_type)
