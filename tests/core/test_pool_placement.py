"""Live placement across pools: the multi-pool policy ranks the pools the lifecycle asks."""

from __future__ import annotations

from datetime import datetime, timedelta

from respot.core.effects import LaunchInstance
from respot.core.events import CapacityUnavailable, JobEvent, Submitted
from respot.core.job import JobRecord, Market
from respot.core.lifecycle import decide
from respot.core.pool_placement import PoolPlacementPolicy
from respot.core.pool_watch import PoolKey, PoolRecord, absolute_tick, observe
from respot.core.states import JobState
from tests.core.factories import SETTINGS, T0, submission

FLICKER = PoolKey("g5.xlarge", "us-east-1a")  # the first pool of the fixed order
STEADY = PoolKey("g5.xlarge", "us-east-1b")
G4DN_A = PoolKey("g4dn.xlarge", "us-east-1a")
G4DN_B = PoolKey("g4dn.xlarge", "us-east-1b")
NOW = absolute_tick(T0, SETTINGS)
# Jobs in these tests were submitted before the records' first sighting (queued, or waiting
# for capacity): a job is handed only the account's sightings since its start.
SUBMITTED = T0 - timedelta(hours=5)


def history(pattern: list[int], end: int = NOW) -> PoolRecord:
    """A pool observed tick by tick up to end - 1."""
    record: PoolRecord | None = None
    for i, value in enumerate(pattern):
        record = observe(record, end - len(pattern) + i, bool(value)) or record
    assert record is not None
    return record


def records() -> dict[PoolKey, PoolRecord]:
    return {
        FLICKER: history([1, 0] * 120),  # up half the time, one tick at a time
        STEADY: history([0] * 40 + [1] * 200),  # up for the last 200 ticks
        G4DN_A: history([0] * 240),
        G4DN_B: history([0] * 240),
    }


class Run:
    def __init__(self, policy: PoolPlacementPolicy) -> None:
        self.policy = policy
        self.job: JobRecord | None = None
        self.launches: list[LaunchInstance] = []

    def apply(self, event: JobEvent, now: datetime = T0) -> None:
        decision = decide(self.job, event, now=now, settings=SETTINGS, market_policy=self.policy)
        if decision.record is not None:
            self.job = decision.record
        self.launches += [e for e in decision.effects if isinstance(e, LaunchInstance)]
        if decision.follow_up is not None:
            self.apply(decision.follow_up, now)


def deadline_submission() -> Submitted:
    deadline = (T0 + timedelta(hours=12)).isoformat()
    return Submitted(submission(deadline=deadline, estimated_runtime="4h"))


def test_the_pool_with_the_longest_expected_run_is_asked_first() -> None:
    # GIVEN the fixed order's first pool flickers and another pool has been up for hours
    # (seen by the account since the job was submitted)
    policy = PoolPlacementPolicy(records())
    choice = policy.choose(_job(deadline_submission(), SUBMITTED), T0, SETTINGS)
    # THEN the policy takes spot in the steady pool first, and the pool whose runs last one
    # tick last (after the pools with no run seen, which only the Lindy prior speaks for)
    assert choice.market is Market.SPOT and "deadline policy across pools" in choice.reason
    assert [PoolKey.of(p) for p in choice.pools] == [STEADY, G4DN_A, G4DN_B, FLICKER]


def test_the_fixed_order_without_histories_is_kept_for_a_job_without_a_deadline() -> None:
    down_now = {FLICKER: history([1, 1], end=NOW + 1)}
    down_now[FLICKER] = observe(down_now[FLICKER], NOW, False) or down_now[FLICKER]
    choice = PoolPlacementPolicy(down_now).choose(_job(Submitted(submission())), T0, SETTINGS)
    # a pool seen down this tick is asked last; the others keep the fixed order
    assert choice.market is Market.SPOT
    assert PoolKey.of(choice.pools[-1]) == FLICKER and len(choice.pools) == 4


def test_a_refused_pool_is_followed_by_the_next_ranked_pool() -> None:
    run = Run(PoolPlacementPolicy(records()))
    # GIVEN a job submitted before the account saw anything: the fixed order's first pool
    run.apply(deadline_submission(), now=SUBMITTED)
    first = run.launches[-1]
    assert PoolKey.of(first.placement) == FLICKER
    # WHEN it is refused hours later, after the account's sightings since the submission
    refused = "InsufficientInstanceCapacity"
    run.apply(CapacityUnavailable(first.attempt, first.client_token, refused), now=T0)
    # THEN the pool the policy ranks first is asked, and after its refusal the next one
    second = run.launches[-1]
    assert PoolKey.of(second.placement) == STEADY
    run.apply(CapacityUnavailable(second.attempt, second.client_token, refused), now=T0)
    assert PoolKey.of(run.launches[-1].placement) == G4DN_A
    assert run.job is not None and run.job.state is JobState.REQUESTED


def _job(sub: Submitted, submitted: datetime = T0) -> JobRecord:
    decision = decide(None, sub, now=submitted, settings=SETTINGS)
    assert decision.record is not None
    return decision.record


def test_pools_nobody_asked_this_tick_are_asked_not_waited_for() -> None:
    # GIVEN every pool was last seen down (the flickering pool a tick ago, after runs of one
    # tick each; the others for hours) and nobody has asked any of them this tick
    seen = {
        FLICKER: history([1, 0] * 120),
        STEADY: history([1] * 200 + [0] * 40),
        G4DN_A: history([0] * 240),
        G4DN_B: history([0] * 240),
    }
    policy = PoolPlacementPolicy(seen)
    job = _job(deadline_submission(), SUBMITTED)
    # THEN the job asks now, every minute (asking is how to find out); read as runs that
    # start this tick, the flickering pool's would look likely to end at once, and the
    # policy's run rule would wait for it tick after tick. The pool whose runs last is
    # asked first, and if it refuses, its outage is waited out rather than the others
    # tried (the plan of `_stick_to_a_pool`: its new runs need far fewer restarts than the
    # flickering pool's or those of pools never seen up, and 8 h of slack fit the waits)
    for minutes in range(0, 5):
        now = T0 + timedelta(minutes=minutes)
        choice = policy.choose(job, now, SETTINGS)
        assert choice.market is Market.SPOT, choice.reason
        assert list(map(PoolKey.of, choice.pools)) == [STEADY], choice.reason
