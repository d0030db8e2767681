"""Prepares a job on the instance: the submission, the code, the data.

Everything comes from S3 and lands under the agent's work directory. The code zip is checked
against the SHA-256 the laptop recorded and unpacked without letting any entry escape its
directory (no absolute paths, no '..', no links).
"""

from __future__ import annotations

import json
import logging
import re
import stat
import time
import zipfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from respot.agent.exceptions import SetupError
from respot.spec.training import DataSourceEnvVar
from respot.storage import layout
from respot.storage.checkpoints import default_transfer_config, file_sha256
from respot.wire.messages import CodeArtifact, JobSubmission, utcnow

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

logger = logging.getLogger(__name__)

_S3_URI = re.compile(r"s3://(?P<bucket>[^/]+)/?(?P<key>.*)")
_MISSING_CODES = frozenset({"404", "NoSuchKey", "NotFound"})
MAX_UNZIPPED_BYTES = 20 * 1024**3  # refuse zip bombs: a code zip never unpacks to 20 GiB


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """(bucket, key) of `s3://bucket/key`."""
    m = _S3_URI.fullmatch(uri)
    if not m:
        raise SetupError(f"{uri!r} is not an s3:// URI")
    return m.group("bucket"), m.group("key")


def read_submission(s3: S3Client, bucket: str, job_id: str) -> JobSubmission:
    """The job's submission as the control plane stored it."""
    key = layout.submission_key(job_id)
    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except Exception as exc:
        raise SetupError(f"cannot read the submission s3://{bucket}/{key}: {exc}") from exc
    try:
        submission = JobSubmission.model_validate_json(body)
    except Exception as exc:
        raise SetupError(f"the submission s3://{bucket}/{key} is invalid: {exc}") from exc
    if submission.job_id != job_id:
        raise SetupError(f"the submission at {key} is for job {submission.job_id}, not {job_id}")
    return submission


def fetch_code(s3: S3Client, code: CodeArtifact, dest: Path, scratch: Path) -> Path:
    """Download the code zip, check its SHA-256 and size, and unpack it into `dest`."""
    bucket, key = parse_s3_uri(code.s3_uri)
    archive = scratch / "code.zip"
    archive.parent.mkdir(parents=True, exist_ok=True)
    try:
        s3.download_file(bucket, key, str(archive), Config=default_transfer_config())
    except Exception as exc:
        raise SetupError(f"cannot download the code {code.s3_uri}: {exc}") from exc
    size = archive.stat().st_size
    digest = file_sha256(archive)
    if digest != code.sha256 or size != code.size_bytes:
        raise SetupError(
            f"the code {code.s3_uri} does not match its submission: sha256 {digest[:12]} "
            f"({size} bytes), expected {code.sha256[:12]} ({code.size_bytes} bytes)"
        )
    safe_extract(archive, dest)
    archive.unlink()
    return dest


def safe_extract(archive: Path, dest: Path) -> list[Path]:
    """Unpack a zip into `dest`, refusing entries that would land outside it or are links."""
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    written: list[Path] = []
    try:
        zf = zipfile.ZipFile(archive)
    except zipfile.BadZipFile as exc:
        raise SetupError(f"{archive.name} is not a zip file: {exc}") from exc
    with zf:
        infos = zf.infolist()
        total = sum(i.file_size for i in infos)
        if total > MAX_UNZIPPED_BYTES:
            raise SetupError(f"the code zip unpacks to {total:,} bytes; refusing")
        for info in infos:
            name = info.filename.replace("\\", "/")
            parts = PurePosixPath(name).parts
            if (
                not name
                or name.startswith("/")
                or ".." in parts
                or (parts and ":" in parts[0])
                or "\x00" in name
            ):
                raise SetupError(f"the code zip has an unsafe entry {info.filename!r}")
            mode = info.external_attr >> 16
            if stat.S_ISLNK(mode):
                raise SetupError(f"the code zip has a symbolic link {info.filename!r}")
            target = (root / name).resolve()
            if target != root and root not in target.parents:
                raise SetupError(f"the code zip entry {info.filename!r} escapes the code dir")
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as out:
                while chunk := src.read(1024 * 1024):
                    out.write(chunk)
            if mode & 0o111:
                target.chmod(0o755)
            written.append(target)
    return written


