"""Block Kit for a job's Slack thread: the status card (edited in place) and one reply per news.

Every message is built from `slack_sdk.models.blocks` objects and checked with `to_dict()`,
which enforces Slack's limits; every text is clipped to its limit first, with a note saying
what was cut, so that a 10,000-character log tail makes a shorter message, never a refused
one. Each message also carries a plain-text `text`: Slack shows it in notifications and to
screen readers, and it is what a client without Block Kit displays.

Which timeline entries get a reply is `REPLY_KINDS`; the others (requested, capacity,
waiting, checkpoint, rebalance, instance-gone) only refresh the card.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from slack_sdk.errors import SlackObjectFormationError
from slack_sdk.models.blocks import (
    Block,
    ContextBlock,
    HeaderBlock,
    MarkdownTextObject,
    PlainTextObject,
    SectionBlock,
)

from respot.core.cost import job_cost, on_demand_price
from respot.core.job import JobRecord, TimelineEntry
from respot.core.states import JobState
from respot.queue.words import wait_line
from respot.wire.gpu import summary as gpu_summary
from respot.workspace import names as workspace_names

log = logging.getLogger("respot.notify")

# Slack's limits (https://docs.slack.dev/reference/block-kit/blocks/) and the API's.
HEADER_CHARS = 150
SECTION_CHARS = 3000
FIELD_CHARS = 2000
FIELDS_PER_SECTION = 10
CONTEXT_ELEMENTS = 10
TEXT_CHARS = 3000  # the plain-text fallback; Slack refuses above 40,000 (msg_too_long)
LOG_LINES = 40  # of a failed job's log tail, at most

STATE_EMOJI = {
    JobState.HELD: ":double_vertical_bar:",
    JobState.QUEUED: ":hourglass_flowing_sand:",
    JobState.REQUESTED: ":mag:",
    JobState.STARTING: ":rocket:",
    JobState.RUNNING: ":large_green_circle:",
    JobState.INTERRUPTED: ":warning:",
    JobState.COMPLETED: ":white_check_mark:",
    JobState.FAILED: ":x:",
    JobState.CANCELLED: ":no_entry_sign:",
}


CARD_EVENT = "respot_job_card"  # Slack message metadata event types (apps can read them)
NEWS_EVENT = "respot_job_news"


@dataclass(frozen=True)
class SlackPost:
    """One message: Block Kit blocks, the plain-text fallback and Slack message metadata."""

    text: str
    blocks: list[Block]
    metadata: dict[str, Any] | None = None

    def payload(self) -> dict[str, Any]:
        """Arguments of chat.postMessage / chat.update; the blocks checked against the limits."""
        args: dict[str, Any] = {"text": self.text, "blocks": [b.to_dict() for b in self.blocks]}
        if self.metadata is not None:
            args["metadata"] = self.metadata
        return args


def _metadata(event_type: str, **payload: str | int) -> dict[str, Any]:
    return {"event_type": event_type, "event_payload": payload}


# ---- text helpers ----------------------------------------------------------------------------


def escape(text: str) -> str:
    """Escape the three characters Slack's mrkdwn treats as control characters."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def clip(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, ending with a note of how much was cut."""
    if len(text) <= limit:
        return text
    note = f" … (cut: {len(text):,} characters in all)"
    if limit <= len(note):
        return text[:limit]
    return text[: limit - len(note)] + note


def code_tail(lines: list[str], limit: int = SECTION_CHARS) -> str:
    """The last lines of a log that fit, in a ``` block of at most `limit` characters.

    A note says how many earlier lines were left out; a last line too long on its own keeps
    its end (where the error usually is), and says so.
    """
    fence = "```"
    clean = [escape(line.replace(fence, "'''")) for line in lines]
    room = limit - 2 * len(fence) - 2 - 120  # fences, their newlines, the notes
    kept: list[str] = []
    used = 0
    cut_chars = 0
    for original in reversed(clean[-LOG_LINES:]):
        line = original
        if not kept and len(line) + 1 > room:
            cut_chars = len(line) - (room - 2)
            line = "…" + line[-(room - 2) :]
        if used + len(line) + 1 > room:
            break
        kept.insert(0, line)
        used += len(line) + 1
    notes = []
    if len(clean) > len(kept):
        notes.append(f"… {len(clean) - len(kept)} earlier line(s) not shown")
    if cut_chars:
        notes.append(f"… the last line's first {cut_chars:,} characters not shown")
    body = "\n".join([*notes, *kept])
    return f"{fence}\n{body}\n{fence}"


