"""TensorBoard event files of the scalars the session reports, synced to the job's S3 prefix.

Every `report(step, loss=..., ...)` that reaches the agent becomes one scalar event per
metric (`Summary.Value.simple_value`, what `torch.utils.tensorboard` writes too), through
the `tensorboard` package's own `EventFileWriter` (no torch, no TensorFlow). Each attempt
writes its own file, `events.out.tfevents.<time>.<host>.<pid>.<n>.attempt-NNNN`, into one
directory that `sync` uploads to `jobs/<job>/tensorboard/`; TensorBoard reads the files of a
directory in name order (= time order) as one run. Each file begins with a `SessionLog.START`
event at the step the attempt resumed from, on which TensorBoard discards the earlier
attempt's points at and beyond that step: the work an interruption lost is not drawn twice.

Without the `tensorboard` package the agent writes nothing and says so once.
"""

from __future__ import annotations

import logging
import math
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from respot.storage import layout

logger = logging.getLogger(__name__)

EVENT_FILE_PREFIX = "events.out.tfevents."


class ScalarLog:
    """One attempt's event file; `add` from the agent's loop, `sync` from any thread.

    `start()` opens the writer in a background thread (importing tensorboard takes about a
    second, which the agent's loop must not wait for); reports that arrive before it is open
    are kept and written as soon as it is.
    """

    MAX_PENDING = 10_000

    def __init__(self, directory: Path, *, attempt: int, resume_step: int | None = None) -> None:
        self.directory = directory
        self.attempt = attempt
        self.resume_step = resume_step
        self._lock = threading.Lock()
        self._writer: Any = None
        self._unavailable = False
        self._closed = False
        self._pending: list[tuple[int, dict[str, float], float]] = []
        self._opener: threading.Thread | None = None
        self.points = 0

    def start(self) -> ScalarLog:
        """Open the event file in the background."""
        self._opener = threading.Thread(target=self._open, name="tensorboard-open", daemon=True)
        self._opener.start()
        return self

    def add(self, step: int, metrics: dict[str, float], wall_time: float) -> None:
        """Write one event per finite metric at `step` (or keep it until open); never raises."""
        try:
            with self._lock:
                if self._closed or self._unavailable:
                    return
                if self._writer is None:
                    if len(self._pending) < self.MAX_PENDING:
                        self._pending.append((step, dict(metrics), wall_time))
                    return
                self._write(step, metrics, wall_time)
        except Exception:
            logger.warning("writing TensorBoard scalars failed", exc_info=True)

    def _write(self, step: int, metrics: dict[str, float], wall_time: float) -> None:
        from tensorboard.compat.proto import event_pb2, summary_pb2

        values = [
            summary_pb2.Summary.Value(tag=str(tag), simple_value=float(value))
            for tag, value in metrics.items()
            if isinstance(value, int | float) and math.isfinite(value)
        ]
        if values:
            event = event_pb2.Event(
                wall_time=wall_time, step=int(step), summary=summary_pb2.Summary(value=values)
            )
            self._writer.add_event(event)
            self.points += len(values)

    def _open(self) -> None:
        try:
            from tensorboard.compat.proto import event_pb2, summary_pb2  # noqa: F401 - warm up
            from tensorboard.summary.writer.event_file_writer import EventFileWriter
        except ImportError:
            with self._lock:
                self._unavailable = True
                self._pending.clear()
            logger.warning(
                "the tensorboard package is not installed: no TensorBoard event files "
                "(install respot[tensorboard] on the instance image)"
            )
            return
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            writer = EventFileWriter(
                str(self.directory), flush_secs=5, filename_suffix=f".attempt-{self.attempt:04d}"
            )
            # A restart marker: TensorBoard drops earlier points at or after this step.
            writer.add_event(
                event_pb2.Event(
                    wall_time=time.time(),
                    step=(self.resume_step or 0) + 1,
                    session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START),
                )
            )
            with self._lock:
                self._writer = writer
                pending, self._pending = self._pending, []
                for step, metrics, wall_time in pending:
                    self._write(step, metrics, wall_time)
        except Exception:
            with self._lock:
                self._unavailable = True
            logger.warning("opening the TensorBoard event file failed", exc_info=True)

    def wait_open(self, timeout: float) -> None:
        """Wait for the background open (before the last sync)."""
        if self._opener is not None:
            self._opener.join(timeout)

    def sync(self, s3: Any, bucket: str, job_id: str, *, final: bool = False) -> int:
        """Upload this attempt's event file as written so far (`final`: close it first).

        Returns the number of files uploaded; never raises. The file is copied under the lock
        (it is small) and uploaded outside it, so reports are never held up by S3.
        """
        if final:
            self.wait_open(10.0)
        try:
            with self._lock:
                if self._writer is None:
                    return 0
                if final and not self._closed:
                    self._writer.close()
                    self._closed = True
                elif not self._closed:
                    self._writer.flush()
                files = sorted(
                    p
                    for p in self.directory.glob(f"{EVENT_FILE_PREFIX}*")
                    if p.name.endswith(f".attempt-{self.attempt:04d}")
                )
                snapshot = Path(tempfile.mkdtemp(prefix="tb-", dir=self.directory.parent))
                copies = [Path(shutil.copy2(p, snapshot / p.name)) for p in files]
            try:
                prefix = layout.tensorboard_prefix(job_id)
                for path in copies:
                    s3.upload_file(str(path), bucket, prefix + path.name)
            finally:
                shutil.rmtree(snapshot, ignore_errors=True)
            return len(copies)
        except Exception as exc:
            logger.warning("uploading TensorBoard event files failed: %s", exc)
            return 0
