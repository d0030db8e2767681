"""What the account has seen of each spot pool (instance type x Availability Zone), kept pure.

A pool's history is a 0/1 sequence on absolute ticks (epoch seconds // `policy_tick`),
shared by every job of the deployment: 1 when a spot launch in the pool succeeded or a spot
instance of respot's was running there through a reconcile tick (the ages of runs), 0 when a
launch was refused for capacity or an interruption notice came. A tick with no observation
repeats the last one (as a job's own `avail` does). Within one tick the newest observation
wins, except that a running instance (a weak sighting) never overwrites what the tick already
holds; an observation older than the newest recorded tick is out of order and ignored.

Why the exception: a reconcile tick that finds a job healthy writes nothing to the job, so
its "running" sighting was judged on a read nothing validated. A notice handled between that
read and the sighting's write records its 0 first; the late 1 in the same tick used to win,
and the pool looked fine when it had just been taken (the pools e2e test's flake). Notices,
refusals and launches are judged on the record their transition wrote (compare-and-set), so
they stay authoritative; a running instance only speaks for a tick nothing else spoke for.

Stored as run-length pairs (`PoolRecord.runs`), bounded to `HISTORY_TICKS` ticks: the
adapter (`respot.aws.pools`) writes one item per pool with a conditional write; this module
only computes (the record after an observation, the histories the policy sees, the
observations an event makes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from respot.core.events import (
    CapacityLaunched,
    CapacityUnavailable,
    InterruptionNotice,
    JobEvent,
    ReconcileTick,
)
from respot.core.job import JobRecord, Market, Placement
from respot.core.placement import ControlSettings
from respot.core.states import JobState
from respot.policy.history import RunLengths

HISTORY_TICKS = 2880  # two days of one-minute ticks: enough runs to learn from, a small item
# Refusals that say the pool has no capacity now (not the job's price cap, not an account limit).
NO_CAPACITY = frozenset({"InsufficientInstanceCapacity", "InsufficientCapacity"})


@dataclass(frozen=True)
class PoolKey:
    """One spot pool: an instance type in an Availability Zone."""

    instance_type: str
    availability_zone: str

    @classmethod
    def of(cls, placement: Placement) -> PoolKey:
        """The pool of a placement."""
        return cls(placement.instance_type, placement.availability_zone)

    @property
    def name(self) -> str:
        """`<zone>_<type>`: a name `respot.policy.Pool.named` reads the region from."""
        return f"{self.availability_zone}_{self.instance_type}"


@dataclass(frozen=True)
class Sighting:
    """One observation of a pool: spot could (1) or could not (0) be had at absolute `tick`."""

    pool: PoolKey
    tick: int
    seen: bool
    why: str
    weak: bool = False  # a running instance: fills a tick, never overwrites one (see above)


@dataclass(frozen=True)
class PoolRecord:
    """A pool's history: `runs` (value, length) from absolute tick `start`; `version` for CAS."""

    start: int
    runs: tuple[tuple[int, int], ...]
    version: int = 0

    @property
    def end(self) -> int:
        """The absolute tick after the last recorded one."""
        return self.start + sum(n for _, n in self.runs)

    @property
    def last(self) -> int:
        """The newest recorded value."""
        return self.runs[-1][0]

    def value_at(self, tick: int) -> int | None:
        """The recorded value at absolute `tick`, None outside the record."""
        if tick < self.start or tick >= self.end:
            return None
        at = self.start
        for value, length in self.runs:
            at += length
            if tick < at:
                return value
        return None  # pragma: no cover - end bounds the loop


def absolute_tick(now: datetime, settings: ControlSettings) -> int:
    """The shared tick of `now`: epoch seconds // policy_tick."""
    gap = max(int(settings.policy_tick.total_seconds()), 1)
    return int(now.timestamp()) // gap


