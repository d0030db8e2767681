"""The vocabulary of placement: choices, what a policy observes, jobs, prices and spot traces.

Pure Python on purpose: the live control plane imports this module in a Lambda on every
reconcile tick, so it must stay cheap to import (no numpy).
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Protocol, overload, runtime_checkable

from respot.policy.exceptions import JobSpecError, TraceError

# Prices of the benchmark (spot-policy.md), dollars per instance-hour.
SPOT_PRICE_PER_HOUR = 0.9731
ON_DEMAND_PRICE_PER_HOUR = 3.06
SECONDS_PER_HOUR = 3600


class Choice(enum.Enum):
    """What to hold during one tick."""

    NONE = "none"  # hold nothing: nothing billed, no progress, any changeover is lost
    SPOT = "spot"  # hold a spot instance (counts as NONE when spot is unavailable this tick)
    ON_DEMAND = "on-demand"  # hold an on-demand instance: always available, ~3x the price


@dataclass(frozen=True, slots=True)
class Observation:
    """Everything a policy may see at the start of tick `tick` (the present and the past only).

    Times are integer seconds. `deadline_seconds` is measured from the job's start; the last
    tick that can make progress is `deadline_seconds // gap_seconds - 1`.
    """

    tick: int
    gap_seconds: int  # G: tick length
    work_seconds: int  # C: compute the job needs in total
    deadline_seconds: int  # D: from the job's start
    changeover_seconds: int  # d: billed, progress-free time on every new instance
    done_seconds: int  # w: work done (checkpointed) so far
    remaining_changeover_seconds: int  # r: changeover still to pay on the held instance
    held: Choice  # what was held during the previous tick (NONE after a preemption)
    spot_available: bool  # a[tick]
    history: Sequence[int]  # a[0..tick-1], 1 = spot was available, 0 = not

    @property
    def last_tick(self) -> int:
        """Index of the last tick before the deadline (-1 when the deadline is shorter than G)."""
        return self.deadline_seconds // self.gap_seconds - 1

    @property
    def ticks_left(self) -> int:
        """Ticks that can still make progress, this one included."""
        return self.deadline_seconds // self.gap_seconds - self.tick

    @property
    def remaining_seconds(self) -> int:
        """Work still to do."""
        return max(self.work_seconds - self.done_seconds, 0)

    @property
    def slack_seconds(self) -> int:
        """Tick-aligned time left minus work left: what waiting and changeovers may still use."""
        return self.ticks_left * self.gap_seconds - self.remaining_seconds


class HistoryView(Sequence[int]):
    """The first `length` entries of a window, without copying them.

    The simulator hands one of these to the policy every tick; all views of a window share
    the same `source` tuple, which lets a policy extend incremental statistics instead of
    recomputing them (and recompute from scratch for any other sequence).
    """

    __slots__ = ("_length", "source")

    def __init__(self, source: tuple[int, ...], length: int) -> None:
        if not 0 <= length <= len(source):
            raise ValueError(f"length {length} outside 0..{len(source)}")
        self.source = source
        self._length = length

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[int, ...]: ...

    def __getitem__(self, index: int | slice) -> int | tuple[int, ...]:
        if isinstance(index, slice):
            return self.source[: self._length][index]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("history index out of range")
        return self.source[index]

    def __iter__(self) -> Iterator[int]:
        return islice(self.source, self._length)

    def __repr__(self) -> str:
        return f"HistoryView(length={self._length})"


@runtime_checkable
class Policy(Protocol):
    """Chooses what to hold for one tick. Decisions are a function of the observation alone."""

    name: str

    def choose(self, obs: Observation) -> Choice:
        """Return the choice for tick `obs.tick`."""
        ...


@dataclass(frozen=True, slots=True)
class Job:
    """A job of the benchmark: work C, deadline D from its start, changeover d (seconds)."""

    work_seconds: int
    deadline_seconds: int
    changeover_seconds: int

    def __post_init__(self) -> None:
        if self.work_seconds <= 0:
            raise JobSpecError(f"work must be positive, got {self.work_seconds} s")
        if self.deadline_seconds <= 0:
            raise JobSpecError(f"deadline must be positive, got {self.deadline_seconds} s")
        if self.changeover_seconds < 0:
            raise JobSpecError(f"changeover must be >= 0, got {self.changeover_seconds} s")

    @classmethod
    def from_hours(cls, work: float, deadline: float, changeover: float) -> Job:
        """Build a job from hours, rounded to whole seconds as the rules require."""
        return cls(
            work_seconds=round(work * SECONDS_PER_HOUR),
            deadline_seconds=round(deadline * SECONDS_PER_HOUR),
            changeover_seconds=round(changeover * SECONDS_PER_HOUR),
        )

    def ticks(self, gap_seconds: int) -> int:
        """Ticks before the deadline: floor(D / G)."""
        return self.deadline_seconds // gap_seconds

    def window_ticks(self, gap_seconds: int) -> int:
        """Ticks of trace in a window: floor(D / G) + 1 (the last only decides a preemption)."""
        return self.ticks(gap_seconds) + 1

    def feasible(self, gap_seconds: int) -> bool:
        """Whether on-demand alone from the start finishes by the deadline."""
        return on_demand_ticks(self, gap_seconds) <= self.ticks(gap_seconds)


def tick_price(choice: Choice, gap_seconds: int) -> float:
    """Dollars billed for holding `choice` during one tick of `gap_seconds`."""
    if choice is Choice.SPOT:
        return SPOT_PRICE_PER_HOUR * gap_seconds / SECONDS_PER_HOUR
    if choice is Choice.ON_DEMAND:
        return ON_DEMAND_PRICE_PER_HOUR * gap_seconds / SECONDS_PER_HOUR
    return 0.0


def on_demand_ticks(job: Job, gap_seconds: int) -> int:
    """Ticks on-demand alone needs: ceil((C + d) / G)."""
    return -(-(job.work_seconds + job.changeover_seconds) // gap_seconds)


def on_demand_cost(job: Job, gap_seconds: int) -> float:
    """The benchmark's normalizer: ceil((C + d) / G) * p_od * G / 3600."""
    return on_demand_ticks(job, gap_seconds) * tick_price(Choice.ON_DEMAND, gap_seconds)


