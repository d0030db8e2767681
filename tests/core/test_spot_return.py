"""On-demand -> spot while a job trains: the decision, and the safety of the move.

`PoolPlacementPolicy.switch_running` moves a job on on-demand back to spot when the pools'
shared histories show spot up. Spot first: the lifecycle asks for spot in the ranked pools
while the on-demand attempt trains on; only once a spot instance has launched does it ask
the on-demand agent to checkpoint and stop (`StopAttempt`), and the spot successor awaits
that attempt's hand-off. A return every pool refuses stops nothing. Most tests run
`tests.core.market_sim`: the pure core against a minute-by-minute market.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from respot.core.cost import ledger
from respot.core.deadline import observe
from respot.core.effects import LaunchInstance, ReleaseHandoff, StopAttempt, TerminateInstances
from respot.core.events import (
    AgentReport,
    CancelRequested,
    CapacityLaunched,
    CapacityUnavailable,
    InstanceDown,
    InstanceUp,
    JobEvent,
    LaunchRefused,
    ReconcileTick,
)
from respot.core.job import AttemptEnd, JobRecord, Market
from respot.core.lifecycle import decide
from respot.core.pool_placement import MAX_SPOT_RETURNS, PoolPlacementPolicy
from respot.core.pool_watch import PoolKey, PoolRecord
from respot.core.states import JobState
from respot.policy.live_view import backoff_cap_ticks
from respot.wire.messages import (
    AgentCheckpoint,
    AgentCompleted,
    AgentPreempted,
    AgentProgress,
    AgentStarted,
    CancelCommand,
)
from tests.core.factories import SETTINGS, agent, at
from tests.core.market_sim import BOOT, TICK, Market_, Sim
from tests.core.test_pool_placement import FLICKER, G4DN_A, G4DN_B, NOW, STEADY, history

POOLS = (FLICKER, STEADY, G4DN_A, G4DN_B)
HOUR = 3600


def all_down() -> dict[PoolKey, PoolRecord]:
    """The account saw no spot in any pool for the last hour."""
    return {pool: history([0] * 60, end=NOW) for pool in POOLS}


def since_start(pattern: list[int], end: int) -> dict[PoolKey, PoolRecord]:
    """Every pool seen as `pattern` up to `end` - 1, the job having started at NOW."""
    assert end - len(pattern) >= NOW  # a job is handed no sighting from before its start
    return {pool: history(pattern, end=end) for pool in POOLS}


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
    assert sim.max_alive == 2 and not sim.handoff_violations, sim.handoff_violations
    # AND without spot anywhere every refused return leaves the one on-demand instance
    # training (nothing stopped, no second launch), and they come at most about once per
    # two changeovers (the backoff's longest wait)
    never = Sim(4 * HOUR, 5 * HOUR, returns_at(2**30), all_down(), others_see=False).run()
    assert never.job is not None and never.job.state.value == "COMPLETED", never.kinds()
    assert never.markets() == ["on-demand"] and len(never.instances) == 1
    longest = backoff_cap_ticks(BOOT, TICK)
    assert 1 <= never.kinds().count("return-refused") <= 5 + (5 * HOUR // TICK) // longest
    assert not [e for _, e in never.effects if isinstance(e, StopAttempt)]
    assert never.completed_at is not None and never.completed_at <= 5 * HOUR


def test_a_second_instance_only_during_the_return_s_hand_off_and_spot_first() -> None:
    sim = Sim(4 * HOUR, 5 * HOUR, returns_at(60), all_down()).run()
    assert returned(sim)
    # THEN two instances of the job lived only during the hand-off: the on-demand one was
    # asked to stop once the spot one had launched (not before), and stopped after that
    assert sim.max_alive == 2 and not sim.handoff_violations, sim.handoff_violations
    stops, launches = stop_and_launch_times(sim)
    (stop,) = stops
    spot_launch = max(t for t, market in launches if market is Market.SPOT)
    launched = next(
        t for t, e, _ in sim.events if isinstance(e, CapacityLaunched) and e.attempt == 2
    )
    preempted = next(
        t
        for t, e, _ in sim.events
        if isinstance(e, AgentReport) and isinstance(e.message.body, AgentPreempted)
    )
    assert spot_launch == launched == stop < preempted
    # AND the spot launch awaited the on-demand attempt's hand-off (`await-handoff`), and
    # restored the checkpoint it stopped with
    spot = next(e for _, e in sim.effects if isinstance(e, LaunchInstance) and e.attempt == 2)
    assert spot.await_handoff_from == 1
    assert sim.resumes[1] == (2, sim.job.attempts[0].checkpoint_step, sim.resumes[1][2])  # type: ignore[union-attr]
    assert sim.resumes[1][1] == sim.resumes[1][2]


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
    assert not sim.handoff_violations, sim.handoff_violations


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
        """Since the job's start (NOW), every pool seen down, and spot seen up in one pool
        from five minutes after the start up to the sim's now."""
        ticks = sim.t // TICK + 1
        records = since_start([0] * ticks, end=NOW + ticks)
        records[STEADY] = history([0] * 5 + [1] * (ticks - 5), NOW + ticks)
        return records

    # GIVEN spot seen up in one pool for most of the job's time
    for sim in (tight, roomy):
        assert sim.job is not None
        base = observe(sim.job, at(sim.t), SETTINGS)
        assert base is not None
        assert (base.slack_seconds < 2 * d) is (sim is tight)
    assert tight.job is not None and roomy.job is not None
    # THEN with less than two changeovers of slack the job stays on on-demand; with them, it
    # goes (here the policy itself declines the tight return: the control plane's own guard,
    # `switch_running`'s two changeovers, is what test_returns_are_bounded_per_job trips)
    assert PoolPlacementPolicy(up(tight)).switch_running(tight.job, at(tight.t), SETTINGS) is None
    choice = PoolPlacementPolicy(up(roomy)).switch_running(roomy.job, at(roomy.t), SETTINGS)
    assert choice is not None and choice.market is Market.SPOT
    assert PoolKey.of(choice.pools[0]) == STEADY
    # AND with every pool seen down at the job's start and not asked since, or never
    # observed since the job's start (read as up throughout, as LiveView reads it), it
    # asks them (spot is asked before on-demand stops, so a refusal costs nothing,
    # and counts against the job's bounded returns): a run found up by asking is one in
    # progress, whose survival is the renewal mean (`RunStatistics.found_survival`,
    # issue 28), not a new run's certain one
    refused = since_start([0] * 5, end=NOW + 5)  # the job's first five minutes
    for records in (refused, {}):
        asked = PoolPlacementPolicy(records).switch_running(roomy.job, at(roomy.t), SETTINGS)
        assert asked is not None and asked.market is Market.SPOT
        assert "spot to be asked first" in asked.reason and "return 1 of at most" in asked.reason


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
    # lasts to its deadline: each return asks every pool and finds nothing
    sim = Sim(4 * HOUR, 5 * HOUR, returns_at(2**30), all_down(), others_see=False).run()
    job = sim.job
    assert job is not None and job.state.value == "COMPLETED", sim.kinds()
    assert sim.completed_at is not None and sim.completed_at <= 5 * HOUR
    # THEN each refused return is counted and sets when the next may come: 1, 2, 4, ...
    # policy ticks later, never more than two changeovers (12 ticks here)
    longest = backoff_cap_ticks(BOOT, TICK)
    assert longest == 12
    refused = [e for e in job.timeline if e.kind == "return-refused"]
    assert len(refused) == job.policy["refused_returns"] >= 6, sim.kinds()
    for k, entry in enumerate(refused, start=1):
        after = datetime.fromisoformat(entry.data["next_return_at"])
        assert after - entry.at == SETTINGS.policy_tick * min(2 ** (k - 1), longest)
        assert "no other return before" in entry.text
        assert "trained on on-demand, nothing was stopped" in entry.text
        assert "asked because" in entry.text, entry.text  # the return's reason, folded in
    # AND each refused return is one line: its start, request and the pools' refusals fold
    # into it (a long outage would otherwise fill the timeline with them)
    kinds = sim.kinds()
    after_first = kinds[kinds.index("return-refused") :]
    assert not {"spot-return", "requested", "capacity"} & set(after_first), after_first
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
    # AND refused returns do not count against MAX_SPOT_RETURNS: only returns that moved it
    roomy.job.policy.update(spot_returns=MAX_SPOT_RETURNS + 5, refused_returns=5)
    assert policy.switch_running(roomy.job, now, SETTINGS) is None
    roomy.job.policy["refused_returns"] = 6
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


