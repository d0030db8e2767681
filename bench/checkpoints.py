"""Checkpoint upload and restore: respot's CheckpointStore against the AWS CLI, same endpoint.

    .venv/bin/python -m bench.checkpoints [--size-mib 1024] [--json]

A checkpoint directory of `--size-mib` (default 1 GiB) in several files (two model shards of
a quarter each, the optimizer state of a quarter, four 1/16 shards) is written once, then
moved by each tool in turn against one moto server on 127.0.0.1:

- full upload: respot `CheckpointStore.upload` (hash, HeadObject the blobs, parallel
  multipart PUTs, manifest last); `aws s3 cp --recursive`; `aws s3 sync` (the AWS CLI from
  PyPI, pinned in requirements.txt, at its default settings: 10 requests at once, 8 MiB parts);
- incremental, one file changed in place (others untouched: `sync`'s best case);
- incremental, every file rewritten by the training code, one with new content (what
  `torch.save` of every shard does each time: new mtime for all, new bytes for one);
- restore into an empty directory: respot `CheckpointStore.restore` (download, check size and
  SHA-256 of every file), `aws s3 cp --recursive`, `aws s3 sync`.
Each step is timed on the wall clock; MB/s is the checkpoint's size over that time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench import _report
from infra.local import cloud
from respot.checkpoints import CheckpointStore

MIB = 2**20
# Fractions of the checkpoint: two model shards, the optimizer, four small shards.
LAYOUT = (
    ("model-00001.bin", 0.25),
    ("model-00002.bin", 0.25),
    ("optimizer.bin", 0.25),
    ("extra-00001.bin", 1 / 16),
    ("extra-00002.bin", 1 / 16),
    ("extra-00003.bin", 1 / 16),
    ("extra-00004.bin", 1 / 16),
)
CHANGED = "extra-00004.bin"


def write_checkpoint(root: Path, size_bytes: int, seed: int) -> None:
    """Write the files of LAYOUT, random content from `seed`."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for name, share in LAYOUT:
        n = int(size_bytes * share)
        path = root / name
        with path.open("wb") as out:
            left = n
            while left:
                chunk = min(left, 64 * MIB)
                out.write(rng.integers(0, 256, chunk, dtype=np.uint8).tobytes())
                left -= chunk


def change_one_in_place(root: Path, seed: int) -> None:
    """New content for CHANGED only (same size); the other files are untouched."""
    path = root / CHANGED
    size = path.stat().st_size
    rng = np.random.default_rng(seed)
    path.write_bytes(rng.integers(0, 256, size, dtype=np.uint8).tobytes())


def rewrite_all_change_one(root: Path, seed: int) -> None:
    """Every file written again (temp name, then rename: new inode and mtime); CHANGED gets
    new content, the others the same bytes."""
    for name, _ in LAYOUT:
        path = root / name
        data = path.read_bytes()
        if name == CHANGED:
            rng = np.random.default_rng(seed)
            data = rng.integers(0, 256, len(data), dtype=np.uint8).tobytes()
        tmp = root / (name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    time.sleep(1.1)  # mtimes differ at second resolution for `sync`


def aws(endpoint: str, *args: str) -> None:
    """Run the AWS CLI of this environment against the endpoint."""
    exe = Path(sys.executable).with_name("aws")
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }
    subprocess.run(
        [str(exe), "--endpoint-url", endpoint, "s3", *args, "--only-show-errors"],
        check=True,
        env=env,
    )


def timed(action: Any) -> float:
    """Seconds `action()` takes."""
    t0 = time.perf_counter()
    action()
    return time.perf_counter() - t0