@dataclass(frozen=True, slots=True)
class Trace:
    """A spot availability trace: one 0/1 entry per tick of `gap_seconds`."""

    name: str
    gap_seconds: int
    availability: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.availability)

    def window_starts(self, window_ticks: int, windows: int) -> list[int]:
        """Start ticks of the benchmark's windows: floor(k * (L - W) / N), k = 0..N-1."""
        spare = len(self.availability) - window_ticks
        if spare < 0:
            raise TraceError(
                f"{self.name}: {len(self.availability)} ticks is shorter than a window "
                f"of {window_ticks} ticks"
            )
        return [k * spare // windows for k in range(windows)]

    def window(self, start: int, window_ticks: int) -> tuple[int, ...]:
        """The `window_ticks` entries from `start`: all a policy run on that window may see."""
        return self.availability[start : start + window_ticks]


def parse_trace(name: str, payload: object, *, source: str | None = None) -> Trace:
    """Validate a decoded trace document `{"metadata": {"gap_seconds": G}, "data": [...]}`.

    `source` (default: `name`) is how errors refer to the document, e.g. its path.
    """
    where = source or name
    if not isinstance(payload, dict):
        raise TraceError(f"{where}: expected a JSON object with 'metadata' and 'data'")
    metadata = payload.get("metadata")
    if not isinstance(metadata, dict) or "gap_seconds" not in metadata:
        raise TraceError(f"{where}: missing metadata.gap_seconds")
    gap = metadata["gap_seconds"]
    if isinstance(gap, float) and gap.is_integer():
        gap = int(gap)
    if isinstance(gap, bool) or not isinstance(gap, int) or gap <= 0:
        raise TraceError(f"{where}: metadata.gap_seconds must be a positive integer, got {gap!r}")
    data = payload.get("data")
    if not isinstance(data, list) or not data:
        raise TraceError(f"{where}: 'data' must be a non-empty list of availability counts")
    availability = []
    for index, value in enumerate(data):
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise TraceError(f"{where}: data[{index}] must be a count >= 0, got {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            raise TraceError(f"{where}: data[{index}] must be finite, got {value!r}")
        availability.append(1 if value > 0 else 0)
    return Trace(name=name, gap_seconds=gap, availability=tuple(availability))


def load_trace(path: Path) -> Trace:
    """Read one trace file; `TraceError` names the file and the problem."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from exc
    return parse_trace(path.stem, payload, source=str(path))


def load_traces(directory: Path) -> list[Trace]:
    """Read every `*.json` trace in `directory`, sorted by file name."""
    if not directory.is_dir():
        raise TraceError(f"{directory}: no such directory")
    paths = sorted(p for p in directory.iterdir() if p.suffix == ".json" and p.is_file())
    if not paths:
        raise TraceError(f"{directory}: no trace files (*.json)")
    return [load_trace(p) for p in paths]
