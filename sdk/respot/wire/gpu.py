"""GPU telemetry as it travels and reads: one `GpuSample` per GPU, and how each view shows it.

The agent samples NVML (`respot.agent.telemetry`) and sends the per-GPU figures with each
heartbeat (`AgentProgress.gpus`); the control plane keeps the newest on the record
(`Progress.gpus`) and a mean utilization on its sparse progress history. `respot status`,
the Slack card, TensorBoard (`system/gpu<i>/...`) and the timeline picture read them here.

Small on purpose: a sample is about 150 bytes of JSON, at most `MAX_GPUS` of them per
message, far inside SQS's 256 KiB.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

MAX_GPUS = 16  # p5.48xlarge has 8; anything beyond this is cut from the message


class GpuSample(BaseModel):
    """One GPU, averaged over the samples since the previous heartbeat (memory: the peak)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int = Field(ge=0)
    name: str | None = Field(default=None, max_length=64)
    utilization_pct: float | None = Field(default=None, ge=0, le=100)
    memory_used_mib: float | None = Field(default=None, ge=0)
    memory_total_mib: float | None = Field(default=None, ge=0)
    temperature_c: float | None = None
    power_w: float | None = Field(default=None, ge=0)


def mean_utilization(gpus: Sequence[GpuSample]) -> float | None:
    """Mean utilization over the GPUs that report one."""
    values = [g.utilization_pct for g in gpus if g.utilization_pct is not None]
    return round(sum(values) / len(values), 1) if values else None


def summary(gpus: Sequence[GpuSample]) -> str:
    """One line for every view: '2 x NVIDIA A10G: 87% util, 30.1/45.0 GiB, 71°C max, 410 W'."""
    if not gpus:
        return "no GPU"
    names = {g.name for g in gpus if g.name}
    head = f"{len(gpus)} x {names.pop()}" if len(names) == 1 else f"{len(gpus)} GPU(s)"
    parts: list[str] = []
    util = mean_utilization(gpus)
    if util is not None:
        parts.append(f"{util:.0f}% util")
    used = [g.memory_used_mib for g in gpus if g.memory_used_mib is not None]
    total = [g.memory_total_mib for g in gpus if g.memory_total_mib is not None]
    if used and total:
        parts.append(f"{sum(used) / 1024:.1f}/{sum(total) / 1024:.1f} GiB")
    temps = [g.temperature_c for g in gpus if g.temperature_c is not None]
    if temps:
        parts.append(f"{max(temps):.0f}°C max")
    power = [g.power_w for g in gpus if g.power_w is not None]
    if power:
        parts.append(f"{sum(power):.0f} W")
    return f"{head}: {', '.join(parts)}" if parts else head


def per_gpu_lines(gpus: Sequence[GpuSample]) -> list[str]:
    """One line per GPU (`respot status`)."""
    lines = []
    for g in gpus:
        cells = [f"gpu{g.index}"]
        if g.name:
            cells.append(g.name)
        if g.utilization_pct is not None:
            cells.append(f"{g.utilization_pct:.0f}% util")
        if g.memory_used_mib is not None and g.memory_total_mib:
            pct = 100 * g.memory_used_mib / g.memory_total_mib
            cells.append(f"mem {g.memory_used_mib:,.0f}/{g.memory_total_mib:,.0f} MiB ({pct:.0f}%)")
        if g.temperature_c is not None:
            cells.append(f"{g.temperature_c:.0f}°C")
        if g.power_w is not None:
            cells.append(f"{g.power_w:.0f} W")
        lines.append("  ".join(cells))
    return lines


def tensorboard_scalars(gpus: Sequence[GpuSample]) -> dict[str, float]:
    """The scalars TensorBoard shows under `system/`."""
    out: dict[str, float] = {}
    for g in gpus:
        base = f"system/gpu{g.index}/"
        for tag, value in (
            ("utilization_pct", g.utilization_pct),
            ("memory_used_mib", g.memory_used_mib),
            ("temperature_c", g.temperature_c),
            ("power_w", g.power_w),
        ):
            if value is not None:
                out[base + tag] = float(value)
    return out
