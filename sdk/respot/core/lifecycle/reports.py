"""Agent reports: what each kind (started, progress, checkpoint, preempted, completed, failed,
boot failed) changes on the job.

Event: `AgentReport`: `_agent` hands each kind to its rule (`_started`, `_progress`,
`_checkpoint`, `_preempted`, `_completed`, `_failed`, `_boot_failed`); a report of a job
already over goes to `_after_the_end`. What progress adds to the timeline and the notifier
is in `progress`.
"""

from __future__ import annotations

from datetime import datetime

from respot.core.effects import ReleaseHandoff
from respot.core.events import AgentReport
from respot.core.job import Attempt, AttemptEnd, CheckpointInfo
from respot.core.lifecycle.attempts import (
    _boot_failure,
    _interrupt,
    _note_never_checkpointed,
)
from respot.core.lifecycle.draft import (
    Decision,
    _Draft,
    _finish,
    _unchanged,
    at_step,
    checkpoint_text,
)
from respot.core.lifecycle.progress import (
    _drop_old_checkpoint_notes,
    _idle_gpus,
    _progress_history,
    _progress_note,
)
from respot.core.lifecycle.stops import stop_finished
from respot.core.placement import ControlSettings
from respot.core.states import JobState, Transition
from respot.core.transfer import note_restore
from respot.wire.messages import (
    AgentBootFailed,
    AgentCheckpoint,
    AgentCompleted,
    AgentFailed,
    AgentMessage,
    AgentPreempted,
    AgentProgress,
    AgentStarted,
)


def _agent(d: _Draft, event: AgentReport, settings: ControlSettings) -> Decision:
    """A report of an attempt's agent (or boot script): the rule of its kind decides."""
    job = d.job
    msg = event.message
    att = job.attempt(msg.attempt)
    if att is None or att.instance_id not in (None, msg.instance_id):
        return _unchanged("ignored: message from no attempt of this job")
    body = msg.body
    if job.state.is_terminal():
        return _after_the_end(d, att, msg)
    if isinstance(body, AgentBootFailed):
        return _boot_failed(d, att, msg.instance_id, body)
    att.instance_id = msg.instance_id
    heard_before = att.last_heard_at
    job.last_heartbeat_at = max(job.last_heartbeat_at or msg.sent_at, msg.sent_at)
    att.last_heard_at = max(att.last_heard_at or msg.sent_at, msg.sent_at)

    match body:
        case AgentStarted():
            return _started(d, att, msg, body)
        case AgentProgress():
            return _progress(d, att, msg, body, settings, heard_before=heard_before)
        case AgentCheckpoint():
            return _checkpoint(d, att, msg, body)
        case AgentPreempted():
            return _preempted(d, att, msg, body)
        case AgentCompleted():
            return _completed(d, att, body)
        case AgentFailed():
            return _failed(d, att, body)
    return d.decision()


def _after_the_end(d: _Draft, att: Attempt, msg: AgentMessage) -> Decision:
    """Any report once the job is over: its instance goes; a late start is still recorded."""
    job = d.job
    body = msg.body
    if (
        isinstance(body, AgentCompleted | AgentFailed | AgentPreempted | AgentBootFailed)
        or att.end is None
    ):
        d.terminate([msg.instance_id], f"job is {job.state.value.lower()}")
    if isinstance(body, AgentStarted) and att.started_at is None:
        # Delivered after the job ended (SQS does not keep order, and a failed delivery
        # comes back later): what the attempt restored is still part of its history.
        att.instance_id = msg.instance_id
        att.started_at = msg.sent_at
        att.restored_step = body.restored_step
        att.restore_seconds = body.restore_seconds
        _started_note(d, att, msg.instance_id, body, late=True)
        return d.decision()
    return _unchanged("ignored: job is over", d.effects)