def fetch_data(s3: S3Client, sources: list[DataSourceEnvVar], data_dir: Path) -> int:
    """Download every data source under `data_dir/<local_path>/`; returns the bytes fetched.

    `s3://bucket/prefix/` (or a key that is not an object) fetches every object under the
    prefix, keeping the paths below it; `s3://bucket/key` fetches that one object as
    `data_dir/<local_path>/<its file name>`.
    """
    from boto3.s3.transfer import create_transfer_manager

    jobs: list[tuple[str, str, Path, int]] = []
    for source in sources:
        base = data_dir / source.local_path
        base.mkdir(parents=True, exist_ok=True)
        bucket, key = source.bucket, source.key
        single = _object_size(s3, bucket, key) if key and not key.endswith("/") else None
        if single is not None:
            jobs.append((bucket, key, base / PurePosixPath(key).name, single))
            continue
        prefix = key if (not key or key.endswith("/")) else key + "/"
        found = 0
        paginator = s3.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                rel = obj["Key"][len(prefix) :]
                if not rel or rel.endswith("/"):
                    continue  # a "folder" marker
                parts = PurePosixPath(rel).parts
                if ".." in parts or rel.startswith("/"):
                    raise SetupError(f"data object {obj['Key']!r} would land outside data_dir")
                jobs.append((bucket, obj["Key"], base.joinpath(*parts), int(obj["Size"])))
                found += 1
        if not found:
            raise SetupError(f"the data source {source.s3_uri} has no objects")
    with create_transfer_manager(s3, default_transfer_config()) as manager:
        futures = []
        for bucket, key, target, _ in jobs:
            target.parent.mkdir(parents=True, exist_ok=True)
            futures.append((key, manager.download(bucket, key, str(target))))
        for key, future in futures:
            try:
                future.result()
            except Exception as exc:
                raise SetupError(f"cannot download data s3://.../{key}: {exc}") from exc
    return sum(size for *_, size in jobs)


def _object_size(s3: S3Client, bucket: str, key: str) -> int | None:
    try:
        return int(s3.head_object(Bucket=bucket, Key=key)["ContentLength"])
    except Exception as exc:
        if _error_code(exc) in _MISSING_CODES:
            return None
        raise SetupError(f"cannot read data s3://{bucket}/{key}: {exc}") from exc


def object_exists(s3: S3Client, bucket: str, key: str) -> bool:
    """True if the object exists (False on 404; other errors raise)."""
    try:
        s3.head_object(Bucket=bucket, Key=key)
    except Exception as exc:
        if _error_code(exc) in _MISSING_CODES:
            return False
        raise
    return True


def wait_for_object(
    s3: S3Client,
    bucket: str,
    key: str,
    *,
    timeout_seconds: float,
    poll_seconds: float = 1.0,
    give_up: Callable[[], bool] = lambda: False,
) -> bool:
    """Wait until `key` exists; False if `timeout_seconds` pass (or `give_up()` says so)."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        try:
            if object_exists(s3, bucket, key):
                return True
        except Exception as exc:
            logger.warning("checking s3://%s/%s failed: %s", bucket, key, exc)
        if time.monotonic() >= deadline or give_up():
            return False
        time.sleep(min(poll_seconds, max(0.0, deadline - time.monotonic())))


def write_handoff(s3: S3Client, bucket: str, job_id: str, attempt: int, **data: Any) -> str:
    """Write the marker saying `attempt` will write no more checkpoints."""
    key = layout.handoff_key(job_id, attempt)
    body = json.dumps({"job_id": job_id, "attempt": attempt, "at": utcnow().isoformat(), **data})
    s3.put_object(Bucket=bucket, Key=key, Body=body.encode(), ContentType="application/json")
    return key


def _error_code(exc: BaseException) -> str | None:
    response: Any = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        return str(code) if code is not None else None
    return None
