"""bench.interruptions on a made-up changeover: what it reads from the record and the fleet."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.interruptions import changeovers
from infra.local.fleet import LocalInstance
from respot.core.events import AgentReport, InterruptionNotice
from respot.wire.messages import AgentCheckpoint, AgentPreempted, AgentProgress, AgentStarted
from tests.core.factories import T0, agent, at
from tests.core.test_lifecycle import started_job


def _instance(instance_id: str, attempt: int, **times: float) -> LocalInstance:
    return LocalInstance(
        instance_id=instance_id,
        instance_type="g5.xlarge",
        availability_zone="us-east-1a",
        market="spot",
        tags={"respot:job-id": "j", "respot:attempt": str(attempt)},
        spot_request_id=None,
        launched_at=times.pop("launched_at"),
        work_dir=Path("/nonexistent"),
        **times,
    )


def test_a_warm_changeover_splits_into_reaction_boot_pause_and_what_the_pause_holds() -> None:
    d = started_job()
    assert d.job is not None
    # EC2 emits the notice at 20.0 (its event says so); the handler requests at 20.3
    d.apply(InterruptionNotice("i-1", 1, "interruption", "terminate", at=at(20)), 20.3)
    # the old instance trains on until 35.0, saves, uploads in 0.5 s, hands off
    ckpt = AgentCheckpoint(
        step=900,
        manifest_key="m",
        size_bytes=1,
        uploaded_bytes=1,
        upload_seconds=0.5,
        reason="notice",
    )
    d.apply(AgentReport(agent(d.job, 1, "i-1", ckpt, seq=4)), 35.6)
    body = AgentPreempted(
        step=900, checkpoint_step=900, notice="spot-interruption", last_step_at=at(35)
    )
    d.apply(AgentReport(agent(d.job, 1, "i-1", body, seq=5)), 35.7)
    # the replacement, launched at 20.3 and booted at 22.3, restores in 0.2 s, steps at 36.2
    d.launch_ok("i-2", 20.3)
    started = AgentStarted(restored_step=900, restore_seconds=0.2, warm=True)
    d.apply(AgentReport(agent(d.job, 2, "i-2", started)), 36.0)
    d.apply(
        AgentReport(agent(d.job, 2, "i-2", AgentProgress(step=901, first_step_at=at(36.2)), seq=2)),
        36.3,
    )
    instances = {
        "i-1": _instance("i-1", 1, launched_at=0.0, noticed_at=20.0, ended_at=40.0),
        "i-2": _instance("i-2", 2, launched_at=20.3, booted_at=22.3),
    }
    [c] = changeovers("respot", d.job, instances, scale=0.2, mono_to_wall=T0.timestamp())
    assert c.steps_lost == 0
    assert c.event_time_to_requested_s == pytest.approx(0.3)
    assert c.notice_to_requested_s == pytest.approx(0.3)
    assert c.notice_to_booted_s == pytest.approx(2.3)
    assert c.notice_to_first_step_s == pytest.approx(16.2)
    assert c.simulated_ec2_s == pytest.approx(2.0)
    assert c.respot_share_s == pytest.approx(14.2)
    assert c.paused_s == pytest.approx(1.2)
    assert c.paused_simulated_s == pytest.approx(0.0)  # the replacement had booted by then
    assert c.paused_share_s == pytest.approx(1.2)
    assert c.final_upload_s == pytest.approx(0.5)
    assert c.paused_rest_s == pytest.approx(0.5)  # 1.2 - 0.5 upload - 0.2 restore


def test_a_pause_that_waits_for_the_boot_counts_that_wait_as_simulated() -> None:
    d = started_job()
    assert d.job is not None
    d.apply(InterruptionNotice("i-1", 1, "interruption", "terminate", at=at(20)), 20.1)
    body = AgentPreempted(
        step=500, checkpoint_step=500, notice="spot-interruption", last_step_at=at(20.5)
    )
    d.apply(AgentReport(agent(d.job, 1, "i-1", body, seq=5)), 21)
    d.launch_ok("i-2", 20.1)
    d.apply(AgentReport(agent(d.job, 2, "i-2", AgentStarted(restored_step=500))), 24.0)
    d.apply(
        AgentReport(agent(d.job, 2, "i-2", AgentProgress(step=501, first_step_at=at(25.0)), seq=2)),
        25.1,
    )
    instances = {
        "i-1": _instance("i-1", 1, launched_at=0.0, noticed_at=20.0, ended_at=24.0),
        "i-2": _instance("i-2", 2, launched_at=20.1, booted_at=22.1),
    }
    [c] = changeovers("cold", d.job, instances, scale=0.2, mono_to_wall=T0.timestamp())
    assert c.paused_s == pytest.approx(4.5)
    assert c.paused_simulated_s == pytest.approx(1.6)  # 20.5 -> 22.1 waiting for the boot
    assert c.paused_share_s == pytest.approx(2.9)
    assert c.aws_paused_s == pytest.approx(2.9 + 1.6 / 0.2)


def test_the_simulated_boot_ends_when_the_boot_script_starts_not_when_the_agent_is_up() -> None:
    # A real boot: the fleet marks an instance booted when its agent logs "started:", which
    # with warm start comes after the warm-up and the hand-off wait: respot's time, not EC2's.
    d = started_job()
    assert d.job is not None
    d.apply(InterruptionNotice("i-1", 1, "interruption", "terminate", at=at(20)), 20.1)
    body = AgentPreempted(
        step=500, checkpoint_step=500, notice="spot-interruption", last_step_at=at(30.0)
    )
    d.apply(AgentReport(agent(d.job, 1, "i-1", body, seq=5)), 31)
    d.launch_ok("i-2", 20.1)
    d.apply(AgentReport(agent(d.job, 2, "i-2", AgentStarted(restored_step=500))), 33.0)
    d.apply(
        AgentReport(agent(d.job, 2, "i-2", AgentProgress(step=501, first_step_at=at(33.5)), seq=2)),
        33.6,
    )
    replacement = _instance("i-2", 2, launched_at=20.1, booted_at=33.0)
    replacement.events.append((25.0, "user data"))  # EC2's part ends: the boot script runs
    instances = {
        "i-1": _instance("i-1", 1, launched_at=0.0, noticed_at=20.0, ended_at=34.0),
        "i-2": replacement,
    }
    [c] = changeovers("respot", d.job, instances, scale=1.0, mono_to_wall=T0.timestamp())
    assert c.notice_to_booted_s == pytest.approx(5.0)
    assert c.simulated_ec2_s == pytest.approx(4.9)
    assert c.paused_s == pytest.approx(3.5)
    assert c.paused_simulated_s == pytest.approx(0.0)  # the warm-up ran past it: respot's
    assert c.paused_share_s == pytest.approx(3.5)


def test_a_job_that_finishes_in_its_notice_hold_lost_nothing() -> None:
    # The notice comes, a replacement is requested and launched, but the old session trains
    # to the last step within its hold and completes: the replacement never runs.
    from respot.core.job import JobState
    from respot.wire.messages import AgentCompleted

    d = started_job()
    assert d.job is not None
    d.apply(InterruptionNotice("i-1", 1, "interruption", "terminate", at=at(20)), 20.3)
    d.launch_ok("i-2", 20.3)
    d.apply(
        AgentReport(agent(d.job, 1, "i-1", AgentProgress(step=3150), seq=4)),
        60.1,
    )
    done = AgentCompleted(step=3150, outputs_prefix="o/", train_seconds=50.0)
    d.apply(AgentReport(agent(d.job, 1, "i-1", done, seq=5)), 61.0)
    assert d.job.state is JobState.COMPLETED
    instances = {
        "i-1": _instance("i-1", 1, launched_at=0.0, noticed_at=20.0, ended_at=62.0),
        "i-2": _instance("i-2", 2, launched_at=20.3),
    }
    [c] = changeovers("respot", d.job, instances, scale=1.0, mono_to_wall=T0.timestamp())
    assert c.steps_lost == 0
    assert c.paused_s is None
