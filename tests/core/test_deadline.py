"""The deadline policy in the live control plane: observations from the record, and its use."""

from __future__ import annotations

from datetime import timedelta

from respot.core.deadline import DeadlinePolicy, observe, record_availability, work_estimate
from respot.core.effects import StopAttempt
from respot.core.events import (
    AgentReport,
    CapacityUnavailable,
    InstanceUp,
    ReconcileTick,
    Submitted,
)
from respot.core.job import Market
from respot.core.states import JobState
from respot.policy import Choice, RespotPolicy
from respot.wire.messages import AgentProgress, AgentStarted
from tests.core.factories import SETTINGS, T0, agent, at, submission
from tests.core.test_lifecycle import Driver

TICK = SETTINGS.policy_tick.total_seconds()


def deadline_job(hours_to_deadline: float, estimate_hours: float, **spec: object) -> Driver:
    d = Driver()
    deadline = (T0 + timedelta(hours=hours_to_deadline)).isoformat()
    d.apply(
        Submitted(submission(deadline=deadline, estimated_runtime=f"{estimate_hours}h", **spec))
    )
    return d


def refuse_all_spot(d: Driver, t: float) -> None:
    """Every spot pool answers InsufficientInstanceCapacity."""
    while d.state is JobState.REQUESTED and d.launches()[-1].placement.market is Market.SPOT:
        last = d.launches()[-1]
        d.apply(
            CapacityUnavailable(last.attempt, last.client_token, "InsufficientInstanceCapacity"), t
        )


def test_observation_is_built_from_the_record() -> None:
    # GIVEN a job due in 10 h that needs about 4 h
    d = deadline_job(10, 4)
    assert d.job is not None
    obs = observe(d.job, at(0), SETTINGS)
    # THEN the policy sees C, D, d and G in seconds, nothing done, and the spot request held
    assert obs is not None
    assert (obs.work_seconds, obs.deadline_seconds) == (4 * 3600, 10 * 3600)
    assert obs.gap_seconds == TICK and obs.done_seconds == 0
    assert obs.changeover_seconds == SETTINGS.changeover_estimate.total_seconds()
    assert obs.tick == 0 and list(obs.history) == []


def test_measured_progress_replaces_the_estimate() -> None:
    d = deadline_job(10, 4)
    d.launch_ok("i-1", 1)
    d.apply(InstanceUp("i-1", 1, "fulfillment"), 2)
    assert d.job is not None
    d.apply(AgentReport(agent(d.job, 1, "i-1", AgentStarted())), 60)
    # 600 s of training for 10% of the steps: the job needs 6000 s, not the 4 h estimated
    d.apply(
        AgentReport(
            agent(d.job, 1, "i-1", AgentProgress(step=100, total_steps=1000), seq=2, sent=660)
        ),
        660,
    )
    assert work_estimate(d.job, at(660)) == (6000, 600)


def test_no_estimate_and_no_deadline_fall_back_to_spot_first() -> None:
    d = Driver()
    d.apply(Submitted(submission(deadline=(T0 + timedelta(hours=5)).isoformat())))
    assert d.job is not None and observe(d.job, at(0), SETTINGS) is None
    choice = DeadlinePolicy().choose(d.job, at(0), SETTINGS)
    assert choice.market is Market.SPOT and choice.reason == "spot first"


def test_availability_history_is_run_length_encoded_on_the_record() -> None:
    d = deadline_job(10, 4)
    assert d.job is not None
    job = d.job
    record_availability(job, at(3 * TICK + 1), SETTINGS, seen=False)
    record_availability(job, at(5 * TICK + 1), SETTINGS, seen=True)
    assert job.policy["avail"] == [[1, 3], [0, 2]]
    obs = observe(job, at(7 * TICK + 1), SETTINGS)
    assert obs is not None and list(obs.history) == [1, 1, 1, 0, 0, 1, 1]


def test_tight_deadline_without_spot_buys_on_demand_before_the_spot_wait_is_over() -> None:
    # GIVEN a job due in 4.2 h that needs 4 h: 12 minutes of slack, 6-minute changeovers
    d = deadline_job(4.2, 4, max_spot_wait="1h")
    # WHEN no spot pool has capacity, at the first tick and again when probed at the next
    refuse_all_spot(d, 1)
    d.apply(ReconcileTick(at(TICK + 1)), TICK + 1)
    refuse_all_spot(d, TICK + 1)
    # THEN on-demand is requested now, not after the hour of max_spot_wait
    assert d.state is JobState.REQUESTED
    assert d.launches()[-1].placement.market is Market.ON_DEMAND
    assert d.job is not None
    fallback = next(e for e in d.job.timeline if e.kind == "fallback")
    assert "deadline policy" in fallback.text


