"""A cancel that checkpoints first (`checkpoint_first`, issue 27: `respot notebook stop`,
`respot cancel --checkpoint`): a training job's agent is asked to checkpoint and stop
(`StopAttempt`), and the job ends CANCELLED with that checkpoint kept when the attempt ends,
never replaced, naming who asked; a job not training is cancelled at once; a repeat, a
redelivery or a late report cannot finish it twice; a plain cancel meanwhile finishes it at
once (its owner insists); the stop is bounded by `stop_overdue`; a plain cancel is unchanged."""

from __future__ import annotations

from typing import Any

from respot.core.effects import StopAttempt, TerminateInstances
from respot.core.events import CancelRequested, InstanceDown, JobEvent, ReconcileTick
from respot.core.job import AttemptEnd
from respot.core.lifecycle import decide
from respot.core.states import JobState
from respot.wire.messages import AgentPreempted, CancelCommand
from tests.core.factories import at
from tests.notify.story import Story, every_second

ANA = "arn:aws:iam::123456789012:user/ana"
OPS = "arn:aws:iam::123456789012:role/ops"
REASON = "workspace nlp stopped by its owner"


class Recorded(Story):
    """A story that also keeps every effect its decisions asked for."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.effects: list[Any] = []

    def apply(self, event: JobEvent, t: float) -> None:
        if self.job is not None:
            self.effects += decide(self.job, event, now=at(t), settings=self.settings).effects
        super().apply(event, t)

    def stops(self) -> list[StopAttempt]:
        return [e for e in self.effects if isinstance(e, StopAttempt)]

    def terminated(self) -> set[str]:
        """Instances asked to terminate (a late report of a finished job's instance asks
        again: terminating is idempotent)."""
        return {
            i for e in self.effects if isinstance(e, TerminateInstances) for i in e.instance_ids
        }


def _training() -> Recorded:
    story = Recorded(settings=every_second(0), submitted_by=ANA).submit(0).place("i-1", 5)
    story.start("i-1", 1, 10).progress("i-1", 1, 50, 60).checkpoint("i-1", 1, 40, 70)
    assert story.record.state is JobState.RUNNING
    return story


def _cancel(story: Story, t: float, *, first: bool | None, by: str = ANA) -> None:
    command = CancelCommand(
        job_id=story.job_id,
        reason=REASON,
        requested_at=at(t),
        requested_by=by,
        checkpoint_first=first,
    )
    story.apply(CancelRequested(command), t)


def _stopped(story: Recorded, step: int, t: float) -> None:
    """The agent saved its notice checkpoint at `step` and reports it stopped."""
    story.checkpoint("i-1", 1, step, t, reason="notice")
    story._agent(1, "i-1", AgentPreempted(step=step, checkpoint_step=step, notice="stop"), t + 1)


def test_a_training_job_checkpoints_then_ends_cancelled_with_the_checkpoint_kept() -> None:
    story = _training()
    launches = len(story.launches)
    # WHEN its owner cancels it, checkpoint first
    _cancel(story, 100, first=True)
    # THEN its agent is asked to checkpoint and stop; the job is still RUNNING, nothing killed
    assert story.stops() == [StopAttempt("job-1", 1, f"{REASON} by {ANA}")]
    assert story.record.state is JobState.RUNNING
    assert story.record.policy["stopping"]["cause"] == "owner"
    assert story.terminated() == set()
    # WHEN the agent has saved at step 55 and stopped
    _stopped(story, 55, 170)
    # THEN the job is CANCELLED, naming who asked and the checkpoint kept; nothing relaunched
    record = story.record
    assert record.state is JobState.CANCELLED
    assert record.reason is not None and record.reason.startswith(f"{REASON} by {ANA}")
    assert "checkpoint at step 55 is kept" in record.reason
    assert record.checkpoint is not None and record.checkpoint.step == 55
    assert record.attempts[0].end is AttemptEnd.CANCELLED
    assert record.policy["stopped_by"] == "owner"
    assert len(story.launches) == launches and story.terminated() == {"i-1"}
    # AND the job's Slack thread says it is saving first, not that a platform rule stopped it
    from respot.notify import reply_for

    stopping = next(e for n in story.notifications for e in n.entries if e.kind == "stopping")
    reply = reply_for(stopping, record)
    assert reply is not None and "Stopping: saving first" in reply.text
    assert "platform team" not in reply.text


def test_repeats_redeliveries_and_late_reports_cannot_finish_it_twice() -> None:
    story = _training()
    _cancel(story, 100, first=True)
    versions = len(story.commits)
    # a second graceful cancel (or the same message redelivered) changes nothing
    _cancel(story, 101, first=True)
    _cancel(story, 102, first=True)
    assert len(story.commits) == versions and len(story.stops()) == 1
    _stopped(story, 55, 170)
    assert story.record.state is JobState.CANCELLED
    ended = len(story.commits)
    reason = story.record.reason
    # after the end: the stop report again, the instance's termination, a tick, both cancels
    story._agent(1, "i-1", AgentPreempted(step=55, checkpoint_step=55, notice="stop"), 180)
    story.apply(InstanceDown("i-1", 1, "terminated"), 190)
    story.apply(ReconcileTick(at(200)), 200)
    _cancel(story, 210, first=True)
    _cancel(story, 211, first=None)
    assert len(story.commits) == ended
    assert story.record.state is JobState.CANCELLED and story.record.reason == reason
    assert len(story.stops()) == 1 and story.terminated() == {"i-1"}


def test_the_instance_gone_before_the_report_ends_it_cancelled_not_replaced() -> None:
    story = _training()
    launches = len(story.launches)
    _cancel(story, 100, first=True)
    story.apply(InstanceDown("i-1", 1, "terminated"), 150)  # out of order: no stop report
    record = story.record
    assert record.state is JobState.CANCELLED and len(story.launches) == launches
    assert record.reason is not None and "checkpoint at step 40 is kept" in record.reason
    # the agent's report, arriving late, changes nothing
    ended = len(story.commits)
    story._agent(1, "i-1", AgentPreempted(step=55, checkpoint_step=55, notice="stop"), 160)
    assert len(story.commits) == ended and story.record.state is JobState.CANCELLED


def test_a_plain_cancel_while_stopping_cancels_at_once() -> None:
    story = _training()
    _cancel(story, 100, first=True)
    assert story.terminated() == set()
    _cancel(story, 110, first=None)  # the owner insists
    record = story.record
    assert record.state is JobState.CANCELLED and story.terminated() == {"i-1"}
    assert record.reason == f"{REASON} by {ANA}"
    # the agent's stop report after that changes nothing
    ended = len(story.commits)
    _stopped(story, 55, 170)
    assert len(story.commits) == ended


def test_an_agent_that_does_not_stop_is_terminated_after_the_heartbeat_timeout() -> None:
    story = _training()
    _cancel(story, 100, first=True)
    limit = story.settings.heartbeat_timeout.total_seconds()
    story.progress("i-1", 1, 60, 100 + limit - 1)  # still training: heartbeats go on
    story.apply(ReconcileTick(at(100 + limit - 1)), 100 + limit - 1)
    assert story.record.state is JobState.RUNNING
    story.apply(ReconcileTick(at(100 + limit)), 100 + limit)
    record = story.record
    assert record.state is JobState.CANCELLED and story.terminated() == {"i-1"}
    assert record.reason is not None and "had not stopped" in record.reason
    assert "checkpoint at step 40 is kept" in record.reason


def test_a_job_not_training_is_cancelled_at_once_and_an_admin_is_named() -> None:
    story = Recorded(submitted_by=ANA).submit(0)  # REQUESTED: its launch asked for
    _cancel(story, 5, first=True, by=OPS)
    record = story.record
    assert record.state is JobState.CANCELLED and story.stops() == []
    assert record.reason is not None and record.reason.startswith(f"{REASON} by {OPS}")
    assert "no checkpoint exists" in record.reason and record.policy["stopped_by"] == "admin"
    held = Recorded(after=["job-0"]).submit(0)
    assert held.record.state is JobState.HELD
    _cancel(held, 5, first=True)  # held: nothing to save, cancelled at once
    assert held.record.state is JobState.CANCELLED and held.stops() == []


def test_a_plain_cancel_of_a_training_job_is_unchanged() -> None:
    story = _training()
    for first in (None, False):
        plain = _training()
        _cancel(plain, 100, first=first)
        record = plain.record
        assert record.state is JobState.CANCELLED and plain.stops() == []
        assert plain.terminated() == {"i-1"} and "stopping" not in record.policy
        assert record.reason == f"{REASON} by {ANA}"
        assert record.attempts[0].end is AttemptEnd.CANCELLED
    assert story.record.state is JobState.RUNNING


def test_a_cancel_saving_first_takes_over_a_platform_stop_under_way() -> None:
    from respot.core.events import PlatformStop

    story = _training()
    rule = "budget: researcher ana has paid $10.00 of its $10.00 this month (UTC)"
    story.apply(PlatformStop(rule, "budget"), 100)
    assert story.record.policy["stopping"]["cause"] == "budget"
    _cancel(story, 110, first=True)  # the owner stops it too: one stop, now the owner's
    stop = story.record.policy["stopping"]
    assert stop["cause"] == "owner" and stop["attempt"] == 1
    assert len(story.stops()) == 1 and story.record.state is JobState.RUNNING
    _cancel(story, 111, first=True)  # a repeat changes nothing
    versions = len(story.commits)
    _cancel(story, 112, first=True)
    assert len(story.commits) == versions
    _stopped(story, 55, 170)
    record = story.record
    assert record.state is JobState.CANCELLED and record.policy["stopped_by"] == "owner"
    assert record.reason is not None and record.reason.startswith(f"{REASON} by {ANA}")
    assert "checkpoint at step 55 is kept" in record.reason
