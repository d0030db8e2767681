"""What the job record keeps of a changeover as the user feels it: when EC2 emitted the
notice, the old attempt's last training step, the new attempt's first, and how it started."""

from __future__ import annotations

from respot.aws.ec2events import parse_ec2_event
from respot.core.events import AgentReport, InstanceDown, InterruptionNotice
from respot.core.job import TimelineEntry
from respot.wire.messages import AgentPreempted, AgentProgress, AgentStarted
from tests.core.factories import agent, at
from tests.core.test_lifecycle import Driver, started_job


def test_the_notice_keeps_the_time_ec2_emitted_it_not_only_when_it_was_handled() -> None:
    d = started_job()
    d.apply(InterruptionNotice("i-1", 1, "interruption", "terminate", at=at(18)), 20)
    assert d.job is not None
    first = d.job.attempts[0]
    assert first.notice_sent_at == at(18) and first.notice_at == at(20)
    assert d.job.attempts[1].requested_at == at(20)


def test_the_event_time_is_read_from_the_envelope_and_a_placeholder_is_none() -> None:
    event = {
        "source": "aws.ec2",
        "detail-type": "EC2 Spot Instance Interruption Warning",
        "time": "2026-11-23T17:00:05Z",
        "detail": {"instance-id": "i-1", "instance-action": "terminate"},
    }
    parsed = parse_ec2_event(event)
    assert isinstance(parsed, InterruptionNotice)
    assert parsed.at is not None and parsed.at.isoformat() == "2026-11-23T17:00:05+00:00"
    placeholder = parse_ec2_event({**event, "time": "yyyy-mm-ddThh:mm:ssZ"})
    assert isinstance(placeholder, InterruptionNotice) and placeholder.at is None


def test_first_and_last_training_steps_of_attempts_are_recorded() -> None:
    d = started_job()
    assert d.job is not None
    d.apply(InterruptionNotice("i-1", 1, "interruption", "terminate", at=at(19)), 20)
    body = AgentPreempted(
        step=50, checkpoint_step=50, notice="spot-interruption", last_step_at=at(21)
    )
    d.apply(AgentReport(agent(d.job, 1, "i-1", body, seq=5)), 22)
    d.launch_ok("i-2", 22)
    d.apply(AgentReport(agent(d.job, 2, "i-2", AgentStarted(restored_step=50, warm=True))), 30)
    progress = AgentProgress(step=51, first_step_at=at(31))
    d.apply(AgentReport(agent(d.job, 2, "i-2", progress, seq=2)), 31.5)
    # a later heartbeat does not move the first step
    later = AgentProgress(step=60, first_step_at=at(40))
    d.apply(AgentReport(agent(d.job, 2, "i-2", later, seq=3)), 41)
    old, new = d.job.attempts
    assert old.last_step_at == at(21)
    assert new.first_step_at == at(31)
    started = [e for e in d.job.timeline if e.kind == "resumed"]
    assert started and started[-1].text.endswith("; warm start")


def test_a_heartbeat_bringing_the_first_step_time_is_written_not_coalesced() -> None:
    d = started_job()
    assert d.job is not None
    d.apply(AgentReport(agent(d.job, 1, "i-1", AgentProgress(step=None), seq=2)), 3.1)
    decision = d.apply(
        AgentReport(agent(d.job, 1, "i-1", AgentProgress(step=None, first_step_at=at(3.2)), seq=3)),
        3.3,
    )
    assert decision.record is not None
    assert d.job.attempts[0].first_step_at == at(3.2)


def test_a_cold_start_after_a_failed_warm_up_says_so_in_the_timeline() -> None:
    d = started_job()
    assert d.job is not None
    d.apply(InterruptionNotice("i-1", 1, "interruption", "terminate"), 20)
    d.launch_ok("i-2", 21)
    body = AgentStarted(restored_step=40, warm=False, warm_failure="ImportError: no module x")
    d.apply(AgentReport(agent(d.job, 2, "i-2", body)), 30)
    resumed = [e for e in d.job.timeline if e.kind == "resumed"][-1]
    assert "warm-up failed (ImportError: no module x), started cold" in resumed.text