# ---- spot first: the return's hard cases, event by event ------------------------------------


def with_spec(job: JobRecord, **fields: object) -> JobRecord:
    """The record with these spec fields changed (the spec is frozen)."""
    spec = job.submission.spec.model_copy(update=fields)
    return job.model_copy(update={"submission": job.submission.model_copy(update={"spec": spec})})


class Returning:
    """A job on on-demand at the moment its return to spot has been requested.

    Built from a recorded simulation: every event up to the tick that began the first return
    is applied again (without running its effects); the tests then deliver what EC2 and the
    agents might say next, in any order, and collect every effect.
    """

    def __init__(self, *, budget_usd: float | None = None) -> None:
        sim = Sim(4 * HOUR, 5 * HOUR, returns_at(60), all_down()).run()
        job: JobRecord | None = None
        for t, event, records in sim.events:
            decision = decide(
                job, event, now=at(t), settings=SETTINGS, market_policy=PoolPlacementPolicy(records)
            )
            if decision.record is not None:
                job = decision.record
            launches = [e for e in decision.effects if isinstance(e, LaunchInstance)]
            if job is not None and job.policy.get("return_attempt") and launches:
                self.t, self.records, self.launch = t, records, launches[0]
                break
        else:
            raise AssertionError("the recorded run never began a return")
        assert job is not None
        if budget_usd is not None:
            job.submission = with_spec(job, budget_usd=budget_usd).submission
        self.job: JobRecord = job
        self.effects: list[object] = list(decision.effects)
        self.follow_ups: list[object] = []
        od = job.attempts[0]
        assert od.instance_id is not None
        self.od_instance: str = od.instance_id

    def apply(self, event: JobEvent, after: float = 1.0) -> Returning:
        self.t += int(after)
        decision = decide(
            self.job,
            event,
            now=at(self.t),
            settings=SETTINGS,
            market_policy=PoolPlacementPolicy(self.records),
        )
        if decision.record is not None:
            self.job = decision.record
        self.effects.extend(decision.effects)
        if decision.follow_up is not None:
            self.follow_ups.append(decision.follow_up)
        return self

    def refuse_everywhere(self) -> Returning:
        """Every pool refuses the return's spot launch (each retry asks the next pool)."""
        for _ in range(20):
            att = self.job.current
            if att is None or self.job.policy.get("return_attempt") != att.number:
                return self
            self.apply(
                CapacityUnavailable(att.number, att.client_token, "InsufficientInstanceCapacity")
            )
        raise AssertionError("the return's retries never ended")

    def launched(self, instance_id: str = "i-spot") -> CapacityLaunched:
        att = self.job.attempt(2)
        assert att is not None
        return CapacityLaunched(2, att.client_token, instance_id, "sir-1", "us-east-1b", 0.3)

    def stops(self) -> list[StopAttempt]:
        return [e for e in self.effects if isinstance(e, StopAttempt)]

    def terminated(self) -> set[str]:
        return {
            i for e in self.effects if isinstance(e, TerminateInstances) for i in e.instance_ids
        }

    def od_says(self, body: object, after: float = 1.0) -> Returning:
        msg = agent(self.job, 1, self.od_instance, body, seq=10_000 + self.t, sent=self.t + after)
        return self.apply(AgentReport(msg), after)


