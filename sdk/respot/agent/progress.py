"""Training progress: the session's reports merged, and the heartbeat that sends them."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from respot.agent.messenger import AgentMessenger
from respot.agent.protocol import ReportLine
from respot.wire.gpu import GpuSample
from respot.wire.messages import AgentProgress

MAX_METRICS = 50


@dataclass
class Progress:
    lock: threading.Lock = field(default_factory=threading.Lock)
    step: int | None = None
    total_steps: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    reports: int = 0
    first_at: datetime | None = None  # when the session made its first / last report()
    last_at: datetime | None = None
    gpus: Callable[[], list[GpuSample] | None] | None = None  # GpuTelemetry.take

    def update(self, report: ReportLine) -> bool:
        """Take a report; True if it is the first one."""
        at = datetime.fromtimestamp(report.at, UTC) if report.at is not None else None
        with self.lock:
            self.step = report.step if self.step is None else max(self.step, report.step)
            self.total_steps = report.total_steps or self.total_steps
            # The newest value of each metric: a metric reported every N steps (val_loss)
            # stays known between its reports.
            merged = {**self.metrics, **report.metrics}
            self.metrics = dict(list(merged.items())[:MAX_METRICS])
            self.reports += 1
            self.first_at = self.first_at or at
            self.last_at = at if self.last_at is None or at is None else max(self.last_at, at)
            return self.reports == 1

    def message(self) -> AgentProgress:
        with self.lock:
            step, total, metrics = self.step, self.total_steps, dict(self.metrics)
            first_at = self.first_at
        return AgentProgress(
            step=step,
            total_steps=total,
            metrics=metrics,
            gpus=self.gpus() if self.gpus else None,
            first_step_at=first_at,
        )


class Heartbeat:
    """Sends AgentProgress every `every_seconds`, and once soon after the first report."""

    def __init__(self, messenger: AgentMessenger, progress: Progress, every_seconds: float):
        self._messenger = messenger
        self._progress = progress
        self._every = every_seconds
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def nudge(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            self._wake.wait(self._every)
            self._wake.clear()
            if self._stop.is_set():
                return
            self._messenger.send(self._progress.message())
