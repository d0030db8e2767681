"""Results back: a job's outputs, logs and (on request) final checkpoint, downloaded and verified.

`respot pull JOB [DIR]` and `JobHandle.outputs(DIR)` write
```
DIR/outputs/...            the files the session left in output_dir (SHA-256 checked)
DIR/logs/<attempt>/...     each attempt's session.log (and a notebook job's executed copies)
DIR/checkpoint/...         with --checkpoint: the newest complete checkpoint (manifest-verified)
```
A job that has not ended has no outputs: pulling it raises `JobNotFinishedError`, which says
so. A FAILED or CANCELLED job gives what exists (its logs, whatever outputs it uploaded, its
checkpoint), with a note saying what is missing.

Nothing from S3 chooses where a file lands outside DIR: every key and manifest path is
checked (no absolute path, no '..', no backslash, no NUL, no drive) and the resolved target
must lie inside DIR, so a link planted inside DIR cannot lead out of it either. Each file is
downloaded to a temporary name beside its target, checked (size, then SHA-256 against the
outputs manifest the agent wrote), and only then renamed into place.

The manifest itself is checked against the job record: the job's own agent reports the
SHA-256 of the `outputs.json` it wrote (`AgentCompleted`/`AgentFailed`), the control plane
keeps it (`JobRecord.outputs_sha256`), and a manifest with other bytes, or none where one was
reported, is refused. So a file counts as "SHA-256 verified" only against digests that came
from the job itself, never from whatever S3 holds now.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import ValidationError

from respot.exceptions import JobNotFinishedError, PullError
from respot.storage import layout
from respot.storage.checkpoints import (
    CheckpointStore,
    Manifest,
    default_transfer_config,
    file_sha256,
)
from respot.storage.outputs import SHA256_METADATA, OutputsManifest

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

    from respot.core.job import JobRecord

logger = logging.getLogger(__name__)

LARGE_FILE_BYTES = 8 * 1024 * 1024  # files this big get a progress bar of their own
_MISSING_CODES = frozenset({"404", "NoSuchKey", "NotFound"})


class TransferProgress(Protocol):
    """Told about a pull as it goes (a progress display)."""

    def begin(self, files: list[tuple[str, int]]) -> None:
        """The files (name, size) about to be downloaded."""

    def advance(self, name: str, nbytes: int) -> None:
        """`nbytes` more of `name` arrived (called from transfer threads)."""

    def end(self) -> None:
        """The downloads are over (successfully or not)."""


@dataclass(frozen=True)
class PulledFile:
    """One file written under DIR."""

    path: Path
    size: int
    sha256: str | None  # the checksum it was verified against; None: size only
    verified: bool


@dataclass
class PullResult:
    """What a pull wrote, and what it could not find."""

    job_id: str
    state: str
    directory: Path
    outputs: list[PulledFile] = field(default_factory=list)
    outputs_outcome: str | None = None  # "completed" / "failed" from the manifest
    checkpoint: Manifest | None = None
    logs: list[PulledFile] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def outputs_dir(self) -> Path:
        """DIR/outputs."""
        return self.directory / "outputs"

    @property
    def bytes(self) -> int:
        """Bytes of outputs and logs written (the checkpoint not included)."""
        return sum(f.size for f in [*self.outputs, *self.logs])


def safe_target(root: Path, rel: str) -> Path:
    """`root/rel`, or `PullError` if `rel` (from S3) could land anywhere but under `root`."""
    parts = rel.split("/")  # as written: PurePosixPath would quietly drop "." and "//"
    if (
        not rel
        or "\\" in rel
        or "\x00" in rel
        or any(p in ("", ".", "..") for p in parts)
        or ":" in parts[0]
    ):
        raise PullError(f"refusing the object name {rel!r}: it would land outside {root}")
    target = root.joinpath(*parts)
    base = root.resolve()
    # A link already inside root (or root's parents) must not take the file elsewhere.
    resolved_parent = target.parent.resolve()
    if resolved_parent != base and base not in resolved_parent.parents:
        raise PullError(f"refusing {rel!r}: {target.parent} leads outside {root}")
    if target.is_symlink():
        raise PullError(f"refusing {rel!r}: {target} is a symbolic link")
    return target


def pull_job(
    record: JobRecord,
    s3: S3Client,
    bucket: str,
    dest: Path,
    *,
    checkpoint: bool = False,
    progress: TransferProgress | None = None,
) -> PullResult:
    """Download what a job that has ended left: outputs, logs, and the checkpoint if asked."""
    state = record.state.value
    if not record.state.is_terminal():
        step = record.progress.step
        total = record.progress.total_steps
        where = "" if step is None else f" at step {step:,}" + (f" of {total:,}" if total else "")
        raise JobNotFinishedError(
            f"job {record.job_id} is {state}{where}: its outputs are uploaded when it ends. "
            f"Pull it then (`respot run --wait --pull DIR` waits and pulls), or follow it "
            f"with `respot status {record.job_id}`"
        )
    started = time.monotonic()
    result = PullResult(record.job_id, state, dest)
    dest.mkdir(parents=True, exist_ok=True)
    if state != "COMPLETED":
        result.notes.append(
            f"job {record.job_id} is {state}"
            + (f" ({record.reason})" if record.reason else "")
            + ": pulling what it left"
        )
    manifest, files = pull_outputs(
        s3,
        bucket,
        record.job_id,
        dest / "outputs",
        progress=progress,
        recorded_sha256=record.outputs_sha256,
    )
    result.outputs = files
    if manifest is not None:
        result.outputs_outcome = manifest.outcome
        if record.outputs_sha256 is None:
            result.notes.append(
                "the job record holds no digest of the outputs manifest (an agent before "
                "respot recorded one): files checked against the manifest in S3 only"
            )
    elif files:
        result.notes.append(
            "the outputs have no manifest (uploaded before respot recorded checksums): "
            "sizes checked, SHA-256 where the object carried one"
        )
    else:
        result.notes.append(
            "no outputs: the session uploads them when train() returns"
            if state == "COMPLETED"
            else f"no outputs: the job was {state} before it left any"
        )
    result.logs = pull_logs(s3, bucket, record.job_id, dest / "logs")
    if checkpoint:
        store = CheckpointStore(bucket=bucket, job_id=record.job_id, client=s3)
        result.checkpoint = store.restore(dest / "checkpoint")
        if result.checkpoint is None:
            result.notes.append("no checkpoint: the job never saved one")
    result.seconds = time.monotonic() - started
    return result


def read_outputs_manifest(
    s3: S3Client, bucket: str, job_id: str, recorded_sha256: str | None = None
) -> OutputsManifest | None:
    """The outputs manifest, None if there is none; `PullError` if it is unreadable, or if it
    is not the one whose SHA-256 the job record holds (`recorded_sha256`)."""
    key = layout.outputs_manifest_key(job_id)
    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except Exception as exc:
        if _error_code(exc) not in _MISSING_CODES:
            raise
        if recorded_sha256 is not None:
            raise PullError(
                f"the job reported its outputs manifest s3://{bucket}/{key}, which is gone; "
                "nothing pulled"
            ) from exc
        return None
    if recorded_sha256 is not None and hashlib.sha256(body).hexdigest() != recorded_sha256:
        raise PullError(
            f"the outputs manifest s3://{bucket}/{key} is not the one job {job_id} reported "
            f"(SHA-256 {hashlib.sha256(body).hexdigest()[:16]}…, the job record holds "
            f"{recorded_sha256[:16]}…): it was changed after the job wrote it; nothing pulled"
        )
    try:
        manifest = OutputsManifest.model_validate_json(body)
    except ValidationError as exc:
        raise PullError(
            f"the outputs manifest s3://{bucket}/{key} is malformed "
            f"({exc.error_count()} problem(s), e.g. {exc.errors()[0]['msg']}); nothing pulled"
        ) from exc
    if manifest.job_id != job_id:
        raise PullError(f"the outputs manifest {key} is for job {manifest.job_id}; nothing pulled")
    return manifest


def pull_outputs(
    s3: S3Client,
    bucket: str,
    job_id: str,
    dest: Path,
    *,
    progress: TransferProgress | None = None,
    recorded_sha256: str | None = None,
) -> tuple[OutputsManifest | None, list[PulledFile]]:
    """Download and verify the job's outputs into `dest`; nothing lands outside it."""
    prefix = layout.outputs_prefix(job_id)
    manifest = read_outputs_manifest(s3, bucket, job_id, recorded_sha256)
    wanted: list[tuple[str, int, str | None]] = []  # (relative path, size, sha256)
    if manifest is not None:
        wanted = [(f.path, f.size, f.sha256) for f in manifest.files]
    else:
        for key, size in _list(s3, bucket, prefix):
            rel = key[len(prefix) :]
            if rel.endswith("/") and size == 0:
                continue  # a "folder" marker
            wanted.append((rel, size, _metadata_sha256(s3, bucket, key)))
    if not wanted:
        return manifest, []
    dest.mkdir(parents=True, exist_ok=True)
    # Every target is checked before anything is written.
    targets = [(safe_target(dest, rel), rel, size, sha) for rel, size, sha in wanted]
    return manifest, _download_verified(s3, bucket, prefix, targets, progress)


