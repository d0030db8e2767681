"""On-demand -> spot while a job trains: the decision, and the safety of the move.

`PoolPlacementPolicy.switch_running` moves a job on on-demand back to spot when the pools'
shared histories show spot up; the lifecycle asks the on-demand agent to checkpoint and stop
(`StopAttempt`), and requests spot once the agent says it stopped with that checkpoint. Each
test runs `tests.core.market_sim`: the pure core against a minute-by-minute market.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from respot.core.cost import ledger
from respot.core.deadline import observe
from respot.core.effects import LaunchInstance, StopAttempt
from respot.core.events import AgentReport, JobEvent
from respot.core.job import JobRecord, Market
from respot.core.lifecycle import decide
from respot.core.pool_placement import MAX_SPOT_RETURNS, PoolPlacementPolicy
from respot.core.pool_watch import PoolKey, PoolRecord
from respot.messages import AgentCheckpoint, AgentPreempted, AgentProgress
from tests.core.factories import SETTINGS, at
from tests.core.market_sim import BOOT, TICK, Market_, Sim
from tests.core.test_pool_placement import FLICKER, G4DN_A, G4DN_B, NOW, STEADY, history

POOLS = (FLICKER, STEADY, G4DN_A, G4DN_B)
HOUR = 3600


def all_down() -> dict[PoolKey, PoolRecord]:
    """The account saw no spot in any pool for the last hour."""
    return {pool: history([0] * 60, end=NOW) for pool in POOLS}


def returns_at(minute: int, *, lost_after: int | None = None) -> Market_:
    """No spot until `minute`, then STEADY has it; `lost_after` minutes after this job's first
    spot launch there, the pool is gone for good (the market betrays the return)."""

    def market(pool: PoolKey, now: int, sim: Sim) -> bool:
        if pool != STEADY or now < minute:
            return False
        ours = [i for i in sim.instances.values() if i.market is Market.SPOT]
        return lost_after is None or not ours or now < ours[0].launched // TICK + lost_after

    return market


def returned(sim: Sim) -> bool:
    return "spot-return" in sim.kinds()


def stop_and_launch_times(sim: Sim) -> tuple[list[int], list[tuple[int, Market]]]:
    stops = [t for t, e in sim.effects if isinstance(e, StopAttempt)]
    launches = [(t, e.placement.market) for t, e in sim.effects if isinstance(e, LaunchInstance)]
    return stops, launches


def test_a_job_on_on_demand_moves_back_to_spot_when_the_account_sees_spot() -> None:
    # GIVEN a job due in 5 h that needs 4 h, placed on on-demand because no pool had spot,
    # and spot that comes back in one pool an hour later (seen by the account's other jobs)
    sim = Sim(4 * HOUR, 5 * HOUR, returns_at(60), all_down()).run()
    job = sim.job
    assert job is not None and job.state.value == "COMPLETED", sim.kinds()
    # THEN it trained on on-demand, then moved to spot in the pool seen up, and finished there
    assert sim.markets() == ["on-demand", "spot"], sim.markets()
    assert job.attempts[1].placement.availability_zone == "us-east-1b"
    assert sim.completed_at is not None and sim.completed_at <= 5 * HOUR
    note = next(e for e in job.timeline if e.kind == "spot-return")
    assert "spot seen up in g5.xlarge us-east-1b" in note.text and "return 1 of" in note.text
    # AND the move was planned: no interruption counted, nothing lost, the spot instance
    # resumed from the step the on-demand one stopped at
    assert job.interruptions == 0 and "switched" in sim.kinds()
    assert [(a, restored == last) for a, restored, last in sim.resumes] == [(1, True), (2, True)]
    assert sim.resumes[1][1] > 0
    # AND the cost ledger shows both: what on-demand and spot each cost
    lines = ledger(job, at(sim.t))
    assert [(line.market, line.end) for line in lines] == [
        ("on-demand", "interrupted"),
        ("spot", "completed"),
    ]
    assert all(line.paid_usd > 0 for line in lines)


def test_a_job_alone_in_its_account_returns_to_spot_by_asking() -> None:
    # GIVEN the same job and market, but no other job in the account: nobody sees spot come
    # back, so the pools' histories hold the refusals that sent the job to on-demand
    sim = Sim(4 * HOUR, 5 * HOUR, returns_at(60), all_down(), others_see=False).run()
    job = sim.job
    assert job is not None and job.state.value == "COMPLETED", sim.kinds()
    # THEN it still goes back to spot: pools nobody asked this tick count as available, as
    # when placing, and the return asks them in the policy's order (the first refuses)
    assert sim.markets() == ["on-demand", "spot"], sim.markets()
    assert job.attempts[1].placement.availability_zone == "us-east-1b"
    note = next(e for e in job.timeline if e.kind == "spot-return")
    assert "to be asked first" in note.text, note.text
    assert sim.completed_at is not None and sim.completed_at <= 5 * HOUR
    assert sim.max_alive == 1
    # AND without spot anywhere it tries at most MAX_SPOT_RETURNS times, each time back on
    # on-demand, and still meets the deadline
    never = Sim(4 * HOUR, 5 * HOUR, returns_at(2**30), all_down(), others_see=False).run()
    assert never.job is not None and never.job.state.value == "COMPLETED", never.kinds()
    assert set(never.markets()) == {"on-demand"}
    assert never.kinds().count("spot-return") <= MAX_SPOT_RETURNS
    assert never.completed_at is not None and never.completed_at <= 5 * HOUR


def test_one_live_instance_across_the_switch_and_the_launch_after_the_stop_checkpoint() -> None:
    sim = Sim(4 * HOUR, 5 * HOUR, returns_at(60), all_down()).run()
    assert returned(sim)
    # THEN at no moment did two instances of the job live: the on-demand one was stopped
    # (checkpoint written, terminated) before spot was asked for
    assert sim.max_alive == 1
    stops, launches = stop_and_launch_times(sim)
    (stop,) = stops
    spot_launch = next(t for t, market in launches if market is Market.SPOT and t >= stop)
    preempted = next(
        t
        for t, e, _ in sim.events
        if isinstance(e, AgentReport) and isinstance(e.message.body, AgentPreempted)
    )
    assert stop < preempted <= spot_launch


@pytest.mark.parametrize(
    ("slack_minutes", "lost_after"),
    [
        (11, 6),  # 11 min of slack: one changeover fits twice only if spot's can be cut short
        (11, 30),
        (12, 0),  # exactly two changeovers
        (12, 7),
        (15, 0),
        (15, 6),
        (15, 7),
        (25, 7),
        (25, 30),
        (50, 8),
    ],
)
def test_the_deadline_holds_when_spot_is_lost_right_after_the_return(
    slack_minutes: int, lost_after: int
) -> None:
    # GIVEN an on-demand job with little slack, spot back after half an hour, and the pool
    # lost for good at the worst moments after the job's spot launch (refused, while booting,
    # just after training resumed, later)
    work = 2 * HOUR
    sim = Sim(work, work + slack_minutes * 60, returns_at(30, lost_after=lost_after), all_down())
    sim.run()
    # THEN it still completes by its deadline, back on on-demand when spot is gone
    assert sim.completed_at is not None, sim.kinds()
    assert sim.completed_at <= sim.deadline_seconds, (sim.completed_at, sim.markets())
    assert sim.max_alive == 1


def test_the_returns_that_were_tried_in_the_deadline_sweep_are_not_vacuous() -> None:
    # The sweep above means something only if the policy does go back to spot in it.
    tried = []
    for slack, lost_after in [(25, 30), (50, 8)]:
        sim = Sim(
            2 * HOUR, 2 * HOUR + slack * 60, returns_at(30, lost_after=lost_after), all_down()
        )
        tried.append(returned(sim.run()))
    assert all(tried), tried


def on_demand(slack_minutes: int) -> Sim:
    """A 2 h job with this much slack, trained on on-demand (no spot anywhere) for 10 min.

    (With slack to spare the job first waits in the outage, so "10 min" counts from the
    start of training, not from submission.)
    """

    def trained(s: Sim) -> bool:
        att = s.job.current if s.job is not None else None
        return (
            att is not None and att.started_at is not None and att.started_at <= at(s.t - 10 * TICK)
        )

    sim = Sim(2 * HOUR, 2 * HOUR + slack_minutes * 60, returns_at(2**30), all_down())
    sim.run_until(trained)
    assert sim.job is not None and sim.markets() == ["on-demand"]
    return sim


def test_no_return_without_slack_for_the_whole_changeover_and_the_one_back() -> None:
    d = int(SETTINGS.changeover_estimate.total_seconds())
    tight, roomy = on_demand(11), on_demand(35)

    def up(sim: Sim) -> dict[PoolKey, PoolRecord]:
        """Spot seen up for the last hour in one pool, up to the sim's now."""
        records = all_down()
        records[STEADY] = history([1] * 60, end=NOW + sim.t // TICK + 1)
        return records

    # GIVEN spot seen up for the last hour in one pool
    for sim in (tight, roomy):
        assert sim.job is not None
        base = observe(sim.job, at(sim.t), SETTINGS)
        assert base is not None
        assert (base.slack_seconds < 2 * d) is (sim is tight)
    assert tight.job is not None and roomy.job is not None
    # THEN with less than two changeovers of slack the job stays on on-demand; with them, it goes
    assert PoolPlacementPolicy(up(tight)).switch_running(tight.job, at(tight.t), SETTINGS) is None
    choice = PoolPlacementPolicy(up(roomy)).switch_running(roomy.job, at(roomy.t), SETTINGS)
    assert choice is not None and choice.market is Market.SPOT
    assert PoolKey.of(choice.pools[0]) == STEADY
    # AND without any pool seen up (or never observed), it stays
    assert PoolPlacementPolicy(all_down()).switch_running(roomy.job, at(roomy.t), SETTINGS) is None
    assert PoolPlacementPolicy({}).switch_running(roomy.job, at(roomy.t), SETTINGS) is None


def test_returns_are_bounded_per_job() -> None:
    # GIVEN spot that comes back for 15 minutes in every 40 and is lost each time the job
    # has held it for 8
    def flapping(pool: PoolKey, now: int, sim: Sim) -> bool:
        if pool != STEADY or now % 40 < 25:
            return False
        ours = [i for i in sim.instances.values() if i.market is Market.SPOT and not i.gone]
        return not any(now >= i.launched // TICK + 8 for i in ours)

    sim = Sim(3 * HOUR, 6 * HOUR, flapping, all_down()).run()
    # THEN it moves back to spot while the slack pays for the round trip (each return needs
    # two changeovers of slack, and each lost run spends them), then stays on on-demand, and
    # still finishes in time
    returns = sim.kinds().count("spot-return")
    assert 3 <= returns < MAX_SPOT_RETURNS
    assert sim.markets()[-1] == "on-demand"
    assert sim.completed_at is not None and sim.completed_at <= sim.deadline_seconds
    # AND at MAX_SPOT_RETURNS it would stop whatever the slack
    capped = Sim(3 * HOUR, 6 * HOUR, flapping, all_down())
    capped.run_until(lambda s: s.kinds().count("spot-return") == 1)
    assert capped.job is not None
    capped.job.policy["spot_returns"] = MAX_SPOT_RETURNS
    capped.run()
    assert capped.kinds().count("spot-return") == 1


def test_a_return_every_pool_refuses_backs_off_before_the_next() -> None:
    # GIVEN a job alone in its account, put on on-demand by an outage of every pool that
    # lasts to its deadline: each return stops the on-demand instance and finds nothing
    sim = Sim(4 * HOUR, 5 * HOUR, returns_at(2**30), all_down(), others_see=False).run()
    job = sim.job
    assert job is not None and job.state.value == "COMPLETED", sim.kinds()
    assert sim.completed_at is not None and sim.completed_at <= 5 * HOUR
    # THEN each refused return is counted and sets when the next may come: 1, 2, 4, ...
    # policy ticks later
    refused = [e for e in job.timeline if e.kind == "return-refused"]
    assert len(refused) == job.policy["refused_returns"] >= 2, sim.kinds()
    for k, entry in enumerate(refused, start=1):
        after = datetime.fromisoformat(entry.data["next_return_at"])
        assert after - entry.at == SETTINGS.policy_tick * 2 ** (k - 1)
        assert "no other return before" in entry.text
    # AND switch_running keeps the job on on-demand until then
    roomy = on_demand(35)
    assert roomy.job is not None
    records = all_down()
    records[STEADY] = history([1] * 60, end=NOW + roomy.t // TICK + 1)
    policy = PoolPlacementPolicy(records)
    now = at(roomy.t)
    assert policy.switch_running(roomy.job, now, SETTINGS) is not None
    roomy.job.policy["next_return_at"] = (now + timedelta(seconds=1)).isoformat()
    assert policy.switch_running(roomy.job, now, SETTINGS) is None
    roomy.job.policy["next_return_at"] = now.isoformat()
    assert policy.switch_running(roomy.job, now, SETTINGS) is not None


# ---- duplicate and out-of-order events ----------------------------------------------------


def replay(
    events: list[tuple[int, JobEvent, dict[PoolKey, PoolRecord]]], times: int
) -> tuple[JobRecord | None, list[object]]:
    """Apply every recorded event `times` times in a row (follow-ups included)."""
    job: JobRecord | None = None
    effects: list[object] = []

    def apply(t: int, event: JobEvent, records: dict[PoolKey, PoolRecord]) -> None:
        nonlocal job
        policy = PoolPlacementPolicy(records)
        decision = decide(job, event, now=at(t), settings=SETTINGS, market_policy=policy)
        if decision.record is not None:
            job = decision.record
        effects.extend(decision.effects)
        if decision.follow_up is not None:
            apply(t, decision.follow_up, records)

    for t, event, records in events:
        for _ in range(times):
            apply(t, event, records)
    return job, effects


def _essentials(effects: list[object]) -> list[tuple[str, int, str]]:
    out = []
    for e in effects:
        if isinstance(e, LaunchInstance):
            out.append(("launch", e.attempt, e.placement.market.value))
        elif isinstance(e, StopAttempt):
            out.append(("stop", e.attempt, ""))
    return out


def test_every_event_of_a_switch_delivered_twice_changes_nothing() -> None:
    sim = Sim(4 * HOUR, 5 * HOUR, returns_at(60), all_down()).run()
    assert returned(sim)
    once, once_effects = replay(sim.events, 1)
    twice, twice_effects = replay(sim.events, 2)
    assert once is not None and twice is not None
    assert _essentials(twice_effects) == _essentials(once_effects)
    assert [a.placement.market for a in twice.attempts] == [
        a.placement.market for a in once.attempts
    ]
    assert twice.state is once.state and twice.interruptions == once.interruptions == 0
    assert twice.policy.get("spot_returns") == 1


def test_the_stop_s_messages_out_of_order_launch_spot_once_and_keep_the_checkpoint() -> None:
    # GIVEN the on-demand agent's last heartbeat and stop checkpoint delivered after its
    # AgentPreempted (SQS standard queues do not keep order)
    sim = Sim(4 * HOUR, 5 * HOUR, returns_at(60), all_down()).run()
    events = list(sim.events)
    at_preempted = next(
        i
        for i, (_, e, _) in enumerate(events)
        if isinstance(e, AgentReport) and isinstance(e.message.body, AgentPreempted)
    )
    late = [
        i
        for i in range(at_preempted - 3, at_preempted)
        if isinstance(events[i][1], AgentReport)
        and isinstance(events[i][1].message.body, AgentCheckpoint | AgentProgress)  # type: ignore[union-attr]
        and events[i][1].message.attempt == 1  # type: ignore[union-attr]
    ]
    assert late, "the stop's checkpoint precedes AgentPreempted in the recorded run"
    moved = [events[i] for i in late]
    rest = [e for i, e in enumerate(events) if i not in late]
    at_preempted = next(
        i
        for i, (_, e, _) in enumerate(rest)
        if isinstance(e, AgentReport) and isinstance(e.message.body, AgentPreempted)
    )
    reordered = rest[: at_preempted + 1] + moved + rest[at_preempted + 1 :]
    job, effects = replay(reordered, 1)
    _, in_order = replay(events, 1)
    # THEN the same single spot launch follows, and the checkpoint the stop wrote is the job's
    assert _essentials(effects) == _essentials(in_order)
    assert job is not None and job.state.value == "COMPLETED"
    stop_step = next(
        e.message.body.step  # type: ignore[union-attr]
        for _, e, _ in events
        if isinstance(e, AgentReport) and isinstance(e.message.body, AgentPreempted)
    )
    assert job.attempts[0].checkpoint_step == stop_step


def test_a_first_spot_placement_with_little_slack_survives_losing_spot_during_boot() -> None:
    def market(pool: PoolKey, now: int, sim: Sim) -> bool:
        ours = [i for i in sim.instances.values() if i.market is Market.SPOT]
        return pool == STEADY and now >= 5 and (not ours or now < ours[0].launched // TICK + 6)

    records = all_down()
    records[STEADY] = history([1] * 60, end=NOW)
    sim = Sim(HOUR, HOUR + 15 * 60, market, records).run()
    assert sim.completed_at is not None and sim.completed_at <= sim.deadline_seconds


def test_the_simulated_boot_is_the_changeover_the_policy_assumes() -> None:
    assert SETTINGS.changeover_estimate.total_seconds() == BOOT
