"""Checkpoints in S3: content-addressed blobs plus a manifest per checkpoint, written last.

A checkpoint is the set of files a session left in its checkpoint directory at one step.
Each file's content is stored once, under its SHA-256 (`layout.blob_key`); a checkpoint is a
small JSON manifest (`layout.manifest_key`) listing relative path, size and SHA-256 of every
file. The manifest is written only after every blob it names is in S3, so a checkpoint whose
manifest exists is complete, and one without a manifest never counts. Restores verify size
and SHA-256 of every file and fall back to the previous manifest if anything is missing or
corrupt.

Single writer: `prune` assumes no other process writes checkpoints of the same job at the
same time (the handoff marker gives that order between attempts). An attempt seals its store
(`seal`) before it writes its handoff marker: no manifest of it can land after the marker,
even one whose PUT was still in flight (the seal waits for it), so the checkpoint its
successor restores is the newest it will ever write.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from respot.exceptions import CheckpointError
from respot.storage import layout

if TYPE_CHECKING:
    from boto3.s3.transfer import TransferConfig
    from mypy_boto3_s3 import S3Client

logger = logging.getLogger(__name__)

MANIFEST_SCHEMA_VERSION: Literal[1] = 1
# Files above this size go up and down in parts, several parts at a time.
MULTIPART_THRESHOLD_BYTES = 64 * 1024 * 1024
MULTIPART_CHUNK_BYTES = 16 * 1024 * 1024
MAX_CONCURRENCY = 10
DELETE_BATCH = 1000  # S3 DeleteObjects takes at most 1,000 keys
# From this many blobs not known to be stored, one listing of the job's blobs asks S3 instead
# of a HeadObject each (a first upload of a workspace of 1,000 files: 1 request, not 1,000).
LIST_OVER_HEAD = 100
_HASH_CHUNK_BYTES = 1024 * 1024
_MISSING_CODES = frozenset({"404", "NoSuchKey", "NotFound"})


class ManifestFile(BaseModel):
    """One file of a checkpoint: where it goes under the checkpoint directory and its content."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    size: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")

    @field_validator("path")
    @classmethod
    def _relative(cls, value: str) -> str:
        # A manifest is read back from S3: it must never name a file outside the restore dir.
        p = PurePosixPath(value)
        if not value or p.is_absolute() or ".." in p.parts or "\\" in value or "\x00" in value:
            raise ValueError(f"{value!r} is not a relative path inside the checkpoint")
        if str(p) != value:
            raise ValueError(f"{value!r} is not a normalized relative path")
        return value


class Manifest(BaseModel):
    """A complete checkpoint: the files of one step of one attempt."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    schema_version: Literal[1] = MANIFEST_SCHEMA_VERSION
    job_id: str
    step: int = Field(ge=0)
    attempt: int = Field(ge=0)
    created_at: datetime
    reason: str
    files: list[ManifestFile]

    @property
    def key(self) -> str:
        """The manifest's S3 key."""
        return layout.manifest_key(self.job_id, self.step, self.attempt)

    @property
    def size_bytes(self) -> int:
        """Total size of the checkpoint's files."""
        return sum(f.size for f in self.files)


class CheckpointSealedError(CheckpointError):
    """This store is sealed (its attempt handed off): it writes no more manifests."""


@dataclass(frozen=True)
class UploadResult:
    """What one `CheckpointStore.upload` did."""

    manifest_key: str
    size_bytes: int  # all files of the checkpoint
    uploaded_bytes: int  # what was actually sent; the rest was in S3 already
    seconds: float


@dataclass(frozen=True)
class RefusedCheckpoint:
    """A checkpoint `restore` passed over: its step, its manifest and why (a file missing, its
    size or SHA-256 not the manifest's, a malformed manifest)."""

    step: int | None
    manifest_key: str
    reason: str


@dataclass(frozen=True)
class PruneResult:
    """What one `CheckpointStore.prune` deleted."""

    manifests_deleted: int
    blobs_deleted: int


@dataclass(frozen=True)
class _LocalFile:
    rel: str
    path: Path
    size: int
    sha256: str