def test_the_return_asks_for_spot_while_the_on_demand_attempt_trains_on() -> None:
    r = Returning()
    job = r.job
    # THEN the job is REQUESTED on a new spot attempt, the on-demand one open and unstopped
    assert job.state is JobState.REQUESTED
    od, spot = job.attempts
    assert od.placement.market is Market.ON_DEMAND and od.is_open and od.notice_at is None
    assert spot.placement.market is Market.SPOT and spot.instance_id is None
    assert not r.stops() and not r.terminated()
    # AND the spot launch awaits the on-demand attempt's hand-off
    assert r.launch.attempt == 2 and r.launch.await_handoff_from == 1
    # AND heartbeats of the on-demand attempt keep coming in and move progress on (one sent
    # past the write interval: a heartbeat that changes nothing else within it of the last
    # one heard is coalesced, wherever in the minute the policy began the return)
    step = (job.progress.step or 0) + 60
    after = SETTINGS.heartbeat_write_interval.total_seconds() + 60
    r.od_says(AgentProgress(step=step, total_steps=4 * HOUR), after=after)
    assert r.job.progress.step == step and r.job.state is JobState.REQUESTED


def test_a_refused_return_stops_nothing_and_the_on_demand_attempt_stays_current() -> None:
    r = Returning().refuse_everywhere()
    job = r.job
    # THEN no StopAttempt, no termination: the job is RUNNING on its on-demand attempt again
    assert not r.stops() and not r.terminated()
    assert job.state is JobState.RUNNING and len(job.attempts) == 1
    od = job.current
    assert od is not None and od.placement.market is Market.ON_DEMAND
    assert od.is_open and od.notice_at is None and od.instance_id == r.od_instance
    # AND the timeline says why it stopped asking and that the instance trained on
    note = next(e for e in reversed(job.timeline) if e.kind == "return-refused")
    assert f"{r.od_instance} trained on on-demand, nothing was stopped" in note.text
    assert "no other return before" in note.text and job.policy["refused_returns"] == 1
    assert "return_from" not in job.policy and "return_attempt" not in job.policy
    assert not r.follow_ups
    # AND the next tick within the backoff asks nothing, and the current attempt is watched
    # for silence as before
    r.apply(ReconcileTick(at(r.t + 1)))
    assert not [e for e in r.effects if isinstance(e, LaunchInstance) and e.attempt == 2][1:]
    silent = SETTINGS.heartbeat_timeout.total_seconds() + 120
    r.apply(ReconcileTick(at(r.t + silent)), after=silent)
    assert r.od_instance in r.terminated() and r.job.state is JobState.INTERRUPTED


