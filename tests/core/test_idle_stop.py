"""Idle GPUs with the platform team's action `stop` (issue 26): past the period the job gets
the warning and is checkpointed and stopped, then ends CANCELLED with the reason, never
replaced; with `warn` (the default) it only gets the warning. The threshold and the period
are the settings', not fixed."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from respot.core.effects import StopAttempt
from respot.core.states import JobState
from respot.wire.gpu import GpuSample
from respot.wire.messages import AgentPreempted, AgentProgress
from tests.core.test_platform_stop import Recorded
from tests.notify.story import every_second


def _story(action: str) -> Recorded:
    settings = replace(
        every_second(0),
        idle_gpu_pct=10.0,
        idle_gpu_period=timedelta(minutes=10),
        idle_gpu_action=action,
    )
    story = Recorded(settings=settings).submit(0).place("i-1", 5).start("i-1", 1, 10)
    story.checkpoint("i-1", 1, 3, 20)
    # 8% a minute for 15 minutes: idle under a 10% threshold (not under the default 5%)
    for n in range(1, 16):
        gpus = [GpuSample(index=0, utilization_pct=8.0)]
        story._agent(1, "i-1", AgentProgress(step=n, gpus=gpus), 60.0 * n)
    return story


def test_stop_checkpoints_and_stops_an_idle_job_and_ends_it_with_the_reason() -> None:
    story = _story("stop")
    launches = len(story.launches)
    # THEN once 10 minutes of idleness passed: the warning, and the agent asked to stop
    warning = next(e for e in story.record.timeline if e.kind == "idle-gpus")
    assert warning.data["minutes"] == 10 and warning.data["action"] == "stop"
    assert "below 10%" in warning.text and "checkpoints and stops" in warning.text
    stops = [e for e in story.effects if isinstance(e, StopAttempt)]
    assert len(stops) == 1 and stops[0].attempt == 1
    assert story.record.policy["stopping"]["cause"] == "idle-gpus"
    # WHEN the agent reports it stopped after its checkpoint
    story.checkpoint("i-1", 1, 15, 960, reason="notice")
    story._agent(1, "i-1", AgentPreempted(step=15, checkpoint_step=15, notice="stop"), 961)
    # THEN CANCELLED, the reason the idle figures, the checkpoint kept, nothing relaunched
    record = story.record
    assert record.state is JobState.CANCELLED and len(story.launches) == launches
    assert record.reason is not None and record.reason.startswith("GPUs idle: mean utilization 8%")
    assert "idle_gpus action is stop" in record.reason
    assert "checkpoint at step 15 is kept" in record.reason


def test_warn_only_warns() -> None:
    story = _story("warn")
    assert [e.kind for e in story.record.timeline].count("idle-gpus") == 1
    assert not any(isinstance(e, StopAttempt) for e in story.effects)
    assert story.record.state is JobState.RUNNING and "stopping" not in story.record.policy
