"""Uploads checkpoint snapshots to S3 in the background, newest first, then prunes.

The session process takes a snapshot and the agent hands it to `CheckpointUploader.submit`;
one thread uploads them in order. If snapshots arrive faster than they upload, only the
newest waiting one is uploaded (an older one would be superseded at once anyway). After
each upload it reports the checkpoint, prunes S3 to `keep` and deletes staging directories
older than the uploaded one (the newest snapshot is kept: the next one hard-links from it).

A checkpoint taken on a notice (or a rebalance) is not followed by a prune: the attempt hands
off as soon as it is in S3 (`wait_uploaded`), and from then on the next attempt is the job's
only writer, so a prune here could delete the blobs of the next attempt's first upload. The
next upload (of this attempt or the next) prunes.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from respot.agent.snapshots import snapshot_seq
from respot.storage.checkpoints import CheckpointSealedError, CheckpointStore, UploadResult

logger = logging.getLogger(__name__)

UPLOAD_ATTEMPTS = 4
NOTICE_UPLOAD_ATTEMPTS = 8
RETRY_GAP_SECONDS = 1.0
MAX_RETRY_GAP_SECONDS = 8.0


@dataclass(frozen=True)
class PendingCheckpoint:
    """A snapshot waiting to be uploaded."""

    path: Path
    step: int
    reason: str


class CheckpointUploader:
    """One background thread that uploads snapshots through a `CheckpointStore`."""

    def __init__(
        self,
        store: CheckpointStore,
        *,
        attempt: int,
        keep: int,
        staging_root: Path,
        on_uploaded: Callable[[PendingCheckpoint, UploadResult], None],
    ) -> None:
        self._store = store
        self._attempt = attempt
        self._keep = keep
        self._staging_root = staging_root
        self._on_uploaded = on_uploaded
        self._cond = threading.Condition()
        self._pending: list[PendingCheckpoint] = []
        self._busy = False  # uploading, reporting or pruning
        self._uploading = False  # uploading: the manifest is not written yet
        self._stopped = False
        self.last_step: int | None = None
        self.last_manifest_key: str | None = None
        self.failures = 0
        self._thread = threading.Thread(target=self._run, name="checkpoint-upload", daemon=True)
        self._thread.start()

    def submit(self, path: Path, step: int, reason: str) -> None:
        """Queue a snapshot for upload."""
        with self._cond:
            self._pending.append(PendingCheckpoint(Path(path), step, reason))
            self._cond.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until nothing is pending or uploading; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending or self._busy:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def wait_uploaded(self, timeout: float) -> bool:
        """Wait until every queued snapshot is in S3 (or given up); False on timeout.

        Unlike `wait_idle`, it does not wait for the report and prune after an upload.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending or self._uploading:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def stop(self) -> None:
        """Stop the thread after the current upload (pending snapshots are dropped)."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self._thread.join(timeout=1.0)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
                # Newest wins: older waiting snapshots are superseded.
                item, dropped = self._pending[-1], self._pending[:-1]
                self._pending = []
                self._busy = self._uploading = True
            for old in dropped:
                logger.info("skipping checkpoint step %d: step %d is newer", old.step, item.step)
                shutil.rmtree(old.path, ignore_errors=True)
            try:
                self._upload(item)
            finally:
                with self._cond:
                    self._busy = self._uploading = False
                    self._cond.notify_all()

    def _upload(self, item: PendingCheckpoint) -> None:
        attempts = NOTICE_UPLOAD_ATTEMPTS if item.reason == "notice" else UPLOAD_ATTEMPTS
        result: UploadResult | None = None
        for n in range(attempts):
            try:
                result = self._store.upload(
                    item.path, step=item.step, attempt=self._attempt, reason=item.reason
                )
                break
            except CheckpointSealedError as exc:
                logger.warning("%s", exc)  # the attempt handed off: trying again cannot help
                break
            except Exception as exc:
                gap = min(RETRY_GAP_SECONDS * 2**n, MAX_RETRY_GAP_SECONDS)
                logger.warning(
                    "uploading checkpoint step %d failed (%s); retry in %.0fs", item.step, exc, gap
                )
                if n + 1 < attempts:
                    time.sleep(gap)
        if result is None:
            self.failures += 1
            logger.error("checkpoint step %d was not uploaded", item.step)
            return
        with self._cond:
            self.last_step = item.step if self.last_step is None else max(self.last_step, item.step)
            self.last_manifest_key = result.manifest_key
            self._uploading = False
            self._cond.notify_all()
        logger.info(
            "checkpoint step %d uploaded: %d of %d bytes sent in %.2fs",
            item.step,
            result.uploaded_bytes,
            result.size_bytes,
            result.seconds,
        )
        try:
            self._on_uploaded(item, result)
        except Exception:
            logger.exception("reporting checkpoint step %d failed", item.step)
        if item.reason == "notice":
            logger.info("checkpoint step %d: no prune after a notice checkpoint", item.step)
        else:
            try:
                self._store.prune(self._keep)
            except Exception as exc:
                logger.warning("pruning checkpoints failed (%s); trying again next time", exc)
        self._remove_older_snapshots(item.path)

    def _remove_older_snapshots(self, uploaded: Path) -> None:
        current = snapshot_seq(uploaded)
        if current is None:
            return
        with self._cond:
            waiting = {p.path for p in self._pending}
        for path in self._staging_root.iterdir():
            seq = snapshot_seq(path)
            if seq is not None and seq < current and path not in waiting:
                shutil.rmtree(path, ignore_errors=True)