def dir_bytes(root: Path) -> int:
    """Total size of the files under `root`."""
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def run(size_mib: int, scratch: Path) -> list[dict[str, Any]]:
    """Every scenario, every tool; one row per (scenario, tool)."""
    server = cloud.MotoServer()
    endpoint = server.start()
    rows: list[dict[str, Any]] = []
    try:
        s3 = cloud.client("s3", endpoint)
        bucket = "bench-checkpoints"
        s3.create_bucket(Bucket=bucket)
        size = size_mib * MIB
        src = scratch / "ckpt"
        write_checkpoint(src, size, seed=1)
        total = dir_bytes(src)
        store = CheckpointStore(bucket=bucket, job_id="bench", client=s3)

        def add(scenario: str, tool: str, seconds: float, sent: int | None = None) -> None:
            rows.append(
                {
                    "scenario": scenario,
                    "tool": tool,
                    "seconds": round(seconds, 3),
                    "mb_per_s": round(total / 1e6 / seconds, 1),
                    "bytes_sent": sent,
                }
            )
            print(f"{scenario:<28} {tool:<22} {seconds:7.2f}s", flush=True)

        def respot_upload(scenario: str, step: int) -> None:
            # A new process's store: nothing cached but what a running agent would know.
            result: dict[str, Any] = {}

            def go() -> None:
                result["r"] = store.upload(src, step=step, attempt=1, reason="periodic")

            seconds = timed(go)
            add(scenario, "respot", seconds, result["r"].uploaded_bytes)

        # 1. full upload
        respot_upload("full upload", 100)
        add(
            "full upload",
            "aws s3 cp --recursive",
            timed(lambda: aws(endpoint, "cp", "--recursive", str(src), f"s3://{bucket}/cp/")),
        )
        add(
            "full upload",
            "aws s3 sync",
            timed(lambda: aws(endpoint, "sync", str(src), f"s3://{bucket}/sync/")),
        )
        # 2. one file changed in place
        change_one_in_place(src, seed=2)
        time.sleep(1.1)
        respot_upload("one file changed", 200)
        add(
            "one file changed",
            "aws s3 cp --recursive",
            timed(lambda: aws(endpoint, "cp", "--recursive", str(src), f"s3://{bucket}/cp/")),
        )
        add(
            "one file changed",
            "aws s3 sync",
            timed(lambda: aws(endpoint, "sync", str(src), f"s3://{bucket}/sync/")),
        )
        # 3. every file rewritten, one with new content
        rewrite_all_change_one(src, seed=3)
        respot_upload("all rewritten, one changed", 300)
        add(
            "all rewritten, one changed",
            "aws s3 cp --recursive",
            timed(lambda: aws(endpoint, "cp", "--recursive", str(src), f"s3://{bucket}/cp/")),
        )
        add(
            "all rewritten, one changed",
            "aws s3 sync",
            timed(lambda: aws(endpoint, "sync", str(src), f"s3://{bucket}/sync/")),
        )
        # 4. restore into an empty directory (a new instance)
        fresh = CheckpointStore(bucket=bucket, job_id="bench", client=s3)
        dest = scratch / "restore-respot"
        add("restore", "respot (verified)", timed(lambda: fresh.restore(dest)))
        assert dir_bytes(dest) == total
        for tool, verb in (("aws s3 cp --recursive", "cp"), ("aws s3 sync", "sync")):
            out = scratch / f"restore-{verb}"
            prefix = "cp" if verb == "cp" else "sync"
            args = (verb, "--recursive") if verb == "cp" else (verb,)
            add(
                "restore",
                tool,
                timed(
                    lambda a=args, o=out, p=prefix: aws(endpoint, *a, f"s3://{bucket}/{p}/", str(o))
                ),
            )
            assert dir_bytes(out) == total
            shutil.rmtree(out, ignore_errors=True)
    finally:
        server.stop()
    return rows


def markdown(rows: list[dict[str, Any]], size_mib: int) -> str:
    """The results as markdown."""
    return (
        f"A {size_mib} MiB checkpoint in {len(LAYOUT)} files, one moto server on 127.0.0.1, "
        "tools one after another.\n\n"
        + _report.table(
            ["scenario", "tool", "seconds", "MB/s (checkpoint size / time)", "bytes sent"],
            [
                [r["scenario"], r["tool"], r["seconds"], r["mb_per_s"], r["bytes_sent"]]
                for r in rows
            ],
        )
    )


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="respot-bench-ckpt-"))
    try:
        rows = run(args.size_mib, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    payload = {"size_mib": args.size_mib, "files": [n for n, _ in LAYOUT], "rows": rows}
    md = markdown(rows, args.size_mib)
    if not args.no_write:
        command = "python -m bench.checkpoints " + " ".join(argv or sys.argv[1:])
        _report.write("checkpoints", payload, md, command=command)
    print(json.dumps(payload, indent=1) if args.json else md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