def pull_logs(s3: S3Client, bucket: str, job_id: str, dest: Path) -> list[PulledFile]:
    """Download every attempt's logs (size checked) into `dest/<attempt>/...`."""
    root = layout.logs_root(job_id)
    listed = [(k, n) for k, n in _list(s3, bucket, root) if not k.endswith("/")]
    if not listed:
        return []
    dest.mkdir(parents=True, exist_ok=True)
    targets: list[tuple[Path, str, int, str | None]] = [
        (safe_target(dest, k[len(root) :]), k[len(root) :], n, None) for k, n in listed
    ]
    return _download_verified(s3, bucket, root, targets, None)


def _download_verified(
    s3: S3Client,
    bucket: str,
    prefix: str,
    targets: list[tuple[Path, str, int, str | None]],
    progress: TransferProgress | None,
) -> list[PulledFile]:
    from boto3.s3.transfer import create_transfer_manager

    temps: list[Path] = []
    pulled: list[PulledFile] = []
    if progress is not None:
        progress.begin([(rel, size) for _, rel, size, _ in targets])
    try:
        with create_transfer_manager(s3, default_transfer_config()) as manager:
            futures = []
            for target, rel, size, _sha in targets:
                target.parent.mkdir(parents=True, exist_ok=True)
                tmp = target.with_name(f".{target.name}.part-{secrets.token_hex(4)}")
                temps.append(tmp)
                # The size is known (manifest or listing): no HeadObject per file.
                subscribers = [_Advance(progress, rel, size)]
                futures.append(
                    (rel, manager.download(bucket, prefix + rel, str(tmp), subscribers=subscribers))
                )
            for rel, future in futures:
                try:
                    future.result()
                except Exception as exc:
                    if _error_code(exc) in _MISSING_CODES:
                        raise PullError(
                            f"{rel} is listed in the outputs manifest but missing in S3"
                        ) from exc
                    raise PullError(f"downloading {rel} failed: {exc}") from exc
        for (target, rel, size, sha), tmp in zip(targets, temps, strict=True):
            got = tmp.stat().st_size
            if got != size:
                raise PullError(f"{rel} has {got:,} bytes, {size:,} were recorded; not written")
            if sha is not None:
                digest = file_sha256(tmp)
                if digest != sha:
                    raise PullError(
                        f"{rel} has SHA-256 {digest[:16]}…, {sha[:16]}… was recorded at upload; "
                        "not written"
                    )
            os.replace(tmp, target)
            pulled.append(PulledFile(target, size, sha, verified=sha is not None))
    finally:
        for tmp in temps:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        if progress is not None:
            progress.end()
    return pulled