def usd(amount: float) -> str:
    """Dollars with as many decimals as a small amount needs."""
    if amount >= 1:
        return f"${amount:,.2f}"
    if amount >= 0.01:
        return f"${amount:.3f}"
    return f"${amount:.4f}"


def duration(seconds: float) -> str:
    """A duration for people: 12.3s, 4m 05s, 2h 03m, 1d 4h."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60}m {whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h {whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d {whole % 86400 // 3600}h"


def eta_seconds(data: dict[str, Any], at: datetime) -> float | None:
    """Seconds to the last step at the rate since the previous progress note, or None."""
    step, total = data.get("step"), data.get("total_steps")
    since_step, since_at = data.get("since_step"), data.get("since_at")
    if step is None or not total or since_step is None or not since_at:
        return None
    try:
        elapsed = (at - datetime.fromisoformat(str(since_at))).total_seconds()
    except ValueError:
        return None
    done = int(step) - int(since_step)
    if elapsed <= 0 or done <= 0:
        return None
    return max(int(total) - int(step), 0) * elapsed / done


def _progress_text(step: int | None, total: int | None) -> str:
    if step is None:
        return "not started"
    if total:
        return f"step {step:,} of {total:,} ({100.0 * step / total:.0f}%)"
    return f"step {step:,}"


def _metrics(metrics: dict[str, Any], limit: int = 8) -> str:
    items = []
    for key, value in list(metrics.items())[:limit]:
        shown = f"{value:.4g}" if isinstance(value, float) else str(value)
        items.append(f"{escape(str(key))}={escape(shown)}")
    return ", ".join(items)


# ---- blocks ----------------------------------------------------------------------------------


def _header(text: str) -> HeaderBlock:
    return HeaderBlock(text=PlainTextObject(text=clip(text, HEADER_CHARS), emoji=True))


def _section(mrkdwn: str) -> SectionBlock:
    return SectionBlock(text=MarkdownTextObject(text=clip(mrkdwn, SECTION_CHARS)))


def _fields(pairs: list[tuple[str, str]]) -> SectionBlock:
    return SectionBlock(
        fields=[
            MarkdownTextObject(text=clip(f"*{name}*\n{value}", FIELD_CHARS))
            for name, value in pairs[:FIELDS_PER_SECTION]
        ]
    )


def _context(*parts: str) -> ContextBlock:
    return ContextBlock(
        elements=[
            MarkdownTextObject(text=clip(p, SECTION_CHARS)) for p in parts[:CONTEXT_ELEMENTS] if p
        ]
    )


def _post(text: str, blocks: list[Block]) -> SlackPost:
    """A post whose blocks passed Slack's checks; plain text alone if they somehow did not."""
    text = clip(text, TEXT_CHARS)
    try:
        for block in blocks:
            block.to_dict()
    except SlackObjectFormationError:
        log.exception("a Slack message broke a Block Kit limit; sending its plain text instead")
        return SlackPost(text, [_section(escape(text))])
    return SlackPost(text, blocks)


# ---- the status card -------------------------------------------------------------------------


def _owner(record: JobRecord) -> str:
    return record.submission.submitted_by or "unknown"


def _instance(record: JobRecord) -> str:
    att = record.current
    if att is None:
        return "not placed yet"
    p = att.placement
    where = f"{p.market.value} {p.instance_type} in {p.availability_zone}"
    if att.instance_id:
        where += f" (`{att.instance_id}`)"
    return where