def default_transfer_config() -> TransferConfig:
    """Managed-transfer settings: multipart above 64 MiB, ten requests in flight."""
    from boto3.s3.transfer import TransferConfig

    return TransferConfig(
        multipart_threshold=MULTIPART_THRESHOLD_BYTES,
        multipart_chunksize=MULTIPART_CHUNK_BYTES,
        max_concurrency=MAX_CONCURRENCY,
        use_threads=True,
    )


class CheckpointStore:
    """Upload, find, restore and prune the checkpoints of one job in one bucket."""

    def __init__(
        self,
        *,
        bucket: str,
        job_id: str,
        client: S3Client | None = None,
        transfer_config: TransferConfig | None = None,
    ) -> None:
        if client is None:
            import boto3

            client = boto3.client("s3")
        self.bucket = bucket
        self.job_id = job_id
        self._client = client
        self._config = transfer_config or default_transfer_config()
        self._lock = threading.Lock()
        # Blobs this process knows to be in S3 (uploaded, seen by HeadObject, or restored).
        self._known_blobs: set[str] = set()
        # (device, inode, size, mtime_ns) -> sha256: unchanged files (hard-linked snapshots
        # share inodes) are hashed once per process.
        self._digest_cache: dict[tuple[int, int, int, int], str] = {}
        # Held while a manifest is written; `seal` takes it, so it waits for one in flight.
        self._manifest_lock = threading.Lock()
        self._sealed: str | None = None
        # What the last `restore` passed over, newest first (the agent reports it).
        self.refused: list[RefusedCheckpoint] = []
        self.last_written: Manifest | None = None  # the newest manifest this store wrote

    # ---- upload ------------------------------------------------------------------------------

    def upload(self, local_dir: Path, *, step: int, attempt: int, reason: str) -> UploadResult:
        """Store every file under `local_dir` as the checkpoint of (`step`, `attempt`).

        Blobs already in S3 are not sent again; the manifest is written last.
        """
        started = time.monotonic()
        self._check_sealed(step)
        local_dir = Path(local_dir)
        if not local_dir.is_dir():
            raise CheckpointError(f"{local_dir} is not a directory")
        files = self._scan(local_dir)
        by_digest: dict[str, _LocalFile] = {}
        for f in files:
            by_digest.setdefault(f.sha256, f)
        with self._lock:
            unknown = [d for d in by_digest if d not in self._known_blobs]
        present = self._present_in_s3(unknown)
        to_send = [by_digest[d] for d in unknown if d not in present]
        try:
            self._put_blobs(to_send)
        except Exception as exc:
            raise CheckpointError(f"uploading checkpoint step {step} failed: {exc}") from exc
        with self._lock:
            self._known_blobs.update(present)
            self._known_blobs.update(f.sha256 for f in to_send)
        manifest = Manifest(
            job_id=self.job_id,
            step=step,
            attempt=attempt,
            created_at=datetime.now(UTC),
            reason=reason,
            files=[ManifestFile(path=f.rel, size=f.size, sha256=f.sha256) for f in files],
        )
        # Written last: from here on the checkpoint counts. Never after the seal.
        with self._manifest_lock:
            self._check_sealed(step)
            try:
                self._client.put_object(
                    Bucket=self.bucket,
                    Key=manifest.key,
                    Body=manifest.model_dump_json(indent=1).encode(),
                    ContentType="application/json",
                )
            except Exception as exc:
                raise CheckpointError(f"writing manifest {manifest.key} failed: {exc}") from exc
            if self.last_written is None or manifest.step >= self.last_written.step:
                self.last_written = manifest
        return UploadResult(
            manifest_key=manifest.key,
            size_bytes=manifest.size_bytes,
            uploaded_bytes=sum(f.size for f in to_send),
            seconds=time.monotonic() - started,
        )

    def seal(self, why: str) -> Manifest | None:
        """Write no more manifests from now on; returns the newest this store wrote.

        Waits for a manifest PUT in flight (its outcome, success or failure, is then known),
        so once this returns, every checkpoint of this store that will ever exist does.
        """
        with self._manifest_lock:
            self._sealed = self._sealed or why
            return self.last_written

    def _check_sealed(self, step: int) -> None:
        if self._sealed is not None:
            raise CheckpointSealedError(
                f"checkpoint step {step} is not written: the store is sealed ({self._sealed})"
            )

    def _scan(self, local_dir: Path) -> list[_LocalFile]:
        out: list[_LocalFile] = []
        for path in sorted(local_dir.rglob("*")):
            if path.is_symlink():
                logger.warning("checkpoint: skipping symbolic link %s", path)
                continue
            if not path.is_file():
                continue
            st = path.stat()
            cache_key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            digest = self._digest_cache.get(cache_key)
            if digest is None:
                digest = file_sha256(path)
                self._digest_cache[cache_key] = digest
            rel = path.relative_to(local_dir).as_posix()
            out.append(_LocalFile(rel=rel, path=path, size=st.st_size, sha256=digest))
        return out

    def _present_in_s3(self, digests: list[str]) -> set[str]:
        """Which of `digests` are already stored: from one listing of the job's blobs when
        `LIST_OVER_HEAD` or more are asked about and the listing is short enough (a page of
        1,000 keys per request against ten HeadObjects at a time), else HeadObject each."""
        if not digests:
            return set()
        if len(digests) >= LIST_OVER_HEAD:
            stored = self._stored_blobs(max_pages=max(1, len(digests) // MAX_CONCURRENCY))
            if stored is not None:
                return stored.intersection(digests)

        def exists(digest: str) -> bool:
            try:
                self._client.head_object(
                    Bucket=self.bucket, Key=layout.blob_key(self.job_id, digest)
                )
            except Exception as exc:
                if _error_code(exc) in _MISSING_CODES:
                    return False
                raise CheckpointError(f"checking blob {digest[:12]} failed: {exc}") from exc
            return True

        with ThreadPoolExecutor(max_workers=min(MAX_CONCURRENCY, len(digests))) as pool:
            found = list(pool.map(exists, digests))
        return {d for d, ok in zip(digests, found, strict=True) if ok}

    def _stored_blobs(self, max_pages: int) -> set[str] | None:
        """The digests of every blob of the job (a listing), or None past `max_pages` pages."""
        prefix = layout.blob_key(self.job_id, "")
        found: set[str] = set()
        try:
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix
            )
            for n, page in enumerate(pages):
                if n >= max_pages:
                    return None
                found.update(obj["Key"][len(prefix) :] for obj in page.get("Contents", []))
        except Exception as exc:
            raise CheckpointError(f"listing the stored blobs failed: {exc}") from exc
        return found

    def _put_blobs(self, files: list[_LocalFile]) -> None:
        if not files:
            return
        from boto3.s3.transfer import create_transfer_manager

        with create_transfer_manager(self._client, self._config) as manager:
            futures = [
                manager.upload(
                    str(f.path),
                    self.bucket,
                    layout.blob_key(self.job_id, f.sha256),
                    extra_args={"Metadata": {"sha256": f.sha256}},
                )
                for f in files
            ]
            for future in futures:
                future.result()

    # ---- find and restore --------------------------------------------------------------------

    def manifest_keys(self) -> list[str]:
        """Keys of every manifest of the job, oldest (lowest step, attempt) first."""
        keys = [
            key
            for key in self._list(layout.manifests_prefix(self.job_id))
            if layout.parse_manifest_key(key) is not None
        ]
        return sorted(keys, key=lambda k: layout.parse_manifest_key(k) or (0, 0))

    def read_manifest(self, key: str) -> Manifest:
        """Read and validate one manifest; `CheckpointError` if it is gone or malformed."""
        try:
            return self._read_manifest(key)
        except _UnusableCheckpointError as exc:
            raise CheckpointError(f"manifest {key}: {exc}") from exc

    def _read_manifest(self, key: str) -> Manifest:
        try:
            body = self._client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except Exception as exc:
            if _error_code(exc) in _MISSING_CODES:
                raise _UnusableCheckpointError("the manifest is gone") from exc
            raise CheckpointError(f"reading manifest {key} failed: {exc}") from exc
        try:
            manifest = Manifest.model_validate_json(body)
        except ValidationError as exc:
            raise _UnusableCheckpointError(f"malformed: {exc.error_count()} problem(s)") from exc
        if manifest.key != key or manifest.job_id != self.job_id:
            raise _UnusableCheckpointError(f"it describes another checkpoint ({manifest.key})")
        return manifest

    def latest(self) -> Manifest | None:
        """The newest readable manifest, or None if the job has no checkpoint."""
        for key in reversed(self.manifest_keys()):
            try:
                return self._read_manifest(key)
            except _UnusableCheckpointError as exc:
                logger.warning("checkpoint %s: %s; trying the previous one", key, exc)
        return None

    def restore(self, dest: Path) -> Manifest | None:
        """Put the newest complete, verified checkpoint's files in `dest` (replacing it).

        Returns None (and leaves `dest` alone) if the job has no checkpoint. Raises
        `CheckpointError` if checkpoints exist but none can be restored.
        """
        dest = Path(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        keys = self.manifest_keys()
        problems: list[str] = []
        self.refused = []
        for key in reversed(keys):
            tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.restore-", dir=dest.parent))
            try:
                manifest = self._read_manifest(key)
                self._download_into(manifest, tmp)
            except _UnusableCheckpointError as exc:
                problems.append(f"{key}: {exc}")
                parsed = layout.parse_manifest_key(key)
                self.refused.append(RefusedCheckpoint(parsed[0] if parsed else None, key, str(exc)))
                logger.warning("checkpoint %s is unusable (%s); trying the previous one", key, exc)
                shutil.rmtree(tmp, ignore_errors=True)
                continue
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            _replace_dir(tmp, dest)
            with self._lock:
                self._known_blobs.update(f.sha256 for f in manifest.files)
            return manifest
        if problems:
            raise CheckpointError(
                f"job {self.job_id} has {len(keys)} checkpoint(s) but none could be restored: "
                + "; ".join(problems)
            )
        return None

    def _download_into(self, manifest: Manifest, tmp: Path) -> None:
        """Download and verify every file of `manifest` into `tmp`; raise if one is bad.

        A file below the multipart threshold is one GetObject (the manifest gives its size,
        so no HeadObject first: one request per file, not two); a larger one goes through
        the transfer manager in ranged parts. Size and SHA-256 are checked afterwards either way.
        """
        from boto3.s3.transfer import create_transfer_manager

        targets: list[tuple[ManifestFile, Path]] = []
        for f in manifest.files:
            target = tmp.joinpath(*PurePosixPath(f.path).parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            targets.append((f, target))
        threshold = self._config.multipart_threshold
        whole = [(f, t) for f, t in targets if f.size < threshold]
        parted = [(f, t) for f, t in targets if f.size >= threshold]
        if whole:
            workers = max(1, min(self._config.max_request_concurrency, len(whole)))
            with ThreadPoolExecutor(max_workers=workers) as pool:
                gets = [(f, pool.submit(self._get_whole, f, t)) for f, t in whole]
                try:
                    for f, get in gets:
                        self._downloaded(f, get.result)
                except BaseException:
                    pool.shutdown(cancel_futures=True)  # no more GETs for a bad checkpoint
                    raise
        if parted:
            with create_transfer_manager(self._client, self._config) as manager:
                futures = [
                    (
                        f,
                        manager.download(
                            self.bucket, layout.blob_key(self.job_id, f.sha256), str(t)
                        ),
                    )
                    for f, t in parted
                ]
                for f, future in futures:
                    self._downloaded(f, future.result)
        for f, target in targets:
            size = target.stat().st_size
            if size != f.size:
                raise _UnusableCheckpointError(
                    f"{f.path} has {size} bytes, the manifest says {f.size}"
                )
            digest = file_sha256(target)
            if digest != f.sha256:
                raise _UnusableCheckpointError(
                    f"{f.path} has SHA-256 {digest[:12]}, the manifest says {f.sha256[:12]}"
                )

    def _get_whole(self, f: ManifestFile, target: Path) -> None:
        """One GetObject of `f`'s blob into `target`; a broken stream is read again from the
        start (as the transfer manager does), at most `num_download_attempts` times."""
        from s3transfer.utils import S3_RETRYABLE_DOWNLOAD_ERRORS

        key = layout.blob_key(self.job_id, f.sha256)
        attempts = max(1, self._config.num_download_attempts)
        for n in range(attempts):
            try:
                body = self._client.get_object(Bucket=self.bucket, Key=key)["Body"]
                with open(target, "wb") as out:
                    for chunk in body.iter_chunks(_HASH_CHUNK_BYTES):
                        out.write(chunk)
                return
            except S3_RETRYABLE_DOWNLOAD_ERRORS:
                if n + 1 == attempts:
                    raise

    @staticmethod
    def _downloaded(f: ManifestFile, result: Any) -> None:
        """Wait for one download (`result()`); a missing blob makes the checkpoint unusable."""
        try:
            result()
        except Exception as exc:
            if _error_code(exc) in _MISSING_CODES:
                raise _UnusableCheckpointError(
                    f"blob of {f.path} ({f.sha256[:12]}) is missing"
                ) from exc
            raise CheckpointError(f"downloading {f.path} failed: {exc}") from exc

    # ---- prune -------------------------------------------------------------------------------

    def prune(self, keep: int) -> PruneResult:
        """Delete all but the newest `keep` manifests, then blobs no kept manifest names.

        Not once sealed: the successor is the job's writer then, and its blobs uploaded ahead
        of its manifest are named by none yet (`seal` waits for a prune under way)."""
        if keep < 1:
            raise ValueError("keep at least one checkpoint")
        with self._manifest_lock:
            if self._sealed is not None:
                logger.info("prune: the store is sealed (%s); the successor prunes", self._sealed)
                return PruneResult(0, 0)
            return self._prune(keep)

    def _prune(self, keep: int) -> PruneResult:
        keys = self.manifest_keys()
        old, kept = keys[:-keep], keys[-keep:]
        self._delete(old)
        referenced: set[str] = set()
        for key in kept:
            try:
                manifest = self._read_manifest(key)
            except _UnusableCheckpointError as exc:
                # Unknown references: deleting blobs could break a checkpoint we keep.
                logger.warning("prune: manifest %s: %s; keeping every blob", key, exc)
                return PruneResult(len(old), 0)
            referenced.update(f.sha256 for f in manifest.files)
        blobs_prefix = layout.blob_key(self.job_id, "")
        unreferenced = [
            key for key in self._list(blobs_prefix) if key[len(blobs_prefix) :] not in referenced
        ]
        self._delete(unreferenced)
        with self._lock:
            self._known_blobs.difference_update(k[len(blobs_prefix) :] for k in unreferenced)
        return PruneResult(len(old), len(unreferenced))

    # ---- S3 helpers --------------------------------------------------------------------------

    def _list(self, prefix: str) -> Iterable[str]:
        paginator = self._client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                yield obj["Key"]

    def _delete(self, keys: list[str]) -> None:
        for i in range(0, len(keys), DELETE_BATCH):
            batch = keys[i : i + DELETE_BATCH]
            response = self._client.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
            )
            errors = response.get("Errors", [])
            if errors:
                raise CheckpointError(
                    f"deleting {len(errors)} object(s) failed, e.g. {errors[0].get('Key')}: "
                    f"{errors[0].get('Code')}"
                )


class _UnusableCheckpointError(Exception):
    """This checkpoint cannot be restored (missing or corrupt file); an older one may be."""


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file's content."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _error_code(exc: BaseException) -> str | None:
    response: Any = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        return str(code) if code is not None else None
    return None


def _replace_dir(new: Path, dest: Path) -> None:
    """Make `new` be `dest`, by renames only, so `dest` is never half-written."""
    if dest.exists() or dest.is_symlink():
        old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old-", dir=dest.parent))
        os.replace(dest, old / dest.name)
        os.replace(new, dest)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(new, dest)
