"""A platform rule stops a job (issue 26): `budget_action: hard` (`PlatformStop`) and, in
`test_idle_gpus`, the idle action `stop`. A training job is asked to checkpoint and stop
(`StopAttempt`), then ends CANCELLED with the reason and its checkpoint kept, never replaced;
a job not training yet is cancelled at once; a repeat changes nothing; an agent that does not
stop is terminated after `heartbeat_timeout`."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from respot.core.effects import LaunchInstance, StopAttempt, TerminateInstances
from respot.core.events import InstanceDown, JobEvent, PlatformStop, ReconcileTick
from respot.core.job import AttemptEnd
from respot.core.lifecycle import decide
from respot.core.states import JobState
from respot.wire.messages import AgentPreempted
from tests.core.factories import at
from tests.notify.story import Story, every_second

REASON = "budget: researcher ana has paid $10.00 of its $10.00 this month (UTC)"


class Recorded(Story):
    """A story that also keeps every effect its decisions asked for."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.effects: list[Any] = []

    def apply(self, event: JobEvent, t: float) -> None:
        if self.job is not None:
            self.effects += decide(self.job, event, now=at(t), settings=self.settings).effects
        super().apply(event, t)


def _training() -> Recorded:
    story = Recorded(settings=every_second(0)).submit(0).place("i-1", 5)
    story.start("i-1", 1, 10).progress("i-1", 1, 50, 60).checkpoint("i-1", 1, 40, 70)
    assert story.record.state is JobState.RUNNING
    return story


def _kinds(story: Story) -> list[str]:
    return [e.kind for n in story.notifications for e in n.entries]


def test_a_training_job_checkpoints_stops_and_ends_cancelled_with_the_reason() -> None:
    story = _training()
    launches = len(story.launches)
    # WHEN the rule stops it
    story.apply(PlatformStop(REASON, "budget"), 100)
    # THEN its agent is asked to checkpoint and stop, the job still RUNNING, marked stopping
    assert [e for e in story.effects if isinstance(e, StopAttempt)] == [
        StopAttempt("job-1", 1, REASON)
    ]
    assert story.record.state is JobState.RUNNING
    assert story.record.policy["stopping"]["cause"] == "budget"
    assert "stopping" in _kinds(story)
    # AND a second stop (the next pass) changes nothing and asks nothing more
    versions = len(story.commits)
    story.apply(PlatformStop(REASON, "budget"), 160)
    assert len(story.commits) == versions
    assert sum(isinstance(e, StopAttempt) for e in story.effects) == 1
    # WHEN the agent reports it stopped after its checkpoint at step 55
    body = AgentPreempted(step=55, checkpoint_step=55, notice="stop")
    story.checkpoint("i-1", 1, 55, 170, reason="notice")
    story._agent(1, "i-1", body, 171)
    # THEN the job is CANCELLED with the reason and the checkpoint named, nothing relaunched
    record = story.record
    assert record.state is JobState.CANCELLED
    assert record.reason is not None and record.reason.startswith(REASON)
    assert "checkpoint at step 55 is kept" in record.reason
    assert record.attempts[0].end is AttemptEnd.CANCELLED
    assert len(story.launches) == launches
    assert any(isinstance(e, TerminateInstances) for e in story.effects)
    assert _kinds(story)[-1] == "cancelled"
    # AND the job's Slack thread says both, with the reason
    from respot.notify import reply_for

    entries = [e for n in story.notifications for e in n.entries]
    stopping = next(e for e in entries if e.kind == "stopping")
    cancelled = next(e for e in entries if e.kind == "cancelled")
    for entry, head in (
        (stopping, "Stopped by the platform team's rule"),
        (cancelled, "Cancelled"),
    ):
        reply = reply_for(entry, record)
        assert reply is not None and head in reply.text and REASON in reply.text


def test_a_spot_notice_while_stopping_does_not_replace_the_job() -> None:
    story = _training()
    launches = len(story.launches)
    story.apply(PlatformStop(REASON, "budget"), 100)
    story.notice("i-1", 1, 110)  # EC2 reclaims it meanwhile: the agent saves anyway
    assert story.record.state is JobState.RUNNING and len(story.launches) == launches
    story.apply(InstanceDown("i-1", 1, "terminated"), 200)
    assert story.record.state is JobState.CANCELLED and len(story.launches) == launches
    assert story.record.reason is not None and story.record.reason.startswith(REASON)


def test_an_agent_that_does_not_stop_is_terminated_after_the_heartbeat_timeout() -> None:
    story = _training()
    story.apply(PlatformStop(REASON, "budget"), 100)
    limit = story.settings.heartbeat_timeout.total_seconds()
    story.progress("i-1", 1, 60, 100 + limit / 2)  # still training, heartbeats go on
    story.apply(ReconcileTick(at(100 + limit / 2)), 100 + limit / 2)
    assert story.record.state is JobState.RUNNING
    story.progress("i-1", 1, 70, 100 + limit - 1)
    story.apply(ReconcileTick(at(100 + limit)), 100 + limit)
    record = story.record
    assert record.state is JobState.CANCELLED
    assert record.reason is not None and "had not stopped" in record.reason
    assert "i-1" in [
        i for e in story.effects if isinstance(e, TerminateInstances) for i in e.instance_ids
    ]


def test_a_job_not_training_yet_is_cancelled_at_once_and_a_held_one_is_left() -> None:
    story = Recorded().submit(0)  # REQUESTED: its launch asked for
    story.apply(PlatformStop(REASON, "budget"), 5)
    assert story.record.state is JobState.CANCELLED
    assert story.record.reason is not None and "no checkpoint exists" in story.record.reason
    held = Recorded(after=["job-0"]).submit(0)
    assert held.record.state is JobState.HELD
    held.apply(PlatformStop(REASON, "budget"), 5)
    assert held.record.state is JobState.HELD and len(held.commits) == 1


def test_nothing_is_launched_for_a_stopping_job_on_the_tick() -> None:
    story = _training()
    story.apply(PlatformStop(REASON, "budget"), 100)
    launches, effects = len(story.launches), len(story.effects)
    for n in range(1, 5):
        story.progress("i-1", 1, 60 + n, 100 + 30 * n)
        story.apply(ReconcileTick(at(100 + 30 * n)), 100 + 30 * n)
    assert len(story.launches) == launches
    assert not any(isinstance(e, LaunchInstance | StopAttempt) for e in story.effects[effects:])
    assert story.record.state is JobState.RUNNING
    assert story.record.policy["stopping"]["attempt"] == 1
    assert timedelta(seconds=120) < story.settings.heartbeat_timeout