@pytest.mark.parametrize(
    "first",
    ["launched", "launched-twice", "instance-up-first", "agent-first"],
)
def test_spot_launched_stops_the_on_demand_attempt_once_whatever_comes_first(first: str) -> None:
    r = Returning()
    up = InstanceUp("i-spot", 2, "running")
    started = AgentReport(agent(r.job, 2, "i-spot", AgentStarted(restored_step=None), seq=1))
    order: list[JobEvent] = {
        "launched": [r.launched()],
        "launched-twice": [r.launched(), r.launched()],
        "instance-up-first": [up, r.launched(), up],
        "agent-first": [started, r.launched(), up],
    }[first]
    r.apply(order[0])
    # THEN the first event that shows the spot instance stops the on-demand attempt
    assert [(s.attempt, "i-spot" in s.reason) for s in r.stops()] == [(1, True)]
    od = r.job.attempts[0]
    assert od.notice_at is not None and od.is_open and r.od_instance not in r.terminated()
    for event in order[1:]:
        r.apply(event)
    # AND duplicates and the events that follow change nothing more
    assert len(r.stops()) == 1 and not r.terminated()
    assert r.job.current is not None and r.job.current.instance_id == "i-spot"
    assert [e.kind for e in r.job.timeline].count("returned") == 1
    # AND once the on-demand agent stopped with its checkpoint, it is terminated and the
    # job goes on on spot, nothing counted as an interruption
    r.od_says(
        AgentCheckpoint(
            step=7000,
            manifest_key="ck/7000",
            size_bytes=1,
            uploaded_bytes=1,
            upload_seconds=0.1,
            reason="notice",
        )
    )
    r.od_says(AgentPreempted(step=7000, checkpoint_step=7000, notice="stop"))
    assert r.terminated() == {r.od_instance}
    assert r.job.attempts[0].end is AttemptEnd.INTERRUPTED and r.job.interruptions == 0
    assert r.job.checkpoint is not None and r.job.checkpoint.step == 7000
    assert "switched" in [e.kind for e in r.job.timeline]
    assert r.job.state in (JobState.REQUESTED, JobState.STARTING, JobState.RUNNING)