def test_loose_deadline_waits_for_spot_instead() -> None:
    d = deadline_job(48, 4)
    refuse_all_spot(d, 1)
    d.apply(ReconcileTick(at(TICK + 1)), TICK + 1)
    assert all(launch.placement.market is Market.SPOT for launch in d.launches())
    assert d.state in (JobState.QUEUED, JobState.REQUESTED)


def test_a_running_spot_job_that_falls_behind_stays_on_spot() -> None:
    # GIVEN a job due in 2 h, estimated at 1 h, running on spot but really twice as slow
    d = deadline_job(2, 1)
    d.launch_ok("i-1", 1)
    d.apply(InstanceUp("i-1", 1, "fulfillment"), 2)
    assert d.job is not None
    d.apply(AgentReport(agent(d.job, 1, "i-1", AgentStarted())), 60)
    t = 60 + 900.0
    d.apply(
        AgentReport(
            agent(d.job, 1, "i-1", AgentProgress(step=125, total_steps=1000), seq=2, sent=t)
        ),
        t,
    )
    # WHEN the reconcile tick looks (C is now measured at 7200 s: no slack left)
    obs = observe(d.job, at(t + 1), SETTINGS)
    assert obs is not None and obs.slack_seconds < 0
    before = len(d.effects)
    d.apply(ReconcileTick(at(t + 1)), t + 1)
    # THEN the spot instance trains on: on-demand would pay a changeover and finish later
    # still (tests/core/test_stay_on_spot.py); nothing is stopped, nothing launched
    assert not [e for e in d.effects[before:] if isinstance(e, StopAttempt)]
    assert len(d.launches()) == 1 and d.state is JobState.RUNNING
    assert "fallback" not in [e.kind for e in d.job.timeline]


def test_the_policy_choices_are_the_benchmark_policy_s() -> None:
    d = deadline_job(4.2, 4)
    assert d.job is not None
    obs = observe(d.job, at(0), SETTINGS)
    assert obs is not None and obs.held is Choice.NONE  # requested, not yet up


def test_the_measured_rate_is_as_of_the_report_not_as_of_now() -> None:
    # GIVEN 10% of the steps reported at 660 s, after 600 s of training
    d = deadline_job(10, 4)
    d.launch_ok("i-1", 1)
    d.apply(InstanceUp("i-1", 1, "fulfillment"), 2)
    assert d.job is not None
    d.apply(AgentReport(agent(d.job, 1, "i-1", AgentStarted())), 60)
    d.apply(
        AgentReport(
            agent(d.job, 1, "i-1", AgentProgress(step=100, total_steps=1000), seq=2, sent=660)
        ),
        660,
    )
    # WHEN the control plane looks a heartbeat period later, before the next report
    # THEN the job still needs 6000 s (600 s per 10%), not 660 s / 10% = 6600 s
    work, done = work_estimate(d.job, at(720)) or (0, 0)
    assert (work, done) == (6000, 600)


def test_a_new_spot_instance_needs_slack_for_its_boot_and_on_demand_s() -> None:
    # GIVEN a job due in 75 min that needs 60 (15 min of slack; d is 6 min)
    d = deadline_job(1.25, 1)
    assert d.job is not None
    d_seconds = SETTINGS.changeover_estimate.total_seconds()
    policy = DeadlinePolicy()
    # THEN with two changeovers of slack or more, spot (the policy's own answer)
    early = policy.choose(d.job, at(0), SETTINGS)
    obs = observe(d.job, at(0), SETTINGS)
    assert obs is not None and obs.slack_seconds >= 2 * d_seconds
    assert early.market is Market.SPOT, early.reason
    # AND with less (but enough for the benchmark policy's guard), on-demand: a booting spot
    # instance is not abandoned live, so losing spot in its boot would cost both changeovers
    later = at(5 * 60)
    obs = observe(d.job, later, SETTINGS)
    assert obs is not None and d_seconds + TICK <= obs.slack_seconds < 2 * d_seconds
    # (the benchmark's policy, whose guard needs s - min(d, G) >= d, takes spot here)
    assert RespotPolicy().decide(obs).choice is Choice.SPOT
    late = policy.choose(d.job, later, SETTINGS)
    assert late.market is Market.ON_DEMAND, late.reason
    assert "a booting spot instance is not abandoned" in late.reason
