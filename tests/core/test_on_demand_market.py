"""`market: on-demand` (a job's spec; `respot notebook start --on-demand`): on-demand from the
first launch, every replacement on-demand, never moved to spot, whatever policy the control
plane passes (`core.placement.policy_for`)."""

from __future__ import annotations

from datetime import timedelta

from respot.core.events import (
    AgentReport,
    CapacityUnavailable,
    InstanceUp,
    ReconcileTick,
    Submitted,
)
from respot.core.job import Market
from respot.core.states import JobState
from respot.wire.messages import AgentStarted
from tests.core.factories import SETTINGS, T0, agent, at, submission
from tests.core.market_sim import Sim
from tests.core.test_lifecycle import Driver
from tests.core.test_spot_return import HOUR, returns_at


def test_the_first_launch_is_on_demand_without_a_fallback_note() -> None:
    d = Driver()
    d.apply(Submitted(submission(market="on-demand")))
    assert d.state is JobState.REQUESTED
    (launch,) = d.launches()
    # On-demand, with no spot price: no spot request, so no spot interruption can come
    assert launch.placement.market is Market.ON_DEMAND
    assert launch.placement.max_price is None
    assert d.job is not None
    kinds = [e.kind for e in d.job.timeline]
    assert "fallback" not in kinds, kinds  # asked for, not fallen back to (Slack says so)
    assert d.job.policy["market"] == "on-demand"


def test_a_spot_job_is_unchanged() -> None:
    d = Driver()
    d.apply(Submitted(submission()))
    assert d.launches()[-1].placement.market is Market.SPOT


def test_a_lost_instance_is_replaced_on_demand_even_past_max_interruptions() -> None:
    # GIVEN an on-demand job training on i-1, and max_interruptions 0 (a spot job whose
    # instance is lost with fallback would move to on-demand; this one is already there)
    d = Driver()
    d.apply(Submitted(submission(market="on-demand", max_interruptions=0)))
    d.launch_ok("i-1", 1)
    d.apply(InstanceUp("i-1", 1, "running", None), 2)
    assert d.job is not None
    d.apply(AgentReport(agent(d.job, 1, "i-1", AgentStarted(restored_step=None))), 3)
    assert d.state is JobState.RUNNING
    # WHEN its agent goes silent past heartbeat_timeout (the instance is lost)
    silent = SETTINGS.heartbeat_timeout.total_seconds() + 10
    d.apply(ReconcileTick(at(silent)), silent)
    # THEN the replacement is requested on-demand again, not failed, not spot
    assert d.state is JobState.REQUESTED, d.job.reason if d.job else None
    markets = [launch.placement.market for launch in d.launches()]
    assert markets == [Market.ON_DEMAND, Market.ON_DEMAND]
    assert d.job is not None and len(d.job.attempts) == 2
    assert "fallback" not in [e.kind for e in d.job.timeline]


def test_a_deadline_job_never_returns_to_spot_with_spot_up_everywhere() -> None:
    # GIVEN a deadline job (4 h of work due in 10 h: plenty of slack for spot) on the live
    # policy across pools, with spot up in a pool from the start, seen by the account
    sim = Sim(4 * HOUR, 10 * HOUR, returns_at(0))
    deadline = (T0 + timedelta(seconds=10 * HOUR)).isoformat()
    spec = {"deadline": deadline, "estimated_runtime": f"{4 * HOUR}s", "market": "on-demand"}
    sim.apply(Submitted(submission(**spec)))
    sim._drain()
    sim.run()
    job = sim.job
    # THEN it ran on one on-demand instance to completion: no spot launch, no return asked
    assert job is not None and job.state is JobState.COMPLETED, sim.kinds()
    assert sim.markets() == ["on-demand"], sim.markets()
    assert "spot-return" not in sim.kinds() and "fallback" not in sim.kinds()
    assert len(sim.instances) == 1 and job.interruptions == 0
    # AND the same job without market: on-demand does go to spot here (the test can fail)
    spot = Sim(4 * HOUR, 10 * HOUR, returns_at(0)).run()
    assert spot.markets()[0] == "spot", spot.markets()


def test_no_on_demand_capacity_waits_and_asks_on_demand_again() -> None:
    # GIVEN an on-demand job whose every on-demand pool refuses (2 types x 2 zones)
    d = Driver()
    d.apply(Submitted(submission(market="on-demand", max_spot_wait="10m")))
    for i in range(4):
        last = d.launches()[-1]
        d.apply(
            CapacityUnavailable(last.attempt, last.client_token, "InsufficientInstanceCapacity"), i
        )
    # THEN it waits (no launch of spot in between, no loop of follow-ups) ...
    assert d.state is JobState.QUEUED
    assert len(d.launches()) == 4
    # ... and the next tick, past max_spot_wait too, asks on-demand again
    d.apply(ReconcileTick(at(601)), 601)
    assert d.state is JobState.REQUESTED
    assert {launch.placement.market for launch in d.launches()} == {Market.ON_DEMAND}
    assert d.job is not None and d.job.reason is None
