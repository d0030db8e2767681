"""What the account has seen of each spot pool (instance type x Availability Zone), kept pure.

A pool's record is a sequence on absolute ticks (epoch seconds // `policy_tick`), shared by
every job of the deployment: 1 when a spot launch in the pool succeeded or a spot instance
of respot's was running there through a reconcile tick (the ages of runs), 0 when a launch
was refused for capacity or an interruption notice came, `UNSEEN` for a tick between two
sightings that nobody observed. Within one tick the newest observation wins, except that a
running instance (a weak sighting) never overwrites what the tick already holds; an
observation older than the newest recorded tick is out of order and ignored. (Records
written before 2026-11-27 filled unobserved ticks with the last sighting; those repeats read
as sightings until they age out of the record, `HISTORY_TICKS` later.)

What a job is handed (`view`) starts at the job's own first tick (`since`, its creation):
the account's sightings from then on, its colleagues' included, read as a job alone reads
its own (a tick nobody observed repeats the last sighting; before its first, a pool reads
as that first one; a pool nobody observed since reads as up throughout). Sightings from
before the job's start are not handed over: measured on the development sets, the synthetic
markets and twelve fresh ones, a colleague's two days before moved the mean gap closed by
-31 to +6 points and put four more cells above round-robin, where the account's sightings
from the job's start on stay within -1 to +4 points of a job alone
(bench/placement/issue28/README.md, "What the account's shared sightings do").

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
UNSEEN = 2  # a recorded tick nobody observed (between two sightings)
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
        """The newest recorded value (always a sighting: a gap is recorded before one)."""
        return self.runs[-1][0]

    def value_at(self, tick: int) -> int | None:
        """The sighting at absolute `tick`: 0/1, None outside the record or unobserved."""
        if tick < self.start or tick >= self.end:
            return None
        at = self.start
        for value, length in self.runs:
            at += length
            if tick < at:
                return None if value == UNSEEN else value
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
        gap = tick - record.end  # ticks nobody observed, recorded as such
        if gap:
            runs.append([UNSEEN, gap])
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


def view(
    records: Mapping[PoolKey, PoolRecord], pools: Sequence[PoolKey], now: int, since: int
) -> PoolsView:
    """Histories of equal length over ticks since .. now - 1 (what `PoolsObservation` needs).

    `since`: the job's first tick (at most `HISTORY_TICKS` back); only the account's
    sightings from then on count, read as `respot.policy.live_view.LiveView` reads a job's
    own: a tick nobody observed repeats the last sighting, a pool is padded before its first
    sighting with that sighting, and a pool nobody observed since reads as available
    throughout (unexplored pools are worth a try; the policy's priors weigh a history no
    more than its length). `seen_now` and `last` likewise count only sightings since then.
    """
    start = min(max(since, now - HISTORY_TICKS), now)
    histories: list[RunLengths] = []
    seen_now: list[bool | None] = []
    last: list[bool | None] = []
    for pool in pools:
        record = records.get(pool)
        pairs = _since(record, start, now)
        first = next((v for v, _ in pairs if v != UNSEEN), None)
        if first is None:  # nobody observed it since the job's start (before this tick)
            histories.append(RunLengths([(1, now - start)]))
        else:
            read: list[tuple[int, int]] = []
            previous = first  # before the first sighting: that sighting
            for value, length in pairs:
                # nobody looked: the last sighting repeated
                previous = previous if value == UNSEEN else value
                read.append((previous, length))
            histories.append(RunLengths(read))
        now_value = None if record is None else record.value_at(now)
        seen_now.append(None if now_value is None else bool(now_value))
        if record is not None and record.runs and record.end - 1 >= start:
            last.append(bool(record.last))  # the newest sighting, made since the start
        else:
            last.append(None)
    return PoolsView(tuple(histories), tuple(seen_now), tuple(last))


def _since(record: PoolRecord | None, start: int, now: int) -> list[tuple[int, int]]:
    """The record's runs clipped to ticks start .. now - 1, UNSEEN where it holds nothing."""
    if record is None or not record.runs:
        return [(UNSEEN, now - start)]
    pairs: list[tuple[int, int]] = []
    if record.start > start:
        pairs.append((UNSEEN, min(record.start, now) - start))
    at = record.start
    for value, length in record.runs:
        lo, hi = max(at, start), min(at + length, now)
        if hi > lo:
            pairs.append((value, hi - lo))
        at += length
    if record.end < now:
        pairs.append((UNSEEN, now - max(record.end, start)))
    return pairs


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