def observe(
    record: PoolRecord | None, tick: int, seen: bool, *, weak: bool = False
) -> PoolRecord | None:
    """The record after seeing the pool at `tick`; None if the sighting changes nothing.

    `weak` (a running instance): a tick already recorded keeps its value.
    """
    value = int(seen)
    if record is None or not record.runs:
        return PoolRecord(start=tick, runs=((value, 1),))
    if tick < record.end - 1:
        return None  # older than the newest recorded tick: out of order
    runs = [list(r) for r in record.runs]
    if tick == record.end - 1:
        if runs[-1][0] == value or weak:
            return None  # a duplicate within the tick, or too weak to overwrite it
        runs[-1][1] -= 1  # the newest observation of the tick wins
        if runs[-1][1] == 0:
            runs.pop()
    else:
        gap = tick - record.end  # ticks without an observation repeat the last one
        if gap:
            runs[-1][1] += gap
    if runs and runs[-1][0] == value:
        runs[-1][1] += 1
    else:
        runs.append([value, 1])
    start = record.start
    total = sum(n for _, n in runs)
    while total > HISTORY_TICKS:  # forget the oldest ticks
        drop = min(total - HISTORY_TICKS, runs[0][1])
        runs[0][1] -= drop
        start += drop
        total -= drop
        if runs[0][1] == 0:
            runs.pop(0)
    return replace(record, start=start, runs=tuple((v, n) for v, n in runs))


@dataclass(frozen=True)
class PoolsView:
    """What the policy sees of `pools` at absolute tick `now`: aligned histories and now."""

    histories: tuple[RunLengths, ...]
    seen_now: tuple[bool | None, ...]  # observed at `now` (by any job), None: not observed
    last: tuple[bool | None, ...]  # the newest observation, None: never observed


def view(records: Mapping[PoolKey, PoolRecord], pools: Sequence[PoolKey], now: int) -> PoolsView:
    """Histories of equal length ending at tick now - 1 (what `PoolsObservation` needs).

    They start at the oldest known tick of any of `pools` (at most `HISTORY_TICKS` back). A
    pool is padded before its first observation with that first value, and a pool never
    observed reads as available throughout: unexplored pools are worth a try, and the
    policy's priors weigh a history no more than its length.
    """
    known = [records[p] for p in pools if p in records and records[p].runs]
    start = min((r.start for r in known), default=now)
    start = max(start, now - HISTORY_TICKS)
    histories: list[RunLengths] = []
    seen_now: list[bool | None] = []
    last: list[bool | None] = []
    for pool in pools:
        record = records.get(pool)
        if record is None or not record.runs:
            histories.append(RunLengths([(1, now - start)]))
            seen_now.append(None)
            last.append(None)
            continue
        pairs: list[tuple[int, int]] = []
        if record.start > start:
            pairs.append((record.runs[0][0], min(record.start, now) - start))
        at = record.start
        for value, length in record.runs:
            lo, hi = max(at, start), min(at + length, now)
            if hi > lo:
                pairs.append((value, hi - lo))
            at += length
        if record.end < now:
            pairs.append((record.last, now - max(record.end, start)))
        histories.append(RunLengths(pairs))
        now_value = record.value_at(now)
        seen_now.append(None if now_value is None else bool(now_value))
        last.append(bool(record.last))
    return PoolsView(tuple(histories), tuple(seen_now), tuple(last))


def sightings(
    job: JobRecord | None, event: JobEvent, now: datetime, settings: ControlSettings
) -> list[Sighting]:
    """The pool observations `event` makes, judged on the record as it was before the event.

    Only spot and only the job's current attempt count: a stale or duplicate event says
    nothing new about a pool (and a duplicate within a tick changes no record anyway).
    """
    if job is None:
        return []
    att = job.current
    tick = absolute_tick(now, settings)
    match event:
        case CapacityLaunched():
            if (
                att is not None
                and att.client_token == event.client_token
                and att.placement.market is Market.SPOT
            ):
                return [Sighting(PoolKey.of(att.placement), tick, True, "launched")]
        case CapacityUnavailable():
            if (
                att is not None
                and att.client_token == event.client_token
                and att.placement.market is Market.SPOT
                and event.error_code in NO_CAPACITY
            ):
                return [Sighting(PoolKey.of(att.placement), tick, False, event.error_code)]
        case InterruptionNotice():
            noticed = job.attempt_of_instance(event.instance_id)
            if noticed is None and event.attempt is not None:
                noticed = job.attempt(event.attempt)
            if (
                event.kind != "rebalance"
                and noticed is not None
                and noticed.placement.market is Market.SPOT
                and noticed.notice_at is None
                and noticed.end is None
            ):
                return [Sighting(PoolKey.of(noticed.placement), tick, False, "interruption")]
        case ReconcileTick():
            if (
                att is not None
                and job.state in (JobState.STARTING, JobState.RUNNING)
                and att.placement.market is Market.SPOT
                and att.instance_id is not None
                and att.notice_at is None
                and att.end is None
            ):
                return [Sighting(PoolKey.of(att.placement), tick, True, "running", weak=True)]
    return []
