"""Recent use in GPU-hours, forgotten with a half-life: fair share's memory.

A researcher's usage `u` at time `t` is the sum over their past GPU-time of
`gpus * 2 ** (-(t - s) / half_life)` ds: a GPU-hour used one half-life ago counts half.
It is stored settled (`Usage`: a value and the time it was computed at) and decays lazily:
`decayed(u, now)`. A lease's GPU-time is added when it ends (`settle`); while it runs,
`running_usage` gives its contribution so far, so that the planner sees both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Usage:
    """Decayed GPU-hours of one researcher as of `at`."""

    gpu_hours: float
    at: datetime


def _factor(seconds: float, half_life_hours: float) -> float:
    if half_life_hours <= 0:
        return 0.0
    return float(2.0 ** (-max(seconds, 0.0) / (half_life_hours * 3600.0)))


def decayed(usage: Usage | None, now: datetime, half_life_hours: float) -> float:
    """`usage` decayed to `now` (0 for none)."""
    if usage is None:
        return 0.0
    return usage.gpu_hours * _factor((now - usage.at).total_seconds(), half_life_hours)


def running_usage(gpus: int, start: datetime, now: datetime, half_life_hours: float) -> float:
    """The decayed GPU-hours of `gpus` GPUs used from `start` until `now`, as of `now`."""
    seconds = max((now - start).total_seconds(), 0.0)
    if half_life_hours <= 0:
        return 0.0
    tau = half_life_hours * 3600.0 / math.log(2.0)  # seconds
    return gpus * tau * (1.0 - math.exp(-seconds / tau)) / 3600.0


def settle(
    usage: Usage | None,
    gpus: int,
    start: datetime,
    end: datetime,
    half_life_hours: float,
) -> Usage:
    """`usage` plus a lease's GPU-time from `start` to `end`, as of `end` (or later)."""
    at = end if usage is None or usage.at <= end else usage.at
    base = decayed(usage, at, half_life_hours)
    added = running_usage(gpus, start, end, half_life_hours) * _factor(
        (at - end).total_seconds(), half_life_hours
    )
    return Usage(gpu_hours=base + added, at=at)