def test_a_launch_result_for_an_older_return_attempt_is_terminated() -> None:
    r = Returning().refuse_everywhere()
    # GIVEN the refused return's attempt is gone; WHEN a late launch result for it comes
    stale = CapacityLaunched(2, "rs-old-2-9", "i-late", None, None, 0.3)
    r.apply(stale)
    # THEN its instance is terminated and the on-demand attempt is not stopped
    assert r.terminated() == {"i-late"} and not r.stops()
    assert r.job.state is JobState.RUNNING


def test_the_on_demand_instance_silent_during_the_return_is_ended_and_the_return_goes_on() -> None:
    r = Returning()
    # WHEN the on-demand agent falls silent while spot is being asked for (the launch is slow)
    silent = SETTINGS.heartbeat_timeout.total_seconds() + 60
    r.apply(ReconcileTick(at(r.t + silent)), after=silent)
    # THEN it is terminated and released (heartbeats of the attempt being left are watched,
    # though it is not job.current), and the return's request goes on
    assert r.terminated() == {r.od_instance}
    od = r.job.attempts[0]
    assert od.end is AttemptEnd.LOST and ReleaseHandoff(r.job.job_id, 1) in r.effects
    assert r.job.state is JobState.REQUESTED
    # AND if every pool then refuses, the job is placed again (nothing trains any more)
    r.refuse_everywhere()
    assert r.job.state is JobState.QUEUED and r.follow_ups and not r.stops()
    note = next(e for e in reversed(r.job.timeline) if e.kind == "return-refused")
    assert "is gone: placing the job again" in note.text


def test_the_on_demand_instance_lost_during_the_return_then_spot_launches() -> None:
    r = Returning()
    r.apply(InstanceDown(r.od_instance, 1, "terminated"))
    assert r.job.attempts[0].end is AttemptEnd.LOST and r.job.state is JobState.REQUESTED
    # THEN the spot launch needs no stop: it restores the newest checkpoint
    r.apply(r.launched())
    assert not r.stops() and r.job.current is not None and r.job.current.instance_id == "i-spot"


