"""A platform rule stops a job: checkpoint, then stop, keeping the checkpoint (issue 26).

Two rules of the platform team stop a job that no one asked to stop: a researcher's or team's
monthly budget paid in full with `budget_action: hard` (`PlatformStop`, from an admission
pass), and GPUs idle past the period with the idle action `stop` (`progress._idle_gpus`).
Both take this one path:
- a job whose current attempt is training (RUNNING, its instance known) is asked to
  checkpoint and stop (`StopAttempt`, the path a planned market move takes); the job is marked
  `stopping` with the reason. When that attempt ends (the agent's stop report after its
  checkpoint, `reports._preempted`; its instance gone or silent, `attempts._interrupt`), the
  job is CANCELLED with the reason and the newest checkpoint kept in S3 (`stop_finished`);
  a spot interruption notice meanwhile changes nothing (the agent is saving anyway); an agent
  that has not stopped within `heartbeat_timeout` is terminated (`stop_overdue`, the tick),
  so the stop is bounded;
- any other live job (admitted but not training yet, waiting for a replacement) is CANCELLED
  at once with the reason: there is nothing new to checkpoint, the newest checkpoint is kept
  (a user's `cancel` does the same).
A second stop of a job already stopping changes nothing.

A third rule does not end the job: the team's queue **preempts** a running job for fair share
(`PlatformStop` with cause `PREEMPT`, from an admission pass, `respot.queue.preemption`). It
takes the same checkpoint-and-stop path, but when the attempt ends the job goes back to HELD
(`Transition.REQUEUE`), its checkpoint kept and its attempt ended INTERRUPTED, and it is not
replaced: the queue admits it again later and its next attempt restores the checkpoint, as a
replacement after a spot interruption does. Only a training job is preempted (a job not
training is left alone: the pass plans again); an agent that does not stop within
`heartbeat_timeout` is terminated and the job requeued from its newest checkpoint. The time
of the preemption stays on the job (`policy[PREEMPTED]`) so that the planner does not preempt
it again within its own length.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from respot.core.effects import StopAttempt
from respot.core.job import Attempt, AttemptEnd, JobRecord
from respot.core.lifecycle.draft import _Draft, _finish
from respot.core.states import JobState, Transition

STOPPING = "stopping"  # job.policy[STOPPING] = {"attempt", "since", "reason", "cause"}
PREEMPT = "preempt"  # the cause of a fair-share preemption (the job is requeued, not ended)
PREEMPTED = "preempted"  # job.policy[PREEMPTED] = {"at", "count", "reason"}: the last one


def _kept(d: _Draft) -> str:
    ckpt = d.job.checkpoint
    if ckpt is None:
        return "no checkpoint exists (the job never saved one)"
    return (
        f"its checkpoint at step {ckpt.step} is kept in S3 (a new job naming restore_from: "
        f"{d.job.job_id} starts from it)"
    )


def begin_stop(d: _Draft, reason: str, cause: str) -> bool:
    """Start the rule's stop of the job; False if it is over or already stopping."""
    job = d.job
    if job.state.is_terminal() or STOPPING in job.policy or job.state is JobState.HELD:
        return False
    att = job.current
    training = (
        job.state is JobState.RUNNING
        and att is not None
        and att.instance_id is not None
        and att.end is None
    )
    if cause == PREEMPT and not training:
        return False  # only a training job is preempted; the next pass plans again
    if training:
        assert att is not None
        job.policy[STOPPING] = {
            "attempt": att.number,
            "since": d.now.isoformat(),
            "reason": reason,
            "cause": cause,
        }
        d.effects.append(StopAttempt(job.job_id, att.number, reason))
        d.note(
            "stopping",
            f"{reason}: {att.instance_id} checkpoints and stops",
            reason=reason,
            cause=cause,
            attempt=att.number,
        )
        return True
    _finish(d, Transition.CANCEL, AttemptEnd.CANCELLED, f"{reason}; {_kept(d)}")
    d.job.policy["stopped_by"] = cause
    return True