def _started(d: _Draft, att: Attempt, msg: AgentMessage, body: AgentStarted) -> Decision:
    """The agent started (restored a checkpoint or not): the current attempt's job starts."""
    job = d.job
    current = att is job.current
    if att.started_at is not None:
        return _unchanged("duplicate")
    att.started_at = d.now
    att.restored_step = body.restored_step
    att.restore_seconds = body.restore_seconds
    note_restore(job, att)
    if current and job.state in (JobState.REQUESTED, JobState.STARTING):
        att.bound_at = att.bound_at or d.now
        job.waiting_since = None
        d.go(Transition.START)
    _started_note(d, att, msg.instance_id, body, late=False)
    return d.decision()


def _started_note(
    d: _Draft, att: Attempt, instance_id: str, body: AgentStarted, *, late: bool
) -> None:
    previous = d.job.attempt(att.number - 1)
    started = att.started_at or d.now
    paused_at = _paused_at(previous, started) if previous else None
    downtime = max((started - paused_at).total_seconds(), 0.0) if paused_at else None
    if body.restored_step is not None:
        text = f"resumed from step {body.restored_step} on {instance_id}"
    else:
        text = f"started on {instance_id} (no checkpoint yet)"
    if downtime is not None:
        text += f"; {downtime:.1f}s since the previous attempt stopped training"
    if body.warm_failure:
        text += f"; warm-up failed ({body.warm_failure}), started cold"
    elif body.warm:
        text += "; warm start"
    if late:
        text += " (reported after the job ended)"
    if body.refused_checkpoints:
        _refused_note(d, att, body)
    d.note(
        "resumed" if body.restored_step is not None else "started",
        text,
        attempt=att.number,
        instance_id=instance_id,
        restored_step=body.restored_step,
        restore_seconds=body.restore_seconds,
        downtime_seconds=downtime,
        warm=body.warm,
    )


def _refused_note(d: _Draft, att: Attempt, body: AgentStarted) -> None:
    """The checkpoints the restore refused as unusable, and the one it used instead."""
    refused = body.refused_checkpoints or []
    steps = ", ".join(str(r.step) if r.step is not None else "?" for r in refused)
    used = (
        f"resumed from step {body.restored_step} instead"
        if body.restored_step is not None
        else "no older checkpoint was usable: started from the beginning"
    )
    first = refused[0]
    d.note(
        "checkpoint-refused",
        f"checkpoint{'s' if len(refused) > 1 else ''} at step {steps} refused as corrupt "
        f"({first.reason}); {used}",
        attempt=att.number,
        refused=[r.model_dump(mode="json", exclude_none=True) for r in refused],
        restored_step=body.restored_step,
    )


def _paused_at(previous: Attempt, started: datetime) -> datetime | None:
    """When training paused for a changeover (its downtime counts from here to `started`):
    the later of the previous attempt's notice (or its end, without one) and the last time it
    was seen training (its session's last report(), its newest heartbeat with a step), no
    later than `started`. One definition for both moves: a spot notice's clock starts at the
    notice unless the old instance trained on through it (the warm start's hold), and a
    return's (`_hand_over_return`: `notice_at` is the stop request, held while spot boots)
    at the on-demand attempt's last step, not at the request (docs/lifecycle.md, "Downtime").
    """
    gone_at = previous.notice_at or previous.ended_at
    seen = [t for t in (previous.last_step_at, previous.last_progress_at) if t and t <= started]
    return max([gone_at, *seen]) if gone_at else None


