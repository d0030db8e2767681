"""CheckpointUploader: when the hand-off may be written, and who prunes after a notice."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from respot.agent import uploads
from respot.agent.uploads import CheckpointUploader, PendingCheckpoint
from respot.storage.checkpoints import UploadResult


class _Store:
    """A CheckpointStore whose uploads wait for `release`; records uploads and prunes."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.manifests: list[str] = []
        self.prunes = 0

    def upload(self, path: Path, *, step: int, attempt: int, reason: str) -> UploadResult:
        assert self.release.wait(10)
        key = f"manifests/{step:012d}-{attempt:04d}.json"
        self.manifests.append(key)  # the manifest is written last: now it exists
        return UploadResult(key, 1, 1, 0.01)

    def prune(self, keep: int) -> None:
        self.prunes += 1


def _uploader(store: _Store, tmp_path: Path, on_uploaded: Any) -> CheckpointUploader:
    staging = tmp_path / "staging"
    staging.mkdir(exist_ok=True)
    return CheckpointUploader(
        store,  # type: ignore[arg-type]
        attempt=1,
        keep=2,
        staging_root=staging,
        on_uploaded=on_uploaded,
    )


def _snapshot(tmp_path: Path, seq: int, step: int) -> Path:
    path = tmp_path / "staging" / f"{seq:06d}-{step:012d}"
    path.mkdir(parents=True)
    return path


def test_the_hand_off_waits_for_the_manifest_but_not_for_the_report_after_it(
    tmp_path: Path,
) -> None:
    store = _Store()
    reported = threading.Event()
    report_may_end = threading.Event()

    def on_uploaded(item: PendingCheckpoint, result: UploadResult) -> None:
        reported.set()
        assert report_may_end.wait(10)  # a slow report / TensorBoard sync

    uploader = _uploader(store, tmp_path, on_uploaded)
    try:
        uploader.submit(_snapshot(tmp_path, 1, 40), 40, "notice")
        # WHILE the notice checkpoint is still uploading (no manifest yet): no hand-off
        assert not uploader.wait_uploaded(0.5)
        assert store.manifests == []
        # WHEN its manifest is written
        store.release.set()
        # THEN the hand-off may go at once, while the report after the upload still runs
        assert uploader.wait_uploaded(5)
        assert store.manifests == ["manifests/000000000040-0001.json"]
        assert uploader.last_manifest_key == store.manifests[0]
        assert reported.wait(5) and not uploader.wait_idle(0.2)
        report_may_end.set()
        assert uploader.wait_idle(5)
        # AND a notice checkpoint is not followed by a prune: from the hand-off on the next
        # attempt is the job's only writer (it prunes after its own first upload)
        assert store.prunes == 0
    finally:
        report_may_end.set()
        store.release.set()
        uploader.stop()


def test_a_failed_upload_releases_the_wait_without_a_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(uploads, "RETRY_GAP_SECONDS", 0.01)
    store = _Store()
    tries: list[int] = []

    def fail(path: Path, *, step: int, attempt: int, reason: str) -> UploadResult:
        tries.append(step)
        raise OSError("S3 is unreachable")

    store.upload = fail  # type: ignore[method-assign]
    uploader = _uploader(store, tmp_path, lambda item, result: None)
    try:
        uploader.submit(_snapshot(tmp_path, 1, 40), 40, "notice")
        # the wait ends when the uploader gives up (8 tries for a notice checkpoint), and the
        # hand-off then names no manifest of this attempt: the replacement restores the
        # newest complete one
        assert uploader.wait_uploaded(30)
        assert tries == [40] * uploads.NOTICE_UPLOAD_ATTEMPTS
        assert uploader.last_manifest_key is None and uploader.failures == 1
    finally:
        uploader.stop()


def test_a_periodic_checkpoint_is_pruned_after_its_upload(tmp_path: Path) -> None:
    store = _Store()
    store.release.set()
    uploader = _uploader(store, tmp_path, lambda item, result: None)
    try:
        uploader.submit(_snapshot(tmp_path, 1, 30), 30, "periodic")
        assert uploader.wait_idle(5)
        assert store.prunes == 1
    finally:
        uploader.stop()
