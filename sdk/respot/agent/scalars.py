"""TensorBoard event files of the scalars the session reports, synced to the job's S3 prefix.

Every `report(step, loss=..., ...)` that reaches the agent becomes one scalar event per
metric (`Summary.Value.simple_value`, what `torch.utils.tensorboard` writes too), through
the `tensorboard` package's own `EventFileWriter` (no torch, no TensorFlow). Each attempt
writes its own file, `events.out.tfevents.<time>.<host>.<pid>.<n>.attempt-NNNN`, into one
directory that `sync` uploads to `jobs/<job>/tensorboard/`; TensorBoard reads the files of a
directory in name order (= time order) as one run, and discards points of an earlier attempt
beyond the step the next one resumed from (its "out-of-order step" purge), which is the work
an interruption lost.

Without the `tensorboard` package the agent writes nothing and says so once.
"""

from __future__ import annotations

import logging
import math
import threading
from pathlib import Path
from typing import Any

from respot import layout

logger = logging.getLogger(__name__)

EVENT_FILE_PREFIX = "events.out.tfevents."


class ScalarLog:
    """One attempt's event file; `add` from the agent's loop, `sync` from any thread."""

    def __init__(self, directory: Path, *, attempt: int) -> None:
        self.directory = directory
        self.attempt = attempt
        self._lock = threading.Lock()
        self._writer: Any = None
        self._unavailable = False
        self._closed = False
        self.points = 0

    def add(self, step: int, metrics: dict[str, float], wall_time: float) -> None:
        """Write one event per finite metric at `step`; never raises."""
        try:
            with self._lock:
                writer = self._open()
                if writer is None or self._closed:
                    return
                from tensorboard.compat.proto import event_pb2, summary_pb2

                values = [
                    summary_pb2.Summary.Value(tag=str(tag), simple_value=float(value))
                    for tag, value in metrics.items()
                    if isinstance(value, int | float) and math.isfinite(value)
                ]
                if not values:
                    return
                event = event_pb2.Event(
                    wall_time=wall_time, step=int(step), summary=summary_pb2.Summary(value=values)
                )
                writer.add_event(event)
                self.points += len(values)
        except Exception:
            logger.warning("writing TensorBoard scalars failed", exc_info=True)

    def _open(self) -> Any:
        if self._writer is not None or self._unavailable:
            return self._writer
        try:
            from tensorboard.summary.writer.event_file_writer import EventFileWriter
        except ImportError:
            self._unavailable = True
            logger.warning(
                "the tensorboard package is not installed: no TensorBoard event files "
                "(install respot[tensorboard] on the instance image)"
            )
            return None
        self.directory.mkdir(parents=True, exist_ok=True)
        self._writer = EventFileWriter(
            str(self.directory), flush_secs=5, filename_suffix=f".attempt-{self.attempt:04d}"
        )
        return self._writer

    def sync(self, s3: Any, bucket: str, job_id: str, *, final: bool = False) -> int:
        """Upload this attempt's event file as written so far (`final`: close it first).

        Returns the number of files uploaded; never raises. The file is copied under the lock
        (it is small) and uploaded outside it, so reports are never held up by S3.
        """
        import shutil
        import tempfile

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