def _progress(
    d: _Draft,
    att: Attempt,
    msg: AgentMessage,
    body: AgentProgress,
    settings: ControlSettings,
    *,
    heard_before: datetime | None,
) -> Decision:
    """A heartbeat: progress only moves forward; one that changes nothing is coalesced.

    `heard_before` is when the attempt was last heard from before this report.
    """
    job = d.job
    current = att is job.current
    state_before, timeline_before = job.state, len(job.timeline)
    first_step = att.first_step_at is None and body.first_step_at is not None
    if first_step:
        att.first_step_at = body.first_step_at
    idle_changed = False
    if body.gpus is not None and current:
        job.progress.gpus = list(body.gpus)
        if job.state is JobState.RUNNING:
            idle_changed = _idle_gpus(d, att, msg.sent_at, list(body.gpus))
    if body.step is not None:
        att.last_step = max(att.last_step or 0, body.step)
        att.last_progress_at = max(att.last_progress_at or msg.sent_at, msg.sent_at)
        if job.progress.step is None or body.step >= job.progress.step:
            job.progress.step = body.step
            job.progress.total_steps = body.total_steps or job.progress.total_steps
            job.progress.metrics = dict(body.metrics)
            job.progress.at = msg.sent_at
            _progress_history(d, att.number, d.now)
    if current and job.state in (JobState.REQUESTED, JobState.STARTING):
        att.bound_at = att.bound_at or d.now
        d.go(Transition.START)
    if current and job.state is JobState.RUNNING and body.step is not None:
        _progress_note(d, att, settings)
    material = (
        job.state is not state_before
        or d.notes
        or len(job.timeline) != timeline_before
        or first_step
        or idle_changed
    )
    if (
        not material
        and heard_before is not None
        and msg.sent_at - heard_before < settings.heartbeat_write_interval
    ):
        # A heartbeat that changes nothing anyone acts on is not worth rewriting the
        # record for: one write per interval keeps liveness (and the step shown) fresh.
        return _unchanged("coalesced: heartbeat")
    return d.decision()


def _checkpoint(d: _Draft, att: Attempt, msg: AgentMessage, body: AgentCheckpoint) -> Decision:
    """A checkpoint complete in S3: the job's newest one if no older than the one it has."""
    job = d.job
    att.checkpoint_step = max(att.checkpoint_step or 0, body.step)
    first_notice = body.reason == "notice" and att.notice_checkpoint_at is None
    if first_notice:
        att.notice_checkpoint_at = msg.sent_at
    if job.checkpoint is None or body.step >= job.checkpoint.step:
        if job.checkpoint and job.checkpoint.manifest_key == body.manifest_key:
            return d.decision() if first_notice else _unchanged("duplicate")
        job.checkpoint = CheckpointInfo(
            step=body.step,
            manifest_key=body.manifest_key,
            attempt=att.number,
            at=d.now,
            size_bytes=body.size_bytes,
        )
        if body.reason == "periodic":
            _drop_old_checkpoint_notes(job)
        d.note(
            "checkpoint",
            f"checkpoint at step {body.step} complete in S3 "
            f"({body.uploaded_bytes:,} of {body.size_bytes:,} bytes sent, "
            f"{body.upload_seconds:.2f}s, {body.reason})",
            attempt=att.number,
            step=body.step,
            reason=body.reason,
            upload_seconds=body.upload_seconds,
            uploaded_bytes=body.uploaded_bytes,
            size_bytes=body.size_bytes,
        )
    elif not first_notice:
        return _unchanged("ignored: older checkpoint")
    return d.decision()