def card_eta_seconds(record: JobRecord, now: datetime) -> float | None:
    """Seconds left at the rate between the last two progress points of the current attempt.

    The points are the timeline's progress history of this attempt (its first point is when
    training really began, after the session's start-up). None without two points, a total
    or a rate.
    """
    att, total = record.current, record.progress.total_steps
    if att is None or not total:
        return None
    points = [
        (e.at, int(e.data["step"]))
        for e in record.timeline
        if e.kind == "progress" and e.data.get("attempt") == att.number and e.data.get("step")
    ]
    if len(points) < 2:
        return None
    (t0, s0), (t1, s1) = points[-2:]
    seconds = (t1 - t0).total_seconds()
    if seconds <= 0 or s1 <= s0:
        return None
    left = max(total - s1, 0) * seconds / (s1 - s0) - (now - t1).total_seconds()
    return max(left, 0.0)


def _cost_line(record: JobRecord, now: datetime, prices: dict[str, float] | None) -> str:
    cost = job_cost(record, record.finished_at or now, prices)
    line = usd(cost.paid_usd)
    if cost.on_demand_usd is not None:
        line += f" (on-demand {usd(cost.on_demand_usd)}"
        if cost.savings_pct is not None and cost.on_demand_usd > 0:
            line += f", {cost.savings_pct:.0f}% saved"
        line += ")"
    return line


def status_card(
    record: JobRecord, now: datetime, *, prices: dict[str, float] | None = None
) -> SlackPost:
    """The parent message of the job's thread, as it should read at `now`."""
    spec = record.spec
    state = record.state
    progress = _progress_text(record.progress.step, record.progress.total_steps)
    eta = card_eta_seconds(record, now) if state is JobState.RUNNING else None
    if eta is not None:
        progress += f", ETA {duration(eta)}"
    terminal = state.is_terminal()
    pairs = [
        ("Owner", escape(_owner(record))),
        ("State", state.value),
        ("Instance", _instance(record)),
        ("Progress", progress),
        ("Cost" if terminal else "Cost so far", _cost_line(record, now, prices)),
        ("Interruptions", str(record.interruptions)),
    ]
    if terminal and record.finished_at is not None:
        pairs.append(
            ("Wall time", duration((record.finished_at - record.created_at).total_seconds()))
        )
    if record.checkpoint is not None:
        pairs.append(("Checkpoint", f"step {record.checkpoint.step:,}"))
    if record.progress.gpus and state is JobState.RUNNING:
        pairs.append(("GPU", escape(gpu_summary(record.progress.gpus))))
    queue_line = None
    if state is JobState.HELD:
        wait = record.queue_wait
        queue_line = (
            wait_line(wait.position, wait.reason, wait.estimate)
            if wait is not None
            else wait_line(None, None, None)
        )
        pairs.append(("In the team's queue", escape(queue_line)))
    blocks: list[Block] = [
        _header(f"{STATE_EMOJI.get(state, '')} {spec.name}: {state.value}".strip()),
        _fields(pairs),
    ]
    if record.reason and state in (JobState.FAILED, JobState.CANCELLED):
        blocks.append(_section(f"*Reason:* {escape(record.reason)}"))
    what = spec.entry_point or " ".join(spec.command or [])[:200] or spec.image or ""
    deadline = f"deadline {spec.deadline.isoformat()}" if spec.deadline else "no deadline"
    blocks.append(
        _context(
            f"job `{record.job_id}`",
            f"`{escape(what)}`" if what else "",
            deadline,
            f"updated {now:%Y-%m-%d %H:%M:%S} UTC",
        )
    )
    text = (
        f"{spec.name} ({record.job_id}) is {state.value}: {_instance(record).replace('`', '')}; "
        f"{progress}; {'cost' if terminal else 'cost so far'} {_cost_line(record, now, prices)}"
    )
    if queue_line is not None:
        text += f"; in the team's queue {queue_line}"
    card = _post(text, blocks)
    meta = _metadata(CARD_EVENT, job_id=record.job_id, state=state.value, version=record.version)
    return replace(card, metadata=meta)


# ---- replies ---------------------------------------------------------------------------------


def _reply(main: str, *details: str, code: str | None = None, text: str | None = None) -> SlackPost:
    blocks: list[Block] = [_section(main)]
    if code:
        blocks.append(_section(code))
    if any(details):
        blocks.append(_context(*details))
    plain = text if text is not None else main.replace("*", "").replace("`", "")
    return _post(plain, blocks)


