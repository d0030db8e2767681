"""A job's whole life driven through the real core: spot, one interruption, resumed, completed."""

from __future__ import annotations

from respot.core.events import AgentReport, InstanceDown, InstanceUp, InterruptionNotice
from respot.core.job import JobRecord
from respot.wire.messages import (
    AgentCheckpoint,
    AgentCompleted,
    AgentPreempted,
    AgentProgress,
    AgentStarted,
)
from tests.core.factories import agent
from tests.core.test_lifecycle import Driver, started_job

TOTAL = 1000


def interrupted_story() -> tuple[Driver, JobRecord]:
    """Attempt 1 trains to step 450 and is interrupted; attempt 2 resumes there and finishes."""
    d = started_job("i-1")  # started at t=3 s
    assert d.job is not None
    seq = 1
    t = 3.0
    for step in range(10, 451, 10):
        t += 1.0
        seq += 1
        body = AgentProgress(step=step, total_steps=TOTAL, metrics={"loss": 1.0 / step})
        d.apply(AgentReport(agent(d.job, 1, "i-1", body, seq=seq, sent=t)), t)
        if step % 200 == 0:
            seq += 1
            ckpt = AgentCheckpoint(
                step=step,
                manifest_key=f"m/{step}",
                size_bytes=10,
                uploaded_bytes=10,
                upload_seconds=0.1,
            )
            d.apply(AgentReport(agent(d.job, 1, "i-1", ckpt, seq=seq, sent=t)), t)
    d.apply(InterruptionNotice("i-1", 1, "interruption", "terminate"), t + 0.5)
    seq += 1
    notice_ckpt = AgentCheckpoint(
        step=450,
        manifest_key="m/450",
        size_bytes=10,
        uploaded_bytes=10,
        upload_seconds=0.1,
        reason="notice",
    )
    d.apply(AgentReport(agent(d.job, 1, "i-1", notice_ckpt, seq=seq, sent=t + 1)), t + 1)
    preempted = AgentPreempted(step=450, checkpoint_step=450, notice="spot-interruption")
    d.apply(AgentReport(agent(d.job, 1, "i-1", preempted, seq=seq + 1, sent=t + 1.5)), t + 1.5)
    d.apply(InstanceDown("i-1", 1, "terminated"), t + 2)
    d.launch_ok("i-2", t + 2)
    d.apply(InstanceUp("i-2", 2, "fulfillment", "sir-1"), t + 4)
    t += 6
    d.apply(AgentReport(agent(d.job, 2, "i-2", AgentStarted(restored_step=450), sent=t)), t)
    seq = 1
    for step in range(460, TOTAL + 1, 10):
        t += 1.0
        seq += 1
        body = AgentProgress(step=step, total_steps=TOTAL, metrics={"loss": 1.0 / step})
        d.apply(AgentReport(agent(d.job, 2, "i-2", body, seq=seq, sent=t)), t)
    done = AgentCompleted(step=TOTAL, outputs_prefix="jobs/job-1/outputs/", train_seconds=60)
    d.apply(AgentReport(agent(d.job, 2, "i-2", done, seq=seq + 1, sent=t + 1)), t + 1)
    assert d.job is not None
    return d, d.job
