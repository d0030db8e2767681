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
"""

from __future__ import annotations

from datetime import datetime

from respot.core.effects import StopAttempt
from respot.core.job import Attempt, AttemptEnd
from respot.core.lifecycle.draft import _Draft, _finish
from respot.core.states import JobState, Transition

STOPPING = "stopping"  # job.policy[STOPPING] = {"attempt", "since", "reason", "cause"}


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
    if (
        job.state is JobState.RUNNING
        and att is not None
        and att.instance_id is not None
        and att.end is None
    ):
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
    _finish(d, Transition.CANCEL, AttemptEnd.CANCELLED, f"{stop['reason']}; {_kept(d)}")
    job.policy["stopped_by"] = stop.get("cause")
    return True


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
    _finish(
        d,
        Transition.CANCEL,
        AttemptEnd.CANCELLED,
        f"{stop['reason']}; its agent had not stopped after {int(limit.total_seconds())}s, so "
        f"its instance was terminated; {_kept(d)}",
    )
    job.policy["stopped_by"] = stop.get("cause")
    return True