def stopping(d: _Draft, att: Attempt) -> bool:
    """True if a rule is stopping this attempt (the job not over yet)."""
    stop = d.job.policy.get(STOPPING)
    if not stop or d.job.state.is_terminal():
        return False
    return bool(stop.get("attempt") == att.number)


def stop_finished(d: _Draft, att: Attempt) -> bool:
    """The attempt a rule is stopping has ended: the job is CANCELLED with the reason.

    True if it was such an attempt (the caller does not replace it)."""
    job = d.job
    if not stopping(d, att):
        return False
    stop = job.policy[STOPPING]
    if stop.get("cause") == PREEMPT:
        _requeue(d, att, "its agent checkpointed and stopped")
        return True
    _finish(d, Transition.CANCEL, AttemptEnd.CANCELLED, f"{stop['reason']}; {_kept(d)}")
    job.policy["stopped_by"] = stop.get("cause")
    return True


def _requeue(d: _Draft, att: Attempt, how: str) -> None:
    """The preempted attempt has ended: the job waits in the team's queue again (HELD)."""
    job = d.job
    stop = job.policy.pop(STOPPING)
    if att.end is None:
        att.end = AttemptEnd.INTERRUPTED
        att.ended_at = d.now
    d.go(Transition.REQUEUE)
    job.waiting_since = None
    job.queue_wait = None
    before = job.policy.get(PREEMPTED) or {}
    admitted = (d.now - (job.admitted_at or d.now)).total_seconds()
    job.policy[PREEMPTED] = {
        "at": d.now.isoformat(),
        "count": int(before.get("count", 0)) + 1,
        "reason": stop["reason"],
        # time admitted before this preemption, all of them: max_runtime counts it too
        "admitted_seconds": float(before.get("admitted_seconds", 0.0)) + max(admitted, 0.0),
    }
    ckpt = job.checkpoint
    resumes = (
        f"its checkpoint at step {ckpt.step} is kept; its next attempt restores it"
        if ckpt is not None
        else "it never saved a checkpoint, so its next attempt starts from the beginning"
    )
    d.note(
        "requeued",
        f"{stop['reason']}: {how}; back in the team's queue (HELD), {resumes} when the queue "
        "admits it again",
        reason=stop["reason"],
        attempt=att.number,
        checkpoint_step=ckpt.step if ckpt is not None else None,
    )


def admitted_before(job: JobRecord) -> timedelta:
    """The time a requeued job was admitted before its last preemption (max_runtime counts
    from admission, and a preempted job's admissions add up; the time held does not count)."""
    preempted = job.policy.get(PREEMPTED) or {}
    return timedelta(seconds=float(preempted.get("admitted_seconds", 0.0)))


def stop_overdue(d: _Draft, now: datetime) -> bool:
    """The tick: an agent asked to stop that has not within `heartbeat_timeout` is terminated
    (the job CANCELLED with the reason, the newest checkpoint kept). True if it was."""
    job = d.job
    stop = job.policy.get(STOPPING)
    if not stop or job.state.is_terminal():
        return False
    since = datetime.fromisoformat(stop["since"])
    limit = d.settings.heartbeat_timeout
    if now - since < limit:
        return False
    if stop.get("cause") == PREEMPT:
        att = next((a for a in job.attempts if a.number == stop.get("attempt")), None)
        if att is not None and job.state is JobState.RUNNING:
            d.terminate([att.instance_id or ""], "preempted: its agent had not stopped in time")
            _requeue(
                d,
                att,
                f"its agent had not stopped after {int(limit.total_seconds())}s, so its "
                "instance was terminated",
            )
            return True
    _finish(
        d,
        Transition.CANCEL,
        AttemptEnd.CANCELLED,
        f"{stop['reason']}; its agent had not stopped after {int(limit.total_seconds())}s, so "
        f"its instance was terminated; {_kept(d)}",
    )
    job.policy["stopped_by"] = stop.get("cause")
    return True
