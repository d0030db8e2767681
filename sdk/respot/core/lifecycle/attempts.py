"""Opening and replacing attempts: how every family decides a new attempt or an interruption.

A new attempt and its launch (`_new_attempt`, `_launch_effect`: placement and returns), an
attempt whose instance is going or gone (`_interrupt`: instance events, agent reports, the
tick) and one that never started training (`_boot_failure`: the same three).
"""

from __future__ import annotations

from respot.core.effects import LaunchInstance
from respot.core.events import PlaceNow
from respot.core.failures import boot_failures_in_a_row
from respot.core.job import Attempt, AttemptEnd, JobRecord, Placement
from respot.core.lifecycle.draft import OWNER_TAG, _Draft, _finish, at_step, client_token
from respot.core.lifecycle.stops import stop_finished, stopping
from respot.core.states import JobState, Transition, can


def _handoff_from(job: JobRecord) -> int | None:
    """The newest earlier attempt whose instance is still up and hands over to the next: after
    a notice (still saving), or the on-demand attempt a return to spot leaves (it trains on
    until the spot instance has launched, then saves: `_hand_over_return`)."""
    leaving = job.policy.get("return_from")
    for a in reversed(job.attempts):
        if a.is_open and a.instance_id and (a.notice_at is not None or a.number == leaving):
            return a.number
    return None


def _new_attempt(d: _Draft, placement: Placement, transition: Transition, reason: str) -> Attempt:
    """Open the next attempt in `placement`, move the job by `transition` and launch it."""
    job = d.job
    number = len(job.attempts) + 1
    launches = int(job.policy.get("launches", 0)) + 1
    job.policy["launches"] = launches
    attempt = Attempt(
        number=number,
        placement=placement,
        client_token=client_token(job.job_id, number, launches),
        requested_at=d.now,
    )
    job.attempts.append(attempt)
    d.go(transition)
    d.effects.append(_launch_effect(job, attempt))
    d.note(
        "requested",
        f"requested {attempt.placement.market.value} {attempt.placement.instance_type} "
        f"in {attempt.placement.availability_zone} (attempt {number}; {reason})",
        attempt=number,
        market=attempt.placement.market.value,
        instance_type=attempt.placement.instance_type,
        availability_zone=attempt.placement.availability_zone,
    )
    return attempt


def _launch_effect(job: JobRecord, attempt: Attempt) -> LaunchInstance:
    handoff = _handoff_from(job)
    if handoff == attempt.number:
        handoff = None
    tags = dict(job.spec.tags)
    owner = job.submission.submitted_by_id
    if owner:  # who may open a tunnel to it (infra/constructs/workspaces.py); last, so it wins
        tags[OWNER_TAG] = owner
    return LaunchInstance(
        job_id=job.job_id,
        attempt=attempt.number,
        placement=attempt.placement,
        client_token=attempt.client_token,
        await_handoff_from=handoff,
        tags=tags,
    )


NEVER_CHECKPOINTED = "restarts from zero: this job never checkpointed"


def _note_never_checkpointed(d: _Draft, att: Attempt, instance_id: str | None, how: str) -> None:
    """No silent loss (docs/commands.md): an attempt ended (its agent's report, or its instance
    lost without one) and no checkpoint exists anywhere, so the replacement starts from zero."""
    if d.job.checkpoint is not None:
        return
    d.note(
        "no-checkpoint",
        f"{NEVER_CHECKPOINTED} ({instance_id} {how}); save into RESPOT_CHECKPOINT_DIR (a "
        "command) or call save_checkpoint (a session)",
        attempt=att.number,
        step=att.last_step,
    )


def _interrupt(d: _Draft, att: Attempt, why: str, *, noticed: bool) -> None:
    """The attempt's instance is going (noticed) or gone: mark it and ask for a replacement."""
    job = d.job
    if noticed:
        att.notice_at = d.now
    if att is not job.current or not can(job.state, Transition.INTERRUPT):
        return
    if stopping(d, att):
        # A platform rule's stop (`stops`): the job ends when the attempt does, not replaced;
        # a notice meanwhile changes nothing (its agent checkpoints and stops either way).
        if not noticed:
            stop_finished(d, att)
        return
    if not noticed and att.instance_id is None and job.state is JobState.REQUESTED:
        return
    planned = job.policy.get("switching") == att.number
    if not planned:
        job.interruptions += 1
    d.go(Transition.INTERRUPT)
    job.waiting_since = d.now
    checkpoint_step = job.checkpoint.step if job.checkpoint else None
    # Heartbeats lag: the step reached is at least the newest checkpoint's.
    step = max(job.progress.step or 0, checkpoint_step or 0) if job.progress.step else None
    if planned:
        d.note(
            "switched",
            f"{att.instance_id} stopped {at_step(step)} for the switch to "
            f"{job.policy.get('switch_to')}",
            attempt=att.number,
            instance_id=att.instance_id,
            step=step,
            checkpoint_step=checkpoint_step,
        )
        d.follow_up = PlaceNow("switching market")
        return
    d.note(
        "interrupted",
        f"{why} for {att.instance_id} {at_step(step)}; "
        + (
            f"newest checkpoint step {checkpoint_step}"
            if checkpoint_step is not None
            else "no checkpoint yet"
        ),
        attempt=att.number,
        instance_id=att.instance_id,
        step=step,
        checkpoint_step=checkpoint_step,
        noticed=noticed,
        interruptions=job.interruptions,
    )
    d.follow_up = PlaceNow(f"replacing {why}")


def _boot_failure(d: _Draft, att: Attempt, why: str, log_tail: list[str] | None = None) -> None:
    """An attempt ended before training started: replace it, or fail after too many in a row."""
    job = d.job
    att.boot_failure = why
    count = boot_failures_in_a_row(job)
    limit = d.settings.max_boot_failures
    if att is not job.current or job.state.is_terminal():
        return
    if count >= limit:
        _finish(
            d,
            Transition.FAIL,
            AttemptEnd.FAILED,
            f"{count} instances in a row never started training (max_boot_failures={limit}); "
            f"the last: {why}",
            log=(log_tail or [])[-20:],
        )
        return
    if not can(job.state, Transition.INTERRUPT):
        return
    d.go(Transition.INTERRUPT)
    job.waiting_since = d.now
    d.note(
        "boot-retry",
        f"attempt {att.number} never started training ({why}); replacing it "
        f"({count} of {limit} before the job fails)",
        attempt=att.number,
        instance_id=att.instance_id,
        boot_failures=count,
    )
    d.follow_up = PlaceNow("replacing an instance that never started training")
