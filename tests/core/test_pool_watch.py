"""The pools' shared history: observations folded in, aligned views, and what events show."""

from __future__ import annotations

from datetime import timedelta

from respot.core.events import (
    CapacityLaunched,
    CapacityUnavailable,
    InstanceUp,
    InterruptionNotice,
    ReconcileTick,
    Submitted,
)
from respot.core.pool_watch import (
    HISTORY_TICKS,
    UNSEEN,
    PoolKey,
    PoolRecord,
    absolute_tick,
    observe,
    sightings,
    view,
)
from tests.core.factories import SETTINGS, at, submission
from tests.core.test_lifecycle import Driver

A = PoolKey("g5.xlarge", "us-east-1a")
B = PoolKey("g5.xlarge", "us-east-1b")


def fold(*seen: tuple[int, bool]) -> PoolRecord:
    record: PoolRecord | None = None
    for tick, value in seen:
        record = observe(record, tick, value) or record
    assert record is not None
    return record


def test_ticks_nobody_observed_are_recorded_so_and_the_newest_in_a_tick_wins() -> None:
    record = fold((10, True), (13, False), (13, True), (15, False))
    assert record.start == 10
    # 11..12 and 14: nobody looked (UNSEEN); 13 overwritten by the newer 1
    assert list(record.runs) == [(1, 1), (UNSEEN, 2), (1, 1), (UNSEEN, 1), (0, 1)]
    assert record.value_at(13) == 1 and record.value_at(15) == 0 and record.value_at(16) is None
    assert record.value_at(11) is None  # not a sighting
    assert record.last == 0


def test_a_running_instance_fills_a_tick_but_never_overwrites_one() -> None:
    # GIVEN a pool seen running, then taken (a notice's 0) at tick 13
    record = fold((10, True), (13, False))
    # WHEN a reconcile tick's "running" sighting of tick 13 arrives after the notice's 0
    # (judged on a read from before the notice: a healthy tick writes nothing to the job)
    assert observe(record, 13, True, weak=True) is None  # THEN tick 13 stays 0
    # AND a running instance still speaks for a tick nothing spoke for yet
    later = observe(record, 14, True, weak=True)
    assert later is not None and list(later.runs) == [(1, 1), (UNSEEN, 2), (0, 1), (1, 1)]
    # AND a launch in the same tick (a firm sighting) still wins over the 0
    relaunched = observe(record, 13, True)
    assert relaunched is not None and relaunched.value_at(13) == 1


def test_duplicates_and_out_of_order_sightings_change_nothing() -> None:
    record = fold((10, True), (12, False))
    assert observe(record, 12, False) is None  # the same sighting twice
    assert observe(record, 11, True) is None  # older than the newest tick


def test_the_history_is_bounded() -> None:
    record = fold((0, True), (HISTORY_TICKS, False), (3 * HISTORY_TICKS, True))
    assert record.end - record.start == HISTORY_TICKS
    assert record.end == 3 * HISTORY_TICKS + 1 and len(record.runs) == 2


def test_view_reads_the_sightings_since_the_jobs_start_as_a_job_reads_its_own() -> None:
    records = {A: fold((100, True), (104, False)), B: fold((102, True))}
    seen = view(records, [A, B], now=108, since=100)
    assert [list(h) for h in seen.histories] == [
        [1, 1, 1, 1, 0, 0, 0, 0],  # ticks nobody observed repeat the last sighting
        [1, 1, 1, 1, 1, 1, 1, 1],  # padded before its first sighting with that sighting
    ]
    assert seen.seen_now == (None, None) and seen.last == (False, True)
    assert view(records, [A, B], now=104, since=100).seen_now == (False, None)  # B not at 104
    unknown = view(records, [PoolKey("p4d.24xlarge", "us-east-1a")], now=108, since=100)
    assert unknown.seen_now == (None,) and unknown.last == (None,)
    assert [list(h) for h in unknown.histories] == [[1] * 8]  # never observed: up throughout


def test_a_job_is_handed_no_sighting_from_before_its_start() -> None:
    # GIVEN the account saw A up then down long before the job, and down again since
    records = {A: fold((10, True), (20, False), (105, False)), B: fold((50, False))}
    seen = view(records, [A, B], now=108, since=100)
    # THEN A reads from its first sighting since the job's start (padded before it with
    # that sighting); B, seen only before, reads as never observed: up, no last sighting
    assert [list(h) for h in seen.histories] == [[0] * 8, [1] * 8]
    assert seen.last == (False, None) and seen.seen_now == (None, None)
    # AND a sighting at the job's first tick is seen now, with no history yet
    first = view({A: fold((10, True), (100, False))}, [A], now=100, since=100)
    assert first.seen_now == (False,) and [list(h) for h in first.histories] == [[]]
    # AND at most HISTORY_TICKS are handed to a job that has run longer
    old = view(records, [A], now=100 + 2 * HISTORY_TICKS, since=100)
    assert len(old.histories[0]) == HISTORY_TICKS


def test_events_show_capacity_errors_interruptions_and_running_instances() -> None:
    d = Driver()
    d.apply(Submitted(submission()))
    assert d.job is not None
    launch = d.launches()[-1]
    tick = absolute_tick(at(0), SETTINGS)
    refused = CapacityUnavailable(
        launch.attempt, launch.client_token, "InsufficientInstanceCapacity"
    )
    (s,) = sightings(d.job, refused, at(0), SETTINGS)
    assert (s.pool, s.tick, s.seen) == (PoolKey.of(launch.placement), tick, False)
    # the job's price cap is not the pool's capacity; a stale token says nothing
    capped = CapacityUnavailable(launch.attempt, launch.client_token, "SpotMaxPriceTooLow")
    assert sightings(d.job, capped, at(0), SETTINGS) == []
    stale = CapacityUnavailable(launch.attempt, "old-token", "InsufficientInstanceCapacity")
    assert sightings(d.job, stale, at(0), SETTINGS) == []
    # launched (1), then running through ticks (1), then noticed (0)
    (ok,) = sightings(d.job, _launched(d), at(0), SETTINGS)
    assert ok.seen
    d.launch_ok("i-1")
    later = at(timedelta(minutes=5).total_seconds())
    assert sightings(d.job, ReconcileTick(later), later, SETTINGS) == []  # not started yet
    d.apply(InstanceUp("i-1", 1, "running"))
    (running,) = sightings(d.job, ReconcileTick(later), later, SETTINGS)
    assert running.seen and running.tick == absolute_tick(later, SETTINGS)
    assert running.weak  # judged on a read no write validated: never overwrites a tick
    notice = InterruptionNotice("i-1", 1, "interruption", "terminate")
    (gone,) = sightings(d.job, notice, later, SETTINGS)
    assert not gone.seen and gone.why == "interruption" and not gone.weak
    d.apply(notice)
    assert sightings(d.job, notice, later, SETTINGS) == []  # a duplicate notice


def _launched(d: Driver) -> CapacityLaunched:
    last = d.launches()[-1]
    return CapacityLaunched(last.attempt, last.client_token, "i-1", "sir-1", None, 0.3)
