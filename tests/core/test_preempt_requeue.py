"""A job preempted for fair share (issue 26): the team's queue stops a training job
(`PlatformStop` with cause `preempt`), its agent checkpoints and stops, and the job goes back
to HELD, not CANCELLED: its checkpoint kept, no replacement launched until the queue admits
it again, then one new attempt that resumes from the checkpoint. A duplicate or late stop,
report or admission changes nothing; a job not training is not preempted; an agent that does
not stop is terminated and the job requeued all the same."""

from __future__ import annotations

from dataclasses import replace

from respot.core.effects import StopAttempt, TerminateInstances
from respot.core.events import Admitted, InstanceDown, PlatformStop, ReconcileTick
from respot.core.job import AttemptEnd
from respot.core.lifecycle.stops import PREEMPT, PREEMPTED
from respot.core.states import JobState
from respot.wire.messages import AgentPreempted
from tests.core.factories import at
from tests.core.test_platform_stop import Recorded
from tests.notify.story import every_second

REASON = "preempted for fair share: ana holds more than its share"


def _training() -> Recorded:
    settings = replace(every_second(0), admission=True)
    story = Recorded(settings=settings).submit(0)
    assert story.record.state is JobState.HELD
    story.apply(Admitted("its turn"), 1)
    story.place("i-1", 5).start("i-1", 1, 10).progress("i-1", 1, 50, 60)
    story.checkpoint("i-1", 1, 40, 70)
    assert story.record.state is JobState.RUNNING and len(story.launches) == 1
    return story


def _stopped(story: Recorded, t: float = 171) -> None:
    story.checkpoint("i-1", 1, 55, t - 1, reason="notice")
    story._agent(1, "i-1", AgentPreempted(step=55, checkpoint_step=55, notice="stop"), t)


def test_a_preempted_job_checkpoints_goes_back_to_the_queue_and_resumes_when_admitted() -> None:
    story = _training()
    # WHEN the queue preempts it
    story.apply(PlatformStop(REASON, PREEMPT), 100)
    # THEN its agent is asked to checkpoint and stop; the job is RUNNING, marked stopping
    assert [e for e in story.effects if isinstance(e, StopAttempt)] == [
        StopAttempt("job-1", 1, REASON)
    ]
    assert story.record.state is JobState.RUNNING
    assert story.record.policy["stopping"]["cause"] == PREEMPT
    # WHEN its agent reports it stopped after its checkpoint at step 55
    _stopped(story)
    # THEN the job is HELD again (not CANCELLED): no reason of an ended job, the attempt ended
    # INTERRUPTED, its instance terminated, the checkpoint kept, nothing relaunched
    record = story.record
    assert record.state is JobState.HELD and record.finished_at is None
    assert record.attempts[0].end is AttemptEnd.INTERRUPTED
    assert record.checkpoint is not None and record.checkpoint.step == 55
    assert "stopping" not in record.policy
    assert record.policy[PREEMPTED]["count"] == 1
    assert record.policy[PREEMPTED]["at"] == at(171).isoformat()
    assert len(story.launches) == 1
    assert "i-1" in [
        i for e in story.effects if isinstance(e, TerminateInstances) for i in e.instance_ids
    ]
    requeued = next(e for e in record.timeline if e.kind == "requeued")
    assert REASON in requeued.text and "checkpoint at step 55 is kept" in requeued.text
    # AND the tick launches nothing for it while it is held
    story.apply(ReconcileTick(at(400)), 400)
    assert len(story.launches) == 1 and story.record.state is JobState.HELD
    # WHEN the queue admits it again THEN one new attempt is launched, and it resumes
    story.apply(Admitted("its turn again"), 1000)
    assert len(story.launches) == 2 and story.launches[-1].attempt == 2
    story.place("i-2", 1005).start("i-2", 2, 1010, restored=55)
    assert story.record.state is JobState.RUNNING
    assert story.record.current is not None and story.record.current.number == 2
    # AND max_runtime counts the time it was admitted, not the time it waited held:
    # admitted at 1 s, preempted at 171 s (170 s), admitted again at 1000 s
    assert story.record.policy[PREEMPTED]["admitted_seconds"] == 170.0
    assert story.record.admitted_at == at(1000)
    # AND the Slack thread says it was preempted and queued again
    from respot.notify import reply_for

    entry = next(e for n in story.notifications for e in n.entries if e.kind == "requeued")
    reply = reply_for(entry, story.record)
    assert reply is not None and "Preempted, queued again" in reply.text


