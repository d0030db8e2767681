"""Live progress of a job while `JobHandle.wait` polls it: a bar on a terminal, lines elsewhere.

On a terminal: a rich progress bar (step of total, the latest metrics, the ETA) with the
job's story (placed, interrupted, resumed, fallback, checkpoints...) printed above it as it
happens. Anywhere else (CI logs, pipes): plain lines with no control characters, the story
as it happens and a progress line at every tenth of the way (or every `PLAIN_EVERY_SECONDS`
while the step moves).

The ETA is measured, not guessed: the rate of steps over the current attempt's last
`RATE_WINDOW_SECONDS`, so the time an interruption costs does not distort it.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from respot.client.status import JobStatus
    from respot.core.job import TimelineEntry

PLAIN_EVERY_SECONDS = 30.0
RATE_WINDOW_SECONDS = 120.0
MAX_METRICS_SHOWN = 3
QUIET_KINDS = frozenset({"progress"})  # shown by the bar itself


def format_duration(seconds: float) -> str:
    """`1h02m`, `3m05s`, `42s`."""
    whole = max(round(seconds), 0)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def format_metrics(metrics: dict[str, float], limit: int = MAX_METRICS_SHOWN) -> str:
    """`loss=0.312 acc=0.97` (the first few)."""
    return " ".join(f"{k}={v:.4g}" for k, v in list(metrics.items())[:limit])


class RateMeter:
    """Steps per second over a sliding window of one attempt (reset when the attempt changes)."""

    def __init__(self, window_seconds: float = RATE_WINDOW_SECONDS) -> None:
        self.window = window_seconds
        self._attempt: int | None = None
        self._samples: deque[tuple[float, int]] = deque()

    def add(self, attempt: int, step: int, at: float) -> None:
        """Record that `attempt` was at `step` at time `at` (seconds)."""
        if attempt != self._attempt:
            self._attempt = attempt
            self._samples.clear()
        if self._samples and self._samples[-1][1] == step:
            return
        self._samples.append((at, step))
        while len(self._samples) > 2 and at - self._samples[0][0] > self.window:
            self._samples.popleft()

    def rate(self) -> float | None:
        """Steps per second, or None before two samples."""
        if len(self._samples) < 2:
            return None
        (t0, s0), (t1, s1) = self._samples[0], self._samples[-1]
        if t1 <= t0 or s1 <= s0:
            return None
        return (s1 - s0) / (t1 - t0)

    def eta(self, step: int, total: int) -> float | None:
        """Seconds to `total` at the current rate."""
        rate = self.rate()
        if rate is None or step >= total:
            return None
        return (total - step) / rate


class ProgressDisplay:
    """Feed it `on_event` and `on_status` from `JobHandle.wait`; use it as a context manager."""

    def __init__(
        self,
        job_id: str,
        *,
        console: Console | None = None,
        live: bool | None = None,
        stream: IO[str] | None = None,
        clock: Any = time.monotonic,
    ) -> None:
        self.job_id = job_id
        self._stream = stream or sys.stdout
        self._console = console
        self._live = live
        self._clock = clock
        self._progress: Any = None
        self._task: Any = None
        self.rate = RateMeter()
        self._last_plain = -1e18
        self._last_decile = -1
        self._last_step: int | None = None

    # ---- life --------------------------------------------------------------------------------

    def __enter__(self) -> ProgressDisplay:
        if self._live is None:
            self._live = self._stream.isatty()
        if self._live:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TaskProgressColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            console = self._console or Console(file=self._stream, highlight=False, emoji=False)
            self._console = console
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TaskProgressColumn(),
                TextColumn("{task.fields[metrics]}"),
                TextColumn("[cyan]{task.fields[eta]}"),
                TimeElapsedColumn(),
                console=console,
                transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task(
                f"{self.job_id} SUBMITTED", total=None, metrics="", eta=""
            )
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    # ---- feeding -----------------------------------------------------------------------------

    def on_event(self, entry: TimelineEntry) -> None:
        """Print a timeline entry (except progress, which the bar shows)."""
        if entry.kind in QUIET_KINDS:
            return
        stamp = entry.at.astimezone().strftime("%H:%M:%S")
        if self._progress is not None and self._console is not None:
            style = "dim" if entry.kind == "checkpoint" else _STYLES.get(entry.kind, "")
            text = f"{stamp} {entry.kind:<12} {entry.text}"
            self._console.print(text, style=style, highlight=False, markup=False)
        else:
            self._write(f"{stamp} {entry.kind:<12} {entry.text}")

    def on_status(self, status: JobStatus) -> None:
        """Move the bar (or print a progress line) to the job's latest step and metrics."""
        record = status.record
        step, total = status.step, status.total_steps
        metrics = dict(record.progress.metrics) if record is not None else {}
        # Rate samples: reports of the current attempt only, at the time the agent sent them,
        # so neither a changeover nor the polling interval distorts the rate.
        current = record.current if record is not None else None
        reported = record.progress.at if record is not None else None
        if (
            step is not None
            and current is not None
            and current.started_at is not None
            and reported is not None
            and reported >= current.started_at
        ):
            self.rate.add(current.number, step, reported.timestamp())
        eta = None
        if step is not None and total and status.state == "RUNNING":
            eta = self.rate.eta(step, total)
        if self._progress is not None:
            self._progress.update(
                self._task,
                description=f"{self.job_id} {status.state}",
                total=total,
                completed=step or 0,
                metrics=format_metrics(metrics),
                eta=f"ETA {format_duration(eta)}" if eta is not None else "",
            )
            return
        self._plain_progress(status.state, step, total, metrics, eta)

    def _plain_progress(
        self,
        state: str,
        step: int | None,
        total: int | None,
        metrics: dict[str, float],
        eta: float | None,
    ) -> None:
        if step is None or step == self._last_step:
            return
        now = self._clock()
        decile = int(10 * step / total) if total else -1
        if decile <= self._last_decile and now - self._last_plain < PLAIN_EVERY_SECONDS:
            return
        self._last_step, self._last_plain = step, now
        self._last_decile = max(self._last_decile, decile)
        of = f"/{total} ({100 * step / total:.0f}%)" if total else ""
        parts = [f"{time.strftime('%H:%M:%S')} {'progress':<12} step {step}{of}"]
        if metrics:
            parts.append(format_metrics(metrics))
        if eta is not None:
            parts.append(f"ETA {format_duration(eta)}")
        self._write(" ".join(parts) + f" [{state}]")

    def _write(self, text: str) -> None:
        self._stream.write(text + "\n")
        self._stream.flush()


_STYLES = {
    "interrupted": "bold red",
    "preempted": "red",
    "fallback": "bold yellow",
    "waiting": "yellow",
    "resumed": "green",
    "started": "green",
    "placed": "cyan",
    "completed": "bold green",
    "failed": "bold red",
    "cancelled": "bold yellow",
}
