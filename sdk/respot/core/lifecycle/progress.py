"""Progress on the record: when a heartbeat adds a progress line, a progress note, or drops a
checkpoint line.

The timeline keeps a sparse progress history (`_progress_history`) and the newest periodic
checkpoint lines (`_drop_old_checkpoint_notes`); the notifier gets throttled progress notes
(`_progress_note`); GPUs that stay idle get one warning, or with the idle action `stop` are
also checkpointed and stopped (`_idle_gpus`). Used by `reports`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from respot.core.job import Attempt, JobRecord, TimelineEntry
from respot.core.lifecycle.draft import _Draft
from respot.core.lifecycle.stops import begin_stop
from respot.core.placement import ControlSettings
from respot.wire.gpu import mean_utilization

# Periodic checkpoint lines kept on the job record (the notifier still gets every one). The
# whole record is written on every heartbeat and DynamoDB bills each started KB: a timeline
# growing by a line per checkpoint made a day-old job's heartbeats 4-5x dearer (bench.cost).
CHECKPOINT_NOTES_KEPT = 3
PROGRESS_HISTORY_FRACTION = 0.02  # a "progress" timeline entry per 2% of the total steps
PROGRESS_HISTORY_SECONDS = 600.0  # or per ten minutes when the session sets no total
PROGRESS_HISTORY_METRICS = 8


def _drop_old_checkpoint_notes(job: JobRecord) -> None:
    """Keep room for one more periodic checkpoint line within CHECKPOINT_NOTES_KEPT."""
    periodic = [
        i
        for i, e in enumerate(job.timeline)
        if e.kind == "checkpoint" and e.data.get("reason") == "periodic"
    ]
    for i in reversed(periodic[: max(len(periodic) - CHECKPOINT_NOTES_KEPT + 1, 0)]):
        del job.timeline[i]


def _progress_note(d: _Draft, att: Attempt, settings: ControlSettings) -> None:
    """Tell the notifier of the training's progress at most once per `progress_note_interval`.

    Throttled here, at the source, so that a heartbeat costs the notifier nothing; remembered
    on the record (`progress.noted_*`). The note goes to the notifier only: the timeline keeps
    its own sparse history (`_progress_history`). It carries where the rate is measured
    from: the previous note, or this attempt's first report if the attempt began after that
    note (so that neither downtime nor the session's start-up skews the ETA).
    """
    job = d.job
    progress = job.progress
    interval = settings.progress_note_interval
    step = att.last_step  # this attempt's: the job's can be higher after a resume from behind
    if interval <= timedelta(0) or step is None or att.started_at is None:
        return
    first = next((a.started_at for a in job.attempts if a.started_at is not None), att.started_at)
    if d.now - (progress.noted_at or first) < interval:
        return
    if progress.noted_at is not None and progress.noted_at >= att.started_at:
        since_at, since_step = progress.noted_at, progress.noted_step or 0
    else:
        # This attempt's first report, when training really began (after the session's own
        # start-up); the attempt's start if the history no longer has it.
        first_report = next(
            (
                e
                for e in job.timeline
                if e.kind == "progress" and e.data.get("attempt") == att.number
            ),
            None,
        )
        since_at, since_step = att.started_at, att.restored_step or 0
        if first_report is not None and first_report.data.get("step") is not None:
            since_at, since_step = first_report.at, int(first_report.data["step"])
    if step <= since_step:
        return  # no rate yet: the next report will do
    total = f"/{progress.total_steps}" if progress.total_steps else ""
    data = {
        "attempt": att.number,
        "step": step,
        "total_steps": progress.total_steps,
        "metrics": dict(progress.metrics),
        "since_step": since_step,
        "since_at": since_at.isoformat(),
    }
    d.notes.append(TimelineEntry(at=d.now, kind="progress", text=f"step {step}{total}", data=data))
    progress.noted_step = step
    progress.noted_at = d.now


def _progress_history(d: _Draft, attempt: int, at: datetime) -> None:
    """Keep a sparse history of progress on the timeline (for `respot timeline`), not notified.

    One entry per `PROGRESS_HISTORY_FRACTION` of the total steps, or per
    `PROGRESS_HISTORY_SECONDS` when the session sets no total, and the first report of
    each attempt (when training really resumed, after the session's own start-up).
    """
    job = d.job
    step, total = job.progress.step, job.progress.total_steps
    if step is None:
        return
    last = next((e for e in reversed(job.timeline) if e.kind == "progress"), None)
    if last is not None and last.data.get("attempt") == attempt:
        moved = step - int(last.data.get("step") or 0)
        quiet = (at - last.at).total_seconds()
        due = (total and moved >= total * PROGRESS_HISTORY_FRACTION) or (
            quiet >= PROGRESS_HISTORY_SECONDS
        )
        if moved <= 0 or not due:
            return
    metrics = dict(list(job.progress.metrics.items())[:PROGRESS_HISTORY_METRICS])
    shown = " ".join(f"{k}={v:.4g}" for k, v in metrics.items())
    of = f"/{total}" if total else ""
    data: dict[str, Any] = {"attempt": attempt, "step": step, "total_steps": total}
    data["metrics"] = metrics
    gpu_util = mean_utilization(job.progress.gpus or [])
    if gpu_util is not None:
        data["gpu_util_pct"] = gpu_util  # the timeline picture's GPU line
    # Only on the record: the notifier gets the throttled notes of `_progress_note` instead.
    job.add_timeline(
        TimelineEntry(at=at, kind="progress", text=f"step {step}{of} {shown}".strip(), data=data)
    )


def _idle_gpus(d: _Draft, att: Attempt, at: datetime, gpus: list[Any]) -> bool:
    """Follow how long the attempt's GPUs have been idle; warn once past the period.

    One heartbeat's mean utilization below `idle_gpu_pct` starts (or continues) an idle
    spell, one at or above it ends the spell; a new attempt starts afresh. Returns True when
    the record changed (a spell began or ended, or the warning was given), so that the
    heartbeat is written, not coalesced."""
    job, settings = d.job, d.settings
    util = mean_utilization(gpus)
    if util is None:
        return False
    spell = job.policy.get("idle_gpus")
    if util >= settings.idle_gpu_pct or (spell and spell.get("attempt") != att.number):
        if spell is None:
            return False
        job.policy.pop("idle_gpus")
        if util >= settings.idle_gpu_pct:
            return True
        spell = None
    if spell is None:
        job.policy["idle_gpus"] = {"attempt": att.number, "since": at.isoformat()}
        return True
    since = datetime.fromisoformat(spell["since"])
    if spell.get("warned") or at - since < settings.idle_gpu_period:
        return False
    spell["warned"] = at.isoformat()
    minutes = int((at - since).total_seconds() // 60)
    idle = (
        f"GPUs idle: mean utilization {util:g}% (below {settings.idle_gpu_pct:g}%) for "
        f"{minutes} min on {att.instance_id or 'its instance'}"
    )
    stop = settings.idle_gpu_action == "stop"
    then = (
        "the platform team's idle_gpus action is stop: it checkpoints and stops"
        if stop
        else "which bills all the same; check the job's input pipeline, or cancel it "
        f"(respot cancel {job.job_id})"
    )
    d.note(
        "idle-gpus",
        f"{idle}, {then}" if not stop else f"{idle}; {then}",
        utilization_pct=util,
        minutes=minutes,
        attempt=att.number,
        action=settings.idle_gpu_action,
    )
    if stop:
        begin_stop(d, f"{idle}; the platform team's idle_gpus action is stop", "idle-gpus")
    return True
