"""The benchmark's `respot` (`LiveView`) and the live control plane must not drift apart.

`respot bench placement` reports as `respot` the multi-pool policy fed only one job's own
sightings (`respot.policy.live_view.LiveView`). The control plane feeds the same policy
from the account's pool records (`respot.core.pool_watch`) and ranks the pools the
lifecycle asks (`respot.core.pool_placement._rank`). Here one job's sightings, as LiveView
makes them on generated windows, are written into pool records the way the control plane
writes them (`pool_watch.observe` on absolute ticks), and at every tick the job places from
idle the control plane's observation and ranking are compared with LiveView's: the same
histories, availability and observed flags, the same decision and the same pools in the
same order. A change to either side that the other does not follow fails here.

With `account`, the account already holds a colleague's sightings from before the job's
first tick, written into the records the same way. The control plane hands a job only the
account's sightings from its own start on (`pool_watch.view`'s `since`), so LiveView is
given none of them and both sides must still agree: a record read from before the job's
start fails here. The colleague also goes on sighting pools while the job runs (`beside=`),
written into the records at those ticks before the job's own; those are handed over.
"""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from respot.core.events import Submitted
from respot.core.job import Market
from respot.core.job import Placement as LivePlacement
from respot.core.lifecycle import decide
from respot.core.pool_placement import _observation, _rank
from respot.core.pool_watch import PoolKey, PoolRecord, view
from respot.core.pool_watch import observe as record_sighting
from respot.policy import Choice, Job, MultiPoolPolicy, Observation, Pool, simulate_pools
from respot.policy.live_view import LiveView, _Sightings
from respot.policy.pools import NOTHING, Placement, PoolsObservation
from tests.core.factories import SETTINGS, T0, submission

GAP = 60  # the control plane's policy tick
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
TYPES = ("g5.xlarge", "g4dn.xlarge")
START = 1_000_000  # the window's tick 0 on the account's absolute ticks


# every sighting LiveView makes, in order: (window tick, the pool's _Sightings, value)
SIGHTINGS: list[tuple[int, _Sightings, int]] = []


class _Recording(MultiPoolPolicy):
    """The policy LiveView runs, keeping every observation it was given and, per tick, how
    many sightings were made before it was first asked (an interruption notice)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[PoolsObservation] = []
        self.before: dict[int, int] = {}

    def place(self, obs: PoolsObservation) -> Placement:
        self.seen.append(obs)
        self.before.setdefault(obs.tick, len(SIGHTINGS))
        return super().place(obs)


def _window(seed: int, pools: int, ticks: int) -> list[list[int]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(pools):
        row: list[int] = []
        while len(row) < ticks:
            row += [int(rng.random() < 0.6)] * rng.randint(1, 12)
        rows.append(row[:ticks])
    return rows


BEFORE = 30  # ticks of the account's sightings before the job's tick 0, in `account` runs


def _colleague(seed: int, pools: int) -> list[list[tuple[int, int]] | None]:
    """A colleague's sightings before the job: per pool (tick, value) in order, or None."""
    rng = random.Random(1000 + seed)
    sightings: list[list[tuple[int, int]] | None] = []
    for k in range(pools):
        if k > 0 and rng.random() < 0.3:
            sightings.append(None)  # never observed
            continue
        ticks = sorted(rng.sample(range(BEFORE), rng.randint(1, 8)))
        if k == 0:
            ticks = sorted({0, *ticks})  # the account's record starts BEFORE ticks back
        sightings.append([(t, int(rng.random() < 0.5)) for t in ticks])
    return sightings