def _preempted(d: _Draft, att: Attempt, msg: AgentMessage, body: AgentPreempted) -> Decision:
    """The agent stopped after its interruption checkpoint: the attempt ends INTERRUPTED."""
    job = d.job
    if att.end is not None:
        # The instance-gone event came first: still keep where and when training
        # stopped. The agent trains on through its notice (the warm-start hold), so
        # its stop report can be ahead of the last heartbeat recorded.
        later = body.step is not None and (att.last_step or 0) < body.step
        late_at = att.last_step_at is None and body.last_step_at is not None
        newer_ckpt = (body.checkpoint_step or 0) > (att.checkpoint_step or 0)
        if not (later or late_at or newer_ckpt):
            return _unchanged("duplicate")
        if later:
            att.last_step = body.step
            att.last_step_at = body.last_step_at or att.last_step_at
        else:
            att.last_step_at = att.last_step_at or body.last_step_at
        att.checkpoint_step = max(att.checkpoint_step or 0, body.checkpoint_step or 0)
        return d.decision()
    if body.step is not None:  # none: stopped before training began
        att.last_step = max(att.last_step or 0, body.step)
    att.last_step_at = body.last_step_at
    att.checkpoint_step = max(att.checkpoint_step or 0, body.checkpoint_step or 0)
    lost = (att.last_step or 0) - (body.checkpoint_step or 0)
    lost = max(lost, (body.step or 0) - (body.checkpoint_step or 0), 0)
    d.note(
        "preempted",
        f"{msg.instance_id} stopped {at_step(body.step)} with "
        f"{checkpoint_text(body.checkpoint_step)} ({lost} steps lost)",
        attempt=att.number,
        step=body.step,
        checkpoint_step=body.checkpoint_step,
        lost_steps=lost,
        notice=body.notice,
    )
    if body.checkpoint_step is None:
        _note_never_checkpointed(d, att, msg.instance_id, f"stopped {at_step(body.step)}")
    if stop_finished(d, att):
        pass  # a platform rule's stop (`stops`): the job ends CANCELLED with its reason
    elif att.notice_at is None:
        _interrupt(d, att, f"{body.notice} notice seen by the agent", noticed=True)
    elif att is not job.current and job.policy.get("return_from") == att.number:
        d.note(
            "switched",
            f"{msg.instance_id} stopped {at_step(body.step)} for the return to spot; "
            f"attempt {job.current.number if job.current else '?'} "
            + (
                f"restores its checkpoint at step {body.checkpoint_step}"
                if body.checkpoint_step is not None
                else "starts from the beginning (no checkpoint)"
            ),
            attempt=att.number,
            instance_id=msg.instance_id,
            step=body.step,
            checkpoint_step=body.checkpoint_step,
        )
    if att.end is None:  # (a platform rule's stop has ended it CANCELLED: `stops`)
        att.end = AttemptEnd.INTERRUPTED
        att.ended_at = d.now
    d.terminate([msg.instance_id], "stopped after its interruption checkpoint")
    return d.decision()


def _completed(d: _Draft, att: Attempt, body: AgentCompleted) -> Decision:
    """Training finished: the job is COMPLETED with its final step, metrics and outputs."""
    job = d.job
    att.last_step = max(att.last_step or 0, body.step or 0)
    if body.step is not None:
        job.progress.step = max(job.progress.step or 0, body.step)
    if body.metrics:
        job.progress.metrics = {**job.progress.metrics, **body.metrics}
    job.outputs_prefix = body.outputs_prefix
    job.outputs_sha256 = body.outputs_sha256
    _finish(
        d,
        Transition.COMPLETE,
        AttemptEnd.COMPLETED,
        f"completed {at_step(body.step)}",
        by=att,
    )
    return d.decision()


def _failed(d: _Draft, att: Attempt, body: AgentFailed) -> Decision:
    """Training failed: the job is FAILED with the agent's reason and log tail."""
    if body.outputs_sha256 is not None:
        d.job.outputs_sha256 = body.outputs_sha256
    if body.step is not None:  # where it failed: status shows it even if no heartbeat told
        att.last_step = max(att.last_step or 0, body.step)
        d.job.progress.step = max(d.job.progress.step or 0, body.step)
    _finish(d, Transition.FAIL, AttemptEnd.FAILED, body.reason, by=att, log=body.log_tail)
    return d.decision()


def _boot_failed(d: _Draft, att: Attempt, instance_id: str, body: AgentBootFailed) -> Decision:
    """The boot script reported that it could not start the agent, just before power-off."""
    if not att.never_started:
        return _unchanged("ignored: the attempt already started training")
    if att.boot_failure == body.reason:
        return _unchanged("duplicate")
    att.instance_id = instance_id
    d.note(
        "boot-failed",
        f"{instance_id} failed to boot: {body.reason}",
        attempt=att.number,
        instance_id=instance_id,
        reason=body.reason,
        log_tail=body.log_tail[-20:],
    )
    d.terminate([instance_id], "its boot failed")
    if att.end is None:
        att.end = AttemptEnd.BOOT_FAILED
        att.ended_at = d.now
        d.effects.append(ReleaseHandoff(d.job.job_id, att.number))
        _boot_failure(d, att, body.reason, body.log_tail)
    else:
        # Its disappearance was counted first (the report came late): keep the better reason.
        att.end = AttemptEnd.BOOT_FAILED
        att.boot_failure = body.reason
    return d.decision()