def test_max_runtime_counts_the_time_admitted_before_a_preemption_not_the_time_held() -> None:
    settings = replace(every_second(0), admission=True)
    story = Recorded(settings=settings, max_runtime="15m").submit(0)
    story.apply(Admitted("its turn"), 0)
    story.place("i-1", 5).start("i-1", 1, 10).checkpoint("i-1", 1, 40, 70)
    story.apply(PlatformStop(REASON, PREEMPT), 500)
    _stopped(story, 600)  # admitted 600 s, then held an hour
    story.apply(Admitted("its turn again"), 4200)
    story.place("i-2", 4205).start("i-2", 2, 4210, restored=55)
    story.apply(ReconcileTick(at(4200 + 290)), 4200 + 290)  # 600 + 290 s < 15 min
    assert story.record.state is JobState.RUNNING
    story.apply(ReconcileTick(at(4200 + 310)), 4200 + 310)  # 600 + 310 s > 15 min
    assert story.record.state is JobState.FAILED
    assert story.record.reason is not None and "max_runtime" in story.record.reason


def test_a_duplicate_or_late_stop_report_or_admission_changes_nothing() -> None:
    story = _training()
    story.apply(PlatformStop(REASON, PREEMPT), 100)
    # a second preemption while it stops asks nothing more
    versions = len(story.commits)
    story.apply(PlatformStop(REASON, PREEMPT), 120)
    assert len(story.commits) == versions
    _stopped(story)
    held = story.record.model_copy(deep=True)
    # the agent's report redelivered, the instance's end, another preemption: nothing changes
    story._agent(1, "i-1", AgentPreempted(step=55, checkpoint_step=55, notice="stop"), 180)
    story.apply(InstanceDown("i-1", 1, "terminated"), 190)
    story.apply(PlatformStop(REASON, PREEMPT), 200)
    assert story.record.state is JobState.HELD
    assert story.record.policy[PREEMPTED] == held.policy[PREEMPTED]
    assert len(story.launches) == 1
    assert [e.kind for e in story.record.timeline].count("requeued") == 1
    # admitted twice: one new attempt only
    story.apply(Admitted("its turn again"), 1000)
    story.apply(Admitted("its turn again"), 1001)
    assert len(story.launches) == 2 and story.record.state is JobState.REQUESTED


def test_an_instance_gone_while_stopping_requeues_the_job() -> None:
    story = _training()
    story.apply(PlatformStop(REASON, PREEMPT), 100)
    story.notice("i-1", 1, 110)  # a spot notice meanwhile: the agent saves anyway
    assert story.record.state is JobState.RUNNING and len(story.launches) == 1
    story.apply(InstanceDown("i-1", 1, "terminated"), 200)
    assert story.record.state is JobState.HELD and len(story.launches) == 1
    assert story.record.attempts[0].end is AttemptEnd.INTERRUPTED


def test_an_agent_that_does_not_stop_is_terminated_and_the_job_requeued() -> None:
    story = _training()
    story.apply(PlatformStop(REASON, PREEMPT), 100)
    limit = story.settings.heartbeat_timeout.total_seconds()
    story.progress("i-1", 1, 60, 100 + limit - 1)
    story.apply(ReconcileTick(at(100 + limit)), 100 + limit)
    record = story.record
    assert record.state is JobState.HELD and len(story.launches) == 1
    assert "i-1" in [
        i for e in story.effects if isinstance(e, TerminateInstances) for i in e.instance_ids
    ]
    requeued = next(e for e in record.timeline if e.kind == "requeued")
    assert "had not stopped" in requeued.text


def test_a_job_not_training_is_not_preempted() -> None:
    settings = replace(every_second(0), admission=True)
    story = Recorded(settings=settings).submit(0)
    story.apply(Admitted("its turn"), 1)  # REQUESTED: its launch asked for, no instance yet
    assert story.record.state is JobState.REQUESTED
    versions = len(story.commits)
    story.apply(PlatformStop(REASON, PREEMPT), 5)
    assert story.record.state is JobState.REQUESTED and len(story.commits) == versions
    assert not any(isinstance(e, StopAttempt) for e in story.effects)
    assert len(story.launches) == 1