def _at(entry: TimelineEntry) -> str:
    return f"{entry.at:%H:%M:%S} UTC"


def _queued(entry: TimelineEntry, record: JobRecord, prices: dict[str, float] | None) -> SlackPost:
    spec = record.spec
    what = escape(spec.entry_point or " ".join(spec.command or [])[:200] or spec.image or "")
    deadline = f"deadline {spec.deadline.isoformat()}" if spec.deadline else "no deadline"
    types = ", ".join(spec.instance_types or []) or "the deployment's instance types"
    return _reply(
        f":inbox_tray: *Queued* by {escape(_owner(record))}: `{what}` on {types}",
        deadline,
        "on-demand only (market: on-demand)"
        if spec.market == "on-demand"
        else f"spot first, on-demand fallback {'on' if spec.on_demand_fallback else 'off'}",
        _at(entry),
    )


def _placed(entry: TimelineEntry, record: JobRecord, prices: dict[str, float] | None) -> SlackPost:
    d = entry.data
    price = d.get("price_per_hour")
    listed = on_demand_price(str(d.get("instance_type")), prices)
    cost = f"${price:.4f}/h" if isinstance(price, int | float) else "price unknown"
    if listed is not None and d.get("market") == "spot":
        cost += f" (on-demand ${listed:.4f}/h)"
    return _reply(
        f":round_pushpin: *Placed* on {d.get('market')} `{d.get('instance_type')}` "
        f"in {d.get('availability_zone')} at {cost}",
        f"instance `{d.get('instance_id')}`",
        f"attempt {d.get('attempt')}",
        _at(entry),
    )


def _started(entry: TimelineEntry, record: JobRecord, prices: dict[str, float] | None) -> SlackPost:
    d = entry.data
    return _reply(
        f":arrow_forward: *Training started* on `{d.get('instance_id')}` "
        "(no checkpoint to restore)",
        f"attempt {d.get('attempt')}",
        _at(entry),
    )


def _progress(
    entry: TimelineEntry, record: JobRecord, prices: dict[str, float] | None
) -> SlackPost:
    d = entry.data
    eta = eta_seconds(d, entry.at)
    metrics = _metrics(d.get("metrics") or {})
    main = f":chart_with_upwards_trend: {_progress_text(d.get('step'), d.get('total_steps'))}"
    main += f", ETA {duration(eta)}" if eta is not None else ", ETA unknown"
    return _reply(main, metrics, _at(entry))


def _interrupted(
    entry: TimelineEntry, record: JobRecord, prices: dict[str, float] | None
) -> SlackPost:
    d = entry.data
    step, saved = d.get("step"), d.get("checkpoint_step")
    number = d.get("interruptions")
    # The step the control plane last heard of can lag the newest checkpoint (heartbeats are
    # less frequent than checkpoints): say the larger.
    known = max(int(step or 0), int(saved or 0))
    at_step = f"at step {known}" if step is not None or saved is not None else "before step 1"
    checkpoint = f"checkpoint step {saved}" if saved is not None else "no checkpoint yet"
    iid = d.get("instance_id")
    if d.get("noticed"):
        main = (
            f":warning: *Spot interruption notice* for `{iid}` {at_step} "
            f"(interruption {number}): checkpointing now; a replacement is requested"
        )
        detail = f"newest checkpoint before the notice: {checkpoint}"
    else:
        lost = max(known - int(saved or 0), 0)
        main = (
            f":warning: *Instance lost* without notice: `{iid}` {at_step} "
            f"(interruption {number}); resuming from {checkpoint}"
        )
        detail = f"{lost} step(s) to redo"
    if _is_workspace(record):  # docs/notebooks.md: what a researcher in JupyterLab must know
        detail += (
            "\nworkspace: *variables are gone; files are kept* (as last synced); "
            "the page works again after a reload once the replacement is up"
        )
    return _reply(main, detail, _at(entry))