def test_an_on_demand_instance_that_never_stops_is_terminated() -> None:
    r = Returning()
    r.apply(r.launched())
    # The stop is held until the spot successor is warm, at most boot_timeout (the agent
    # obeys the limit the stop carries): the watch allows for that hold
    (stop,) = r.stops()
    hold = SETTINGS.boot_timeout
    assert stop.hold_seconds == hold.total_seconds()
    # WHEN the on-demand agent keeps heartbeating but never reports its stop
    limit = hold + SETTINGS.heartbeat_timeout
    for minute in range(1, int(limit.total_seconds() // 60) + 3):
        r.od_says(AgentProgress(step=7000 + minute, total_steps=4 * HOUR), after=60)
        r.apply(ReconcileTick(at(r.t)), after=0)
        if r.od_instance in r.terminated():
            break
    # THEN it is terminated heartbeat_timeout after its hold's limit (it bills no longer)
    assert r.od_instance in r.terminated(), [e.text for e in r.job.timeline[-3:]]
    od = r.job.attempts[0]
    assert od.ended_at is not None and od.notice_at is not None
    assert od.ended_at - od.notice_at >= limit
    assert od.ended_at - od.notice_at < limit + timedelta(minutes=2)


def test_a_return_into_another_region_is_not_held() -> None:
    # GIVEN a return whose spot attempt is placed in another region (a satellite's zone)
    r = Returning()
    spot = r.job.current
    assert spot is not None and spot.placement.availability_zone.startswith("us-east-1")
    spot.placement = spot.placement.model_copy(update={"availability_zone": "us-west-2a"})
    # WHEN its spot instance launches
    r.apply(r.launched())
    # THEN the on-demand attempt is asked to stop at once, not held: its successor's warm
    # marker stays in us-west-2, and the successor, once ready, waits only a bounded time for
    # the hand-off before it trains (two trainers if the on-demand one held to its limit)
    (stop,) = r.stops()
    assert stop.hold_seconds is None


@pytest.mark.parametrize("ending", ["cancel", "max_runtime", "budget", "completed"])
def test_the_job_ending_during_the_return_terminates_both_instances(ending: str) -> None:
    r = Returning(budget_usd=0.01 if ending == "budget" else None)
    r.apply(r.launched())  # both instances live: the hand-off
    if ending == "cancel":
        r.apply(CancelRequested(CancelCommand(job_id=r.job.job_id, requested_at=at(r.t))))
    elif ending == "max_runtime":
        r.job = with_spec(r.job, max_runtime=timedelta(seconds=r.t - 1))
        r.apply(ReconcileTick(at(r.t + 1)))
    elif ending == "budget":
        r.apply(ReconcileTick(at(r.t + 1)))
    else:
        r.od_says(AgentCompleted(step=4 * HOUR, outputs_prefix="o/", train_seconds=1))
    # THEN the job is over and both instances are terminated
    assert r.job.state.is_terminal(), r.job.state
    assert {r.od_instance, "i-spot"} <= r.terminated()
    assert all(not a.is_open for a in r.job.attempts)


def test_the_job_ending_before_spot_launched_terminates_the_late_spot_instance() -> None:
    r = Returning()
    r.apply(CancelRequested(CancelCommand(job_id=r.job.job_id, requested_at=at(r.t))))
    assert r.terminated() == {r.od_instance}
    r.apply(r.launched())
    assert r.terminated() == {r.od_instance, "i-spot"} and not r.stops()


def test_a_return_ec2_refuses_for_good_leaves_the_job_on_on_demand() -> None:
    r = Returning()
    att = r.job.current
    assert att is not None
    r.apply(LaunchRefused(2, att.client_token, "InvalidParameterValue", "bad spot option"))
    # THEN not a failed job: the on-demand attempt trains on, and the reason is noted
    assert r.job.state is JobState.RUNNING and len(r.job.attempts) == 1
    assert not r.stops() and not r.terminated()
    note = r.job.timeline[-1]
    assert note.kind == "return-refused" and "InvalidParameterValue: bad spot option" in note.text


def test_the_cost_ledger_bills_both_instances_during_the_hand_off() -> None:
    r = Returning()
    r.apply(r.launched(), after=5)
    r.od_says(AgentPreempted(step=7000, checkpoint_step=7000, notice="stop"), after=40)
    r.apply(InstanceDown(r.od_instance, 1, "terminated"))
    now = at(r.t + 100)
    od, spot = ledger(r.job, now)
    # THEN the on-demand line runs until it reported its stop (then terminated), the spot
    # line from its launch: they overlap by the hand-off, and both are paid
    assert od.market == "on-demand" and spot.market == "spot"
    assert od.ended is not None and spot.started is not None and spot.started < od.ended
    assert (od.ended - spot.started).total_seconds() == 40
    assert od.paid_usd > 0 and spot.paid_usd > 0
    assert spot.hours == pytest.approx((now - spot.started).total_seconds() / 3600)


@pytest.mark.parametrize("beats", [True, False])
def test_a_spot_successor_waiting_past_boot_timeout_for_its_held_predecessor(beats: bool) -> None:
    # GIVEN a return whose spot instance launched: the on-demand attempt holds its stop
    r = Returning()
    r.apply(r.launched())
    assert len(r.stops()) == 1
    # WHEN the spot agent waits for the hand-off longer than boot_timeout (its warm marker was
    # lost, so the on-demand agent holds to its limit and trains on, heartbeating), the spot
    # agent heartbeating past its default wait as respot.agent.handoff does (or not)
    minutes = int((SETTINGS.boot_timeout + timedelta(minutes=3)).total_seconds() // 60)
    for minute in range(minutes):
        r.od_says(AgentProgress(step=7000 + minute, total_steps=4 * HOUR), after=30)
        if beats and minute >= 3:
            body = AgentProgress()
            msg = agent(r.job, 2, "i-spot", body, seq=20_000 + r.t, sent=r.t + 30)
            r.apply(AgentReport(msg), after=30)
        else:
            r.t += 30
        r.apply(ReconcileTick(at(r.t)), after=0)
    spot = r.job.attempt(2)
    assert spot is not None
    if not beats:
        # THEN without heartbeats it is judged lost while it waits (why the agent sends them)
        assert "i-spot" in r.terminated() and spot.end is AttemptEnd.LOST
        return
    # THEN with them it is not judged lost, and the on-demand attempt is still open
    assert "i-spot" not in r.terminated() and spot.end is None, r.job.timeline[-3:]
    assert r.job.current is not None and r.job.current.number == 2
    assert r.job.attempts[0].is_open
    # AND once the on-demand attempt stops, the spot one restores its checkpoint and trains
    r.od_says(AgentPreempted(step=7100, checkpoint_step=7100, notice="stop"))
    r.apply(r.launched())  # a duplicate of the launch result changes nothing
    start = AgentStarted(restored_step=7100, restore_seconds=1.0, setup_seconds=2.0)
    r.apply(AgentReport(agent(r.job, 2, "i-spot", start, seq=30_000, sent=r.t + 1)))
    current = r.job.current
    assert r.job.state is JobState.RUNNING and current is not None and current.number == 2
    assert current.restored_step == 7100 and current.end is None


@pytest.mark.parametrize("stop_report_first", [True, False])
def test_a_returns_downtime_is_the_pause_not_the_time_since_the_stop_request(
    stop_report_first: bool,
) -> None:
    # GIVEN a return whose spot instance launched (the on-demand attempt asked to stop, held)
    r = Returning()
    r.apply(r.launched())
    asked = r.job.attempts[0].notice_at
    assert asked is not None
    # AND the on-demand attempt trains on for 10 minutes while spot boots and warms up
    for minute in range(20):
        r.od_says(AgentProgress(step=7000 + minute, total_steps=4 * HOUR), after=30)
    last_heartbeat = r.t
    # WHEN it stops (its session's last report 3 s before its stop report) and the spot agent
    # restores that checkpoint; SQS may deliver the two in either order
    stop = AgentPreempted(
        step=7020, checkpoint_step=7020, notice="stop", last_step_at=at(r.t + 5 - 3)
    )
    stop_msg = agent(r.job, 1, r.od_instance, stop, seq=90_000, sent=r.t + 5)
    start = AgentStarted(restored_step=7020, restore_seconds=1.0)
    start_msg = agent(r.job, 2, "i-spot", start, seq=90_001, sent=r.t + 9)
    if stop_report_first:
        r.apply(AgentReport(stop_msg), after=5).apply(AgentReport(start_msg), after=4)
    else:
        r.apply(AgentReport(start_msg), after=9).apply(AgentReport(stop_msg), after=0)
    # THEN the started note's downtime counts from the on-demand attempt's last step when its
    # stop report is in (7 s); else from its last heartbeat the record kept (a heartbeat that
    # changes nothing is written once per heartbeat_write_interval): not from the stop request
    (note,) = [e for e in r.job.timeline if e.kind == "resumed"]
    started = r.job.attempts[1].started_at
    assert started == at(last_heartbeat + 9)
    assert (started - asked).total_seconds() > 600
    if stop_report_first:
        assert note.data["downtime_seconds"] == 7.0
    else:
        most = 9 + SETTINGS.heartbeat_write_interval.total_seconds()
        assert 9 <= note.data["downtime_seconds"] <= most
