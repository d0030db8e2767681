"""The picture of a job's life: progress over wall time, the instances it ran on, what happened.

`draw_timeline(record, path)` writes a PNG (matplotlib, Agg backend, nothing on screen):
- top: the step the job reached over time, one line per attempt (a drop between two lines is
  work an interruption lost), checkpoints as small diamonds, "resumed from step N" notes,
  the total number of steps, spot interruption notices as red lines, the deadline dashed;
- bottom: one bar per attempt, coloured by market (spot / on-demand), hatched while the
  instance boots and restores, labelled with type, zone and price.

`picture_data(record)` is the same content as plain data (for tests and `--json`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from respot.core.job import JobRecord

SPOT_COLOUR = "#2a9d8f"
ON_DEMAND_COLOUR = "#e76f51"
LINE_COLOUR = "#264653"
NOTICE_COLOUR = "#d62828"
DEADLINE_COLOUR = "#6c757d"
CHECKPOINT_COLOUR = "#1d3557"
GPU_COLOUR = "#9b5de5"
# The deadline is drawn when it is at most this many times the story so far; else an arrow.
DEADLINE_REACH = 2.0
STEP_KINDS = ("progress", "checkpoint", "preempted", "interrupted")


@dataclass
class AttemptSpan:
    """One attempt as drawn."""

    number: int
    market: str
    instance_type: str
    availability_zone: str
    price_per_hour: float | None
    start: float  # seconds since submission: requested
    training: float | None  # the agent started training (after boot and restore)
    end: float  # ended, or now
    end_reason: str | None
    restored_step: int | None
    points: list[tuple[float, int]] = field(default_factory=list)  # (seconds, step)


@dataclass
class Picture:
    """Everything the timeline picture shows, in seconds since the job was submitted."""

    job_id: str
    state: str
    created_at: datetime
    now: float
    attempts: list[AttemptSpan]
    checkpoints: list[tuple[float, int]]
    notices: list[float]
    fallbacks: list[tuple[float, str]]
    deadline: float | None
    total_steps: int | None
    final_step: int | None
    interruptions: int
    paid_usd: float
    on_demand_usd: float | None
    # Mean GPU utilization (%) on the progress history (no GPU: empty, nothing drawn).
    gpu_util: list[tuple[float, float]] = field(default_factory=list)


def _seconds(at: datetime | None, t0: datetime) -> float | None:
    return None if at is None else (at - t0).total_seconds()


def picture_data(record: JobRecord, now: datetime | None = None) -> Picture:
    """What the picture of `record` shows."""
    from respot.core.cost import job_cost

    now = now or datetime.now(UTC)
    t0 = record.created_at
    end_of_story = record.finished_at or now
    t_now = (end_of_story - t0).total_seconds()
    spans: dict[int, AttemptSpan] = {}
    for att in record.attempts:
        start = _seconds(att.requested_at, t0) or 0.0
        end = _seconds(att.ended_at, t0)
        spans[att.number] = AttemptSpan(
            number=att.number,
            market=att.placement.market.value,
            instance_type=att.placement.instance_type,
            availability_zone=att.placement.availability_zone,
            price_per_hour=att.price_per_hour,
            start=start,
            training=_seconds(att.started_at, t0),
            end=end if end is not None else t_now,
            end_reason=att.end.value if att.end else None,
            restored_step=att.restored_step,
        )
        if att.started_at is not None:
            spans[att.number].points.append(
                ((att.started_at - t0).total_seconds(), att.restored_step or 0)
            )
    checkpoints: list[tuple[float, int]] = []
    fallbacks: list[tuple[float, str]] = []
    gpu_util: list[tuple[float, float]] = []
    for entry in record.timeline:
        at = (entry.at - t0).total_seconds()
        util = entry.data.get("gpu_util_pct")
        if entry.kind == "progress" and isinstance(util, int | float):
            gpu_util.append((at, float(util)))
        attempt = entry.data.get("attempt")
        step = entry.data.get("step")
        if entry.kind == "checkpoint" and isinstance(step, int):
            checkpoints.append((at, step))
        if entry.kind == "fallback":
            fallbacks.append((at, entry.text))
        if entry.kind in STEP_KINDS and isinstance(step, int) and attempt in spans:
            span = spans[attempt]
            if span.training is not None and at >= span.training:
                span.points.append((at, step))
    last = record.current
    if record.state.value == "COMPLETED" and last is not None and last.number in spans:
        final = record.progress.step or last.last_step
        if final is not None and record.finished_at is not None:
            spans[last.number].points.append(((record.finished_at - t0).total_seconds(), final))
    elif last is not None and last.number in spans and record.progress.at is not None:
        step = record.progress.step
        at = (record.progress.at - t0).total_seconds()
        if step is not None and (last.started_at is not None) and last.end is None:
            spans[last.number].points.append((at, step))
    for span in spans.values():
        # Steps only grow within an attempt; keep the points in time order, never going back.
        span.points.sort()
        best = -1
        kept = []
        for t, s in span.points:
            if s >= best:
                kept.append((t, s))
                best = s
        span.points = kept
    notices = sorted(
        (a.notice_at - t0).total_seconds() for a in record.attempts if a.notice_at is not None
    )
    cost = job_cost(record, now)
    return Picture(
        job_id=record.job_id,
        state=record.state.value,
        created_at=t0,
        now=t_now,
        attempts=[spans[n] for n in sorted(spans)],
        checkpoints=sorted(checkpoints),
        notices=notices,
        fallbacks=fallbacks,
        deadline=_seconds(record.spec.deadline, t0),
        total_steps=record.progress.total_steps,
        final_step=record.progress.step,
        interruptions=record.interruptions,
        paid_usd=cost.paid_usd,
        on_demand_usd=cost.on_demand_usd,
        gpu_util=sorted(gpu_util),
    )


def _unit(span_seconds: float) -> tuple[float, str]:
    if span_seconds <= 180:
        return 1.0, "seconds"
    if span_seconds <= 3 * 3600:
        return 60.0, "minutes"
    return 3600.0, "hours"


def _duration(seconds: float) -> str:
    from respot.client.progress import format_duration

    return format_duration(seconds)


def draw_timeline(record: JobRecord, path: Path | str, now: datetime | None = None) -> Path:
    """Draw the picture of `record` into a PNG at `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    pic = picture_data(record, now)
    span_end = max([pic.now, 1.0, *(a.end for a in pic.attempts)])
    deadline_on_chart = pic.deadline is not None and pic.deadline <= span_end * DEADLINE_REACH
    x_max = max(span_end, pic.deadline if deadline_on_chart and pic.deadline else 0.0) * 1.04
    scale, unit = _unit(x_max)

    def x(seconds: float) -> float:
        return seconds / scale

    plt.rcParams.update({"font.size": 10, "axes.titlesize": 12})
    fig, (ax, lanes) = plt.subplots(
        2,
        1,
        figsize=(12, 6.2),
        sharex=True,
        gridspec_kw={"height_ratios": [4.2, 1.0 + 0.28 * max(len(pic.attempts), 1)]},
    )
    fig.subplots_adjust(left=0.07, right=0.98, top=0.87, bottom=0.16, hspace=0.08)

    # ---- top: progress -----------------------------------------------------------------------
    top = max(
        [pic.total_steps or 0, pic.final_step or 0]
        + [s for a in pic.attempts for _, s in a.points]
        + [1]
    )
    for att in pic.attempts:
        colour = SPOT_COLOUR if att.market == "spot" else ON_DEMAND_COLOUR
        ax.axvspan(x(att.start), x(att.end), color=colour, alpha=0.08, lw=0)
        if att.points:
            ts = [x(t) for t, _ in att.points]
            ss = [s for _, s in att.points]
            ax.plot(ts, ss, color=LINE_COLOUR, lw=2.2, solid_capstyle="round", zorder=3)
        if att.restored_step is not None and att.training is not None:
            ax.annotate(
                f"resumed from step {att.restored_step:,}",
                xy=(x(att.training), att.restored_step),
                xytext=(8, -22),
                textcoords="offset points",
                fontsize=9,
                color="#2b2d42",
                arrowprops={"arrowstyle": "-", "color": "#8d99ae", "lw": 0.8},
                zorder=5,
            )
    if pic.checkpoints:
        ax.scatter(
            [x(t) for t, _ in pic.checkpoints],
            [s for _, s in pic.checkpoints],
            marker="D",
            s=18,
            color=CHECKPOINT_COLOUR,
            zorder=4,
            label="checkpoint in S3",
        )
    if pic.total_steps:
        ax.axhline(pic.total_steps, color="#adb5bd", lw=1, ls=":", zorder=1)
        ax.text(
            x(x_max * 0.002),
            pic.total_steps,
            f" {pic.total_steps:,} steps",
            va="bottom",
            ha="left",
            fontsize=9,
            color="#6c757d",
        )
    for axis in (ax, lanes):
        for t in pic.notices:
            axis.axvline(x(t), color=NOTICE_COLOUR, lw=1.4, ls=(0, (4, 2)), zorder=2)
    for i, t in enumerate(pic.notices):
        ax.text(
            x(t),
            top * (1.06 if i % 2 == 0 else 1.0),
            " spot notice",
            color=NOTICE_COLOUR,
            fontsize=9,
            va="bottom",
            ha="left",
        )
    for t, _ in pic.fallbacks:
        ax.axvline(x(t), color=ON_DEMAND_COLOUR, lw=1.2, ls="-.", zorder=2)
        ax.text(x(t), top * 0.5, " on-demand fallback", color=ON_DEMAND_COLOUR, fontsize=9)
    if pic.deadline is not None:
        if deadline_on_chart:
            for axis in (ax, lanes):
                axis.axvline(x(pic.deadline), color=DEADLINE_COLOUR, lw=1.4, ls="--")
            ax.text(
                x(pic.deadline),
                top * 0.04,
                "deadline ",
                color=DEADLINE_COLOUR,
                ha="right",
                fontsize=9,
            )
        else:
            ahead = pic.deadline - span_end
            ax.annotate(
                f"deadline {_duration(ahead)} later →",
                xy=(1.0, 0.02),
                xycoords="axes fraction",
                ha="right",
                va="bottom",
                fontsize=9,
                color=DEADLINE_COLOUR,
            )
    if pic.gpu_util:
        gpu_ax = ax.twinx()
        gpu_ax.plot(
            [x(t) for t, _ in pic.gpu_util], [u for _, u in pic.gpu_util],
            color=GPU_COLOUR, lw=1.0, alpha=0.8, marker=".", ms=3, zorder=2, label="GPU util",
        )  # fmt: skip
        gpu_ax.set_ylim(0, 116)
        gpu_ax.set_ylabel("mean GPU utilization %", color=GPU_COLOUR, fontsize=8)
        gpu_ax.tick_params(axis="y", colors=GPU_COLOUR, labelsize=7)
        gpu_ax.spines[["top"]].set_visible(False)
    ax.set_ylim(0, top * 1.16)
    ax.set_ylabel("step")
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{int(v):,}"))
    ax.grid(axis="y", color="#e9ecef", lw=0.8)
    ax.spines[["top", "right"]].set_visible(False)

    # ---- bottom: one lane per attempt --------------------------------------------------------
    n = len(pic.attempts)
    for row, att in enumerate(pic.attempts):
        y = n - 1 - row
        colour = SPOT_COLOUR if att.market == "spot" else ON_DEMAND_COLOUR
        boot_end = att.training if att.training is not None else att.end
        lanes.barh(
            y, x(boot_end - att.start), left=x(att.start), height=0.6, color=colour, alpha=0.35,
            hatch="///", edgecolor="white", lw=0,
        )  # fmt: skip
        if att.training is not None:
            lanes.barh(y, x(att.end - att.training), left=x(att.training), height=0.6, color=colour)
        price = f" \\${att.price_per_hour:.3f}/h" if att.price_per_hour is not None else ""
        end = f" · {att.end_reason}" if att.end_reason else " · running"
        lanes.text(
            x(att.start) + x(x_max) * 0.004,
            y + 0.42,
            f"#{att.number} {att.market} {att.instance_type} {att.availability_zone}{price}{end}",
            fontsize=8.5,
            va="bottom",
            color="#343a40",
            zorder=6,
            bbox={"facecolor": "white", "edgecolor": "none", "pad": 1.0, "alpha": 0.85},
        )
    lanes.set_yticks([])
    lanes.set_ylim(-0.5, max(n, 1) - 0.5 + 0.75)
    lanes.spines[["top", "right", "left"]].set_visible(False)
    lanes.set_xlim(0, x(x_max))
    lanes.set_xlabel(f"{unit} since submission")

    # ---- title and legend --------------------------------------------------------------------
    took = _duration(pic.now)
    # "\$": matplotlib reads a pair of dollar signs as mathematics.
    cost = f"paid \\${pic.paid_usd:.4f}"
    if pic.on_demand_usd:
        saved = 100 * (1 - pic.paid_usd / pic.on_demand_usd)
        cost += f" vs \\${pic.on_demand_usd:.4f} on-demand ({saved:.0f}% saved)"
    noun = "interruption" if pic.interruptions == 1 else "interruptions"
    fig.suptitle(pic.job_id, x=0.07, ha="left", fontsize=13, fontweight="bold")
    fig.text(
        0.07,
        0.915,
        f"{pic.state} after {took} · {pic.interruptions} {noun} · {len(pic.attempts)} "
        f"instance(s) · {cost}",
        fontsize=10,
        color="#495057",
    )
    handles = [
        Line2D([], [], color=LINE_COLOUR, lw=2.2, label="step reached"),
        Line2D([], [], color=CHECKPOINT_COLOUR, marker="D", lw=0, ms=5, label="checkpoint"),
        Patch(color=SPOT_COLOUR, label="spot instance"),
        Patch(color=ON_DEMAND_COLOUR, label="on-demand instance"),
        Patch(
            facecolor=SPOT_COLOUR,
            alpha=0.35,
            hatch="///",
            edgecolor="white",
            label="booting, restoring",
        ),
        Line2D([], [], color=NOTICE_COLOUR, ls=(0, (4, 2)), label="interruption notice"),
    ]
    if pic.deadline is not None and deadline_on_chart:
        handles.append(Line2D([], [], color=DEADLINE_COLOUR, ls="--", label="deadline"))
    fig.legend(
        handles=handles,
        loc="lower center",
        bbox_to_anchor=(0.5, 0.005),
        ncol=len(handles),
        fontsize=8.5,
        frameon=False,
        handlelength=1.8,
        columnspacing=1.4,
    )
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=150)
    plt.close(fig)
    return out


def picture_json(pic: Picture) -> dict[str, Any]:
    """The picture's data as JSON-ready values."""
    return {
        "job_id": pic.job_id,
        "state": pic.state,
        "created_at": pic.created_at.isoformat(),
        "seconds": pic.now,
        "interruptions": pic.interruptions,
        "deadline_seconds": pic.deadline,
        "total_steps": pic.total_steps,
        "paid_usd": pic.paid_usd,
        "on_demand_usd": pic.on_demand_usd,
        "notices_seconds": pic.notices,
        "checkpoints": [{"seconds": t, "step": s} for t, s in pic.checkpoints],
        "gpu_util": [{"seconds": t, "pct": u} for t, u in pic.gpu_util],
        "attempts": [
            {
                "number": a.number,
                "market": a.market,
                "instance_type": a.instance_type,
                "availability_zone": a.availability_zone,
                "price_per_hour": a.price_per_hour,
                "start_seconds": a.start,
                "training_seconds": a.training,
                "end_seconds": a.end,
                "end": a.end_reason,
                "restored_step": a.restored_step,
                "points": [{"seconds": t, "step": s} for t, s in a.points],
            }
            for a in pic.attempts
        ],
    }


__all__ = ["Picture", "draw_timeline", "picture_data", "picture_json"]
