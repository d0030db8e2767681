"""What `respot local down` keeps for the next `respot local up`: the jobs, their outputs,
checkpoints and logs.

moto keeps its state in memory and has no persistence of its own that fits (its recorder
replays API calls, which would launch instances again). So the runtime's own data is copied
out when `local up` ends and put back when the next one starts, before it says it is up:
- the job table: every item, except the records of jobs still live, their instances'
  items and the control plane's activity marker (the next runtime's pollers start as a new
  deployment's do). A live job cannot outlive the runtime (its instance is a process of
  it), so `save` first cancels the live jobs through the control plane ("cancelled: the
  local runtime stopped"), waits for them to end (bounded), and keeps them as CANCELLED;
  one that has not ended within the bound is left out, and named;
- the artifacts bucket: the newest version of every object (submissions, code, checkpoints,
  outputs, session logs, TensorBoard files), as files.
CloudWatch Logs streams are not kept: `respot logs` reads each finished attempt's S3
`session.log` instead. The satellite regions' buckets are not kept either.

The next runtime reuses the saved resource-name prefix, so every name a record holds (the
bucket in a code URI) is valid again. The store is `~/.respot/local-store/` (next to the state
file, `$RESPOT_LOCAL_STATE`'s directory); `respot local up --forget` starts empty.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

STORE_VERSION = 1
MANIFEST = "manifest.json"
ITEMS = "items.jsonl"
OBJECTS = "objects"
CANCEL_WAIT_SECONDS = 30.0  # how long `save` waits for live jobs to end after its cancel
CANCEL_REASON = "cancelled: the local runtime stopped (respot local down)"


@dataclass
class StoreSummary:
    """What a save or a restore moved."""

    directory: Path
    jobs: int = 0
    objects: int = 0
    cancelled: list[str] = field(default_factory=list)  # live jobs ended by the save
    dropped: list[str] = field(default_factory=list)  # live jobs that did not end in time


def store_directory(state_file: Path) -> Path:
    """Where the runtime's data is kept between runs: next to its state file."""
    return state_file.parent / "local-store"


def saved_prefix(directory: Path) -> str | None:
    """The resource-name prefix of the saved runtime, if a store is there."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
    except (FileNotFoundError, ValueError):
        return None
    if manifest.get("version") != STORE_VERSION:
        return None
    prefix = manifest.get("prefix")
    return prefix if isinstance(prefix, str) else None


def forget(directory: Path) -> None:
    """Delete the store."""
    shutil.rmtree(directory, ignore_errors=True)


def _end_live_jobs(rt: Any, summary: StoreSummary) -> set[str]:
    """Cancel the live jobs through the control plane; the ids still live after the bound."""
    jobs = rt.control_plane().jobs
    live = set(jobs.live_job_ids())
    for job_id in sorted(live):
        try:
            rt.handle(job_id).cancel(CANCEL_REASON)
        except Exception:  # what cannot be cancelled is dropped, and named
            log.warning("could not cancel %s before saving", job_id, exc_info=True)
    deadline = time.monotonic() + CANCEL_WAIT_SECONDS
    pending = set(live)
    while pending and time.monotonic() < deadline:
        for job_id in sorted(pending):
            record = jobs.get(job_id)
            if record is None or record.state.is_terminal():
                pending.discard(job_id)
        if pending:
            time.sleep(0.2)
    summary.cancelled = sorted(live - pending)
    summary.dropped = sorted(pending)
    return pending


def save(rt: Any, directory: Path) -> StoreSummary:
    """Copy the runtime's jobs and objects to `directory` (replacing what was there)."""
    deployment = rt.sdk_deployment()
    summary = StoreSummary(directory)
    still_live = _end_live_jobs(rt, summary)
    ddb = rt.client("dynamodb")
    s3 = rt.client("s3")
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".local-store-", dir=directory.parent))
    try:
        items: list[dict[str, Any]] = []
        paginator = ddb.get_paginator("scan")
        for page in paginator.paginate(TableName=deployment.table_name):
            items.extend(page.get("Items", []))
        with (staging / ITEMS).open("w") as out:
            for item in items:
                if _belongs_to(item, still_live):
                    continue
                if item.get("sk", {}).get("S") == "JOB":
                    summary.jobs += 1
                out.write(json.dumps(item) + "\n")
        objects = staging / OBJECTS
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=deployment.bucket):
            for obj in page.get("Contents", []):
                key = obj["Key"]
                target = object_path(objects, key)
                if target is None:
                    log.warning("not saving %r: its key names no file inside the store", key)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                s3.download_file(deployment.bucket, key, str(target))
                summary.objects += 1
        (staging / MANIFEST).write_text(
            json.dumps(
                {
                    "version": STORE_VERSION,
                    "prefix": deployment.table_name.removesuffix("-jobs"),  # cloud.provision
                    "table": deployment.table_name,
                    "bucket": deployment.bucket,
                    "saved_at": datetime.now(UTC).isoformat(),
                    "jobs": summary.jobs,
                    "objects": summary.objects,
                    "dropped": summary.dropped,
                },
                indent=1,
            )
        )
        forget(directory)
        staging.rename(directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return summary


def object_path(objects: Path, key: str) -> Path | None:
    """Where the object `key` is kept under `objects`; None for a key that would name a file
    outside it (`..`, an absolute `/home/...`, which `objects / key` would take as is)."""
    parts = key.split("/")
    if not key or key.startswith("/") or ".." in parts or "" in parts[:-1] or not parts[-1]:
        return None
    target = objects / key
    root = objects.resolve()
    return target if target.resolve().is_relative_to(root) and target.resolve() != root else None


def _belongs_to(item: dict[str, Any], job_ids: set[str]) -> bool:
    """True for the record or an instance item of one of `job_ids`, and for the control
    plane's own switches (`CONTROL#...`: the pollers' activity marker), which describe this
    runtime's pollers, not the next one's."""
    pk = item.get("pk", {}).get("S", "")
    if pk.startswith("CONTROL#"):
        return True
    if pk.startswith("JOB#"):
        return pk.removeprefix("JOB#") in job_ids
    if pk.startswith("INSTANCE#"):
        return item.get("job_id", {}).get("S") in job_ids
    return False


def restore(rt: Any, directory: Path) -> StoreSummary | None:
    """Put a saved store back into a runtime started with its prefix; None if there is none."""
    deployment = rt.sdk_deployment()
    summary = StoreSummary(directory)
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
    except (FileNotFoundError, ValueError):
        return None
    if manifest.get("table") != deployment.table_name or manifest.get("bucket") != (
        deployment.bucket
    ):
        raise ValueError(
            f"the store in {directory} belongs to another runtime "
            f"({manifest.get('table')}, {manifest.get('bucket')}); start with --forget"
        )
    ddb = rt.client("dynamodb")
    s3 = rt.client("s3")
    with (directory / ITEMS).open() as lines:
        for line in lines:
            if not line.strip():
                continue
            item = json.loads(line)
            ddb.put_item(TableName=deployment.table_name, Item=item)
            if item.get("sk", {}).get("S") == "JOB":
                summary.jobs += 1
    objects = directory / OBJECTS
    if objects.is_dir():
        for path in sorted(p for p in objects.rglob("*") if p.is_file()):
            s3.upload_file(str(path), deployment.bucket, path.relative_to(objects).as_posix())
            summary.objects += 1
    return summary


__all__ = [
    "CANCEL_REASON",
    "StoreSummary",
    "forget",
    "restore",
    "save",
    "saved_prefix",
    "store_directory",
]