class _Advance:
    """An s3transfer subscriber: gives the known size (saving a HeadObject, as the AWS CLI
    does) and forwards byte counts to a `TransferProgress`."""

    def __init__(self, progress: TransferProgress | None, name: str, size: int) -> None:
        self._progress = progress
        self._name = name
        self._size = size

    # s3transfer calls subscribers by these method names (BaseSubscriber's protocol).
    def on_queued(self, future: Any, **kwargs: Any) -> None:
        future.meta.provide_transfer_size(self._size)

    def on_progress(self, future: Any, bytes_transferred: int, **kwargs: Any) -> None:
        if self._progress is not None:
            self._progress.advance(self._name, bytes_transferred)

    def on_done(self, future: Any, **kwargs: Any) -> None:
        return None


class RichTransferProgress:
    """Progress bars on a terminal: one for all bytes, one per file of 8 MiB or more."""

    def __init__(self, console: Any = None) -> None:
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self._tasks: dict[str, Any] = {}
        self._total: Any = None

    def begin(self, files: list[tuple[str, int]]) -> None:
        total = sum(size for _, size in files)
        self._progress.start()
        self._total = self._progress.add_task(f"{len(files)} file(s)", total=total)
        for name, size in files:
            if size >= LARGE_FILE_BYTES:
                self._tasks[name] = self._progress.add_task(f"  {name}", total=size)

    def advance(self, name: str, nbytes: int) -> None:
        self._progress.advance(self._total, nbytes)
        task = self._tasks.get(name)
        if task is not None:
            self._progress.advance(task, nbytes)

    def end(self) -> None:
        self._progress.stop()


def _metadata_sha256(s3: S3Client, bucket: str, key: str) -> str | None:
    try:
        meta = s3.head_object(Bucket=bucket, Key=key).get("Metadata", {})
    except Exception as exc:
        if _error_code(exc) in _MISSING_CODES:
            return None
        raise
    value = meta.get(SHA256_METADATA)
    return value if value and len(value) == 64 else None


def _list(s3: S3Client, bucket: str, prefix: str) -> Iterator[tuple[str, int]]:
    paginator = s3.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            yield obj["Key"], int(obj["Size"])


def _error_code(exc: BaseException) -> str | None:
    response: Any = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        return str(code) if code is not None else None
    return None