def test_a_preempted_message_after_the_instance_is_gone_still_gives_the_last_step_time() -> None:
    d = started_job()
    assert d.job is not None
    d.apply(InterruptionNotice("i-1", 1, "interruption", "terminate"), 20)
    d.apply(InstanceDown("i-1", 1, "shutting-down"), 24)
    assert d.job.attempts[0].end is not None
    body = AgentPreempted(
        step=50, checkpoint_step=50, notice="spot-interruption", last_step_at=at(23)
    )
    decision = d.apply(AgentReport(agent(d.job, 1, "i-1", body, seq=5)), 25)
    assert decision.record is not None
    assert d.job.attempts[0].last_step_at == at(23)
    again = d.apply(AgentReport(agent(d.job, 1, "i-1", body, seq=5)), 26)
    assert again.record is None  # a duplicate changes nothing


def test_a_stop_report_after_the_instance_is_gone_keeps_the_later_step() -> None:
    # GIVEN an attempt last heard at step 160 that keeps training through its notice
    d = started_job()
    assert d.job is not None
    d.apply(AgentReport(agent(d.job, 1, "i-1", AgentProgress(step=160), seq=2)), 15)
    d.apply(InterruptionNotice("i-1", 1, "interruption", "terminate", at=at(19)), 20)
    # WHEN EC2's instance-gone event is handled before the agent's stop report
    d.apply(InstanceDown("i-1", 1, "terminated"), 40)
    body = AgentPreempted(
        step=183, checkpoint_step=183, notice="spot-interruption", last_step_at=at(38)
    )
    d.apply(AgentReport(agent(d.job, 1, "i-1", body, seq=5)), 41)
    # THEN the attempt keeps where training really stopped, the step the next one restores
    old = d.job.attempts[0]
    assert old.last_step == 183 and old.checkpoint_step == 183
    assert old.last_step_at == at(38)


def resumed_note(d: Driver) -> TimelineEntry:
    assert d.job is not None
    return [e for e in d.job.timeline if e.kind == "resumed"][-1]


def test_an_interruption_told_at_once_reports_its_downtime_from_the_notice() -> None:
    # GIVEN an attempt heard training at step 160, then EC2's notice handled at 20; its session,
    # told at once, made its last report at 19.5 (before the handler saw the notice)
    d = started_job()
    assert d.job is not None
    d.apply(AgentReport(agent(d.job, 1, "i-1", AgentProgress(step=160), seq=2, sent=15)), 15)
    d.apply(InterruptionNotice("i-1", 1, "interruption", "terminate", at=at(19)), 20)
    body = AgentPreempted(
        step=161, checkpoint_step=161, notice="spot-interruption", last_step_at=at(19.5)
    )
    d.apply(AgentReport(agent(d.job, 1, "i-1", body, seq=5, sent=22)), 22)
    d.launch_ok("i-2", 22)
    # WHEN the replacement has restored at 30
    d.apply(AgentReport(agent(d.job, 2, "i-2", AgentStarted(restored_step=161), sent=30)), 30)
    # THEN its downtime counts from the notice, as it always has: 10 s
    note = resumed_note(d)
    assert note.data["downtime_seconds"] == 10.0
    assert "10.0s since the previous attempt stopped training" in note.text


def test_an_interruption_held_while_the_replacement_warmed_counts_from_its_last_step() -> None:
    # GIVEN an attempt that trains on through its notice (handled at 20) while the replacement
    # boots (the warm start's hold): heartbeats to 40, its last report at 45
    d = started_job()
    assert d.job is not None
    d.apply(InterruptionNotice("i-1", 1, "interruption", "terminate", at=at(19)), 20)
    d.launch_ok("i-2", 21)
    d.apply(AgentReport(agent(d.job, 1, "i-1", AgentProgress(step=300), seq=2, sent=40)), 40)
    body = AgentPreempted(
        step=310, checkpoint_step=310, notice="spot-interruption", last_step_at=at(45)
    )
    d.apply(AgentReport(agent(d.job, 1, "i-1", body, seq=5, sent=47)), 47)
    d.apply(AgentReport(agent(d.job, 2, "i-2", AgentStarted(restored_step=310), sent=50)), 50)
    # THEN the downtime is the pause the user had (5 s), not the replacement's boot too (30 s)
    assert resumed_note(d).data["downtime_seconds"] == 5.0