def _idle_stop(record: JobRecord) -> str | None:
    """A workspace that stopped itself as idle (its supervisor reported `IDLE_METRIC` as it
    stopped): what its thread says instead of "completed"; None otherwise."""
    minutes = record.progress.metrics.get(workspace_names.IDLE_METRIC)
    if not _is_workspace(record) or not isinstance(minutes, int | float):
        return None
    name = record.submission.spec.tags[workspace_names.TAG]
    return (
        f":zzz: *Workspace stopped after {minutes:g} minutes idle*; files are kept; "
        f"`respot notebook start {escape(name)}` brings it back"
    )


def _is_workspace(record: JobRecord) -> bool:
    spec = record.submission.spec
    return spec.command == workspace_names.COMMAND and workspace_names.TAG in spec.tags


def _preempted(
    entry: TimelineEntry, record: JobRecord, prices: dict[str, float] | None
) -> SlackPost:
    d = entry.data
    lost = d.get("lost_steps")
    if d.get("checkpoint_step") is None:
        saved = ":warning: *No checkpoint* on the notice"
    else:
        saved = f":floppy_disk: *Checkpoint saved* at step {d.get('checkpoint_step')} on the notice"
    return _reply(
        f"{saved}; stopped at step {d.get('step')}: {lost} step(s) of work lost",
        f"notice: {escape(str(d.get('notice')))}",
        _at(entry),
    )


def _resumed(entry: TimelineEntry, record: JobRecord, prices: dict[str, float] | None) -> SlackPost:
    d = entry.data
    att = record.attempt(int(d.get("attempt") or 0))
    where = ""
    if att is not None:
        p = att.placement
        where = f" ({p.market.value} {p.instance_type} in {p.availability_zone})"
    downtime = d.get("downtime_seconds")
    restore = d.get("restore_seconds")
    return _reply(
        f":arrows_counterclockwise: *Resumed* on `{d.get('instance_id')}`{where} "
        f"from step {d.get('restored_step')}",
        f"downtime {duration(downtime)}" if isinstance(downtime, int | float) else "",
        f"restore {duration(restore)}" if isinstance(restore, int | float) else "",
        f"attempt {d.get('attempt')}",
        _at(entry),
    )


def _checkpoint_refused(
    entry: TimelineEntry, record: JobRecord, prices: dict[str, float] | None
) -> SlackPost:
    d = entry.data
    refused = [r for r in d.get("refused") or [] if isinstance(r, dict)]
    steps = ", ".join(str(r.get("step", "?")) for r in refused) or "?"
    used = d.get("restored_step")
    instead = (
        f"resumed from step {used} instead"
        if used is not None
        else "no older checkpoint was usable: started from the beginning"
    )
    why = "; ".join(f"step {r.get('step', '?')}: {r.get('reason', '')}" for r in refused[:3])
    return _reply(
        f":warning: *Checkpoint refused as corrupt*: step {escape(steps)}; {instead}",
        escape(why),
        f"attempt {d.get('attempt')}",
        _at(entry),
        text=entry.text,
    )


def _fallback(
    entry: TimelineEntry, record: JobRecord, prices: dict[str, float] | None
) -> SlackPost:
    reason = entry.data.get("reason") or entry.text
    return _reply(
        f":money_with_wings: *Falling back to on-demand*: {escape(str(reason))}", _at(entry)
    )


def _idle_gpus(
    entry: TimelineEntry, record: JobRecord, prices: dict[str, float] | None
) -> SlackPost:
    text = entry.text.removeprefix("GPUs idle: ")
    return _reply(f":zzz: *GPUs idle*: {escape(text)}", _at(entry))


def _stopping(
    entry: TimelineEntry, record: JobRecord, prices: dict[str, float] | None
) -> SlackPost:
    if entry.data.get("cause") in ("owner", "admin"):  # a cancel with checkpoint_first
        head = "Stopping: saving first"
    elif entry.data.get("cause") == "preempt":  # queued again once saved (core.lifecycle.stops)
        head = "Preempted by the team's queue: saving first"
    else:
        head = "Stopped by the platform team's rule"
    return _reply(f":octagonal_sign: *{head}*: {escape(entry.text)}", _at(entry))


def _requeued(
    entry: TimelineEntry, record: JobRecord, prices: dict[str, float] | None
) -> SlackPost:
    return _reply(
        f":arrows_counterclockwise: *Preempted, queued again*: {escape(entry.text)}", _at(entry)
    )