@pytest.mark.parametrize("account", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_the_control_plane_sees_and_ranks_what_the_live_view_does(
    seed: int, account: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = Job(40 * 60, 90 * 60, 3 * 60)  # 40 min of work in 90 min, a 3-min changeover
    live_pools = [
        LivePlacement(
            market=Market.SPOT, instance_type=t, subnet_id=f"subnet-{z}", availability_zone=z
        )
        for z in ZONES
        for t in TYPES
    ][: 3 + seed % 4]
    keys = [PoolKey.of(p) for p in live_pools]
    pools = [Pool.named(k.name) for k in keys]
    window = _window(seed, len(pools), job.ticks(GAP) + 1)
    SIGHTINGS.clear()
    original = _Sightings.see

    def see(self: _Sightings, tick: int, value: int) -> None:
        SIGHTINGS.append((tick, self, value))
        original(self, tick, value)

    monkeypatch.setattr(_Sightings, "see", see)
    recording = _Recording()
    colleague: list[list[tuple[int, int]] | None] = (
        _colleague(seed, len(pools)) if account else [None] * len(pools)
    )
    beside: dict[int, list[tuple[int, int]]] = {}
    if account:  # the colleague's sightings while the job runs: a few pools at a few ticks
        rng = random.Random(2000 + seed)
        for tick in sorted(rng.sample(range(job.ticks(GAP)), 6)):
            beside[tick] = [(rng.randrange(len(pools)), int(rng.random() < 0.5))]
    live = LiveView(recording, beside=beside)  # the colleague's earlier sightings: not handed
    outcome = simulate_pools(live, pools, window, job, GAP)
    assert not outcome.missed
    made = [(t, live._pools.index(obj), value) for t, obj, value in SIGHTINGS]

    record = decide(
        None,
        Submitted(submission(deadline=(T0 + timedelta(hours=2)).isoformat())),
        now=T0,
        settings=SETTINGS,
    ).record
    assert record is not None
    by_tick: dict[int, list[PoolsObservation]] = {}
    for obs in recording.seen:
        by_tick.setdefault(obs.tick, []).append(obs)
    compared = 0
    for tick, asked in by_tick.items():
        first = asked[0]
        if first.held != NOTHING:
            continue  # the placement from idle: what the control plane ranks
        # the account's records: every sighting LiveView made before this tick's asking,
        # written as the control plane writes them (absolute ticks, the newest wins)
        records: dict[PoolKey, PoolRecord] = {}
        for key, seen_before in zip(keys, colleague, strict=True):
            for t, value in seen_before or ():
                updated = record_sighting(records.get(key), START - BEFORE + t, bool(value))
                records[key] = updated or records[key]
        for t, k, value in made[: recording.before[tick]]:
            key = keys[k]
            updated = record_sighting(records.get(key), START + t, bool(value))
            records[key] = updated or records[key]
        seen = view(records, keys, START + tick, START)
        available = [s is not False for s in seen.seen_now]
        base = Observation(
            tick=first.tick,
            gap_seconds=first.gap_seconds,
            work_seconds=first.work_seconds,
            deadline_seconds=first.deadline_seconds,
            changeover_seconds=first.changeover_seconds,
            done_seconds=first.done_seconds,
            remaining_changeover_seconds=first.remaining_changeover_seconds,
            held=Choice.NONE,
            spot_available=False,
            history=(),
        )
        observed = tuple(s is not None for s in seen.seen_now)
        control = _observation(base, live_pools, seen, tuple(available), observed, NOTHING, record)
        # THEN the control plane's observation is LiveView's: availability, what was seen
        # this tick, every pool's history (the pools' names are <zone>_<type> on both sides)
        assert [p.name for p in control.pools] == [p.name for p in pools]
        assert control.available == first.available, tick
        assert control.observed == first.observed, tick
        for ours, theirs in zip(control.histories, first.histories, strict=True):
            assert list(ours) == list(theirs), tick
            assert len(theirs) == tick  # from the job's start: nothing of the account's before
        # AND it ranks the pools in the order LiveView asks them (LiveView stops at the
        # first that has spot; the control plane ranks every pool the policy would take)
        decision, ranked = _rank(base, live_pools, seen, available, NOTHING, record)
        live_order = [o_pick for o_pick in _picks(asked)]
        assert [live_pools.index(p) for p in ranked][: len(live_order)] == live_order, tick
        assert decision.placement == MultiPoolPolicy().place(first), tick
        compared += 1
    assert compared >= 3  # the comparison ran on several placements from idle


def _picks(asked: list[PoolsObservation]) -> list[int]:
    """The pools LiveView asked at one tick, in order: the policy's pick at each ask."""
    picks = []
    for obs in asked:
        placement = MultiPoolPolicy().place(obs)
        if placement.pool is None:
            break
        picks.append(placement.pool)
    return picks
