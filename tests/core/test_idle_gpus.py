"""Idle GPUs (issue 26, item 5): a RUNNING job whose GPUs stay below the threshold for the
period gets one warning (timeline, hence Slack); busy GPUs, no NVML, or a new attempt do not."""

from __future__ import annotations

from respot.wire.gpu import GpuSample
from respot.wire.messages import AgentProgress
from tests.core.factories import at
from tests.notify.story import Story, every_second


def _beat(story: Story, t: float, util: float | None, step: int) -> None:
    gpus = [GpuSample(index=0, utilization_pct=util), GpuSample(index=1, utilization_pct=util)]
    story._agent(1, "i-1", AgentProgress(step=step, gpus=gpus), t)


def _warnings(story: Story) -> list[dict[str, object]]:
    return [e.data for n in story.notifications for e in n.entries if e.kind == "idle-gpus"]


def test_gpus_idle_for_half_an_hour_warn_once() -> None:
    # GIVEN a running job whose two GPUs are busy for five minutes, then report 1% from
    # t=360 s on, a heartbeat a minute
    story = Story(settings=every_second(0)).submit(0).place("i-1", 5).start("i-1", 1, 10)
    for n in range(1, 45):
        _beat(story, 60.0 * n, 50.0 if n < 6 else 1.0, n)
    # THEN one warning, once 30 minutes of idleness had passed, naming the figures
    (warning,) = _warnings(story)
    assert warning["minutes"] == 30 and warning["utilization_pct"] == 1.0
    entry = next(e for e in story.record.timeline if e.kind == "idle-gpus")
    assert "below 5%" in entry.text and "i-1" in entry.text
    # counted from the first idle heartbeat (t=360 s), which was written, not coalesced
    assert entry.at == at(360 + 1800)


def test_busy_gpus_in_between_start_the_clock_again() -> None:
    story = Story(settings=every_second(0)).submit(0).place("i-1", 5).start("i-1", 1, 10)
    for n in range(1, 60):
        # idle, but every 20 minutes a busy minute
        _beat(story, 60.0 * n, 80.0 if n % 20 == 0 else 2.0, n)
    assert _warnings(story) == []


def test_no_nvml_samples_never_warn() -> None:
    story = Story(settings=every_second(0)).submit(0).place("i-1", 5).start("i-1", 1, 10)
    for n in range(1, 60):
        _beat(story, 60.0 * n, None, n)
    assert _warnings(story) == []
    assert "idle_gpus" not in story.record.policy


def test_the_warning_and_a_hold_are_posted_in_the_job_s_slack_thread() -> None:
    from respot.notify import reply_for

    story = Story(settings=every_second(0)).submit(0).place("i-1", 5).start("i-1", 1, 10)
    for n in range(1, 40):
        _beat(story, 60.0 * n, 0.0, n)
    entry = next(e for e in story.record.timeline if e.kind == "idle-gpus")
    reply = reply_for(entry, story.record)
    assert reply is not None and reply.text.startswith(":zzz: GPUs idle: mean utilization 0%")
    held = Story(after=["job-0"]).submit(0)
    (note,) = [e for e in held.record.timeline if e.kind == "held"]
    reply = reply_for(note, held.record)
    assert reply is not None and "Held in the team's queue" in reply.text
    assert "(after job-0)" in reply.text and "respot queue" in reply.text