def _held(entry: TimelineEntry, record: JobRecord, prices: dict[str, float] | None) -> SlackPost:
    detail = entry.text.split(" (", 1)[0].removeprefix("waiting in the team's queue")
    detail = detail.removeprefix("; ")
    said = f" ({escape(detail)})" if detail else ""
    return _reply(
        f":double_vertical_bar: *Held in the team's queue*{said}: the card above shows its "
        "position, what it waits for and when it may start; `respot queue` lists the queue",
        _at(entry),
    )


def _spot_return(
    entry: TimelineEntry, record: JobRecord, prices: dict[str, float] | None
) -> SlackPost:
    reason = entry.data.get("reason") or entry.text
    return _reply(f":recycle: *Back to spot*: {escape(str(reason))}", _at(entry))


def _completed(
    entry: TimelineEntry, record: JobRecord, prices: dict[str, float] | None
) -> SlackPost:
    end = record.finished_at or entry.at
    cost = job_cost(record, end, prices)
    wall = duration((end - record.created_at).total_seconds())
    main = (
        f":white_check_mark: *Completed* at step {entry.data.get('step')} in {wall}: cost "
        + usd(cost.paid_usd)
    )
    if cost.on_demand_usd is not None:
        main += f"; on-demand would have cost {usd(cost.on_demand_usd)}"
        if cost.savings_pct is not None and cost.on_demand_usd > 0:
            main += f", *{cost.savings_pct:.0f}% saved*"
    idle = _idle_stop(record)
    if idle is not None:  # not "completed": the workspace stopped itself, as docs/notebooks.md
        main = f"{idle}\n{main.replace(':white_check_mark: *Completed*', 'Ran', 1)}"
    return _reply(
        main,
        f"{record.interruptions} interruption(s)",
        f"{cost.instance_hours:.3f} instance-hours",
        _at(entry),
    )


def _failed(entry: TimelineEntry, record: JobRecord, prices: dict[str, float] | None) -> SlackPost:
    reason = str(entry.data.get("reason") or entry.text)
    tail = [str(line) for line in entry.data.get("log_tail") or []]
    return _reply(
        f":x: *Failed*: {escape(reason)}",
        f"at step {entry.data.get('step')}",
        _at(entry),
        code=code_tail(tail) if tail else None,
        text=f"Failed: {reason}",
    )


def _cancelled(
    entry: TimelineEntry, record: JobRecord, prices: dict[str, float] | None
) -> SlackPost:
    reason = str(entry.data.get("reason") or entry.text)
    return _reply(f":no_entry_sign: *Cancelled*: {escape(reason)}", _at(entry))


def _no_checkpoint(
    entry: TimelineEntry, record: JobRecord, prices: dict[str, float] | None
) -> SlackPost:
    return _reply(f":warning: *{escape(entry.text)}*", _at(entry), text=entry.text)


_REPLIES: dict[str, Callable[[TimelineEntry, JobRecord, dict[str, float] | None], SlackPost]] = {
    "queued": _queued,
    "placed": _placed,
    "started": _started,
    "progress": _progress,
    "interrupted": _interrupted,
    "preempted": _preempted,
    "no-checkpoint": _no_checkpoint,
    "resumed": _resumed,
    "checkpoint-refused": _checkpoint_refused,
    "fallback": _fallback,
    "returned": _spot_return,
    "idle-gpus": _idle_gpus,
    "stopping": _stopping,
    "requeued": _requeued,
    "held": _held,
    "completed": _completed,
    "failed": _failed,
    "cancelled": _cancelled,
}
REPLY_KINDS = frozenset(_REPLIES)


def reply_for(
    entry: TimelineEntry, record: JobRecord, *, prices: dict[str, float] | None = None
) -> SlackPost | None:
    """The thread reply for one timeline entry, or None for kinds that only refresh the card."""
    build = _REPLIES.get(entry.kind)
    if build is None:
        return None
    meta = _metadata(NEWS_EVENT, job_id=record.job_id, kind=entry.kind, at=entry.at.isoformat())
    return replace(build(entry, record, prices), metadata=meta)
