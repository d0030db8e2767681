"""`respot pull` against `aws s3 cp`: a 1 GiB job output downloaded from one endpoint.

    .venv/bin/python -m bench.pull [--size-mib 1024] [--files 1] [--runs 3] [--aws-defaults]

One moto server on 127.0.0.1 holds a job whose output is one file of `--size-mib` (random
bytes), uploaded by the agent's own `respot.storage.outputs.upload_outputs` (so its outputs manifest
records the SHA-256). Each run downloads it twice, once per tool, into an empty directory;
the order alternates between runs (respot first in odd runs, the AWS CLI first in even ones)
so neither tool always gets the warmer page cache or the quieter moment. Both tools run as a
new process, timed on the wall clock from start to exit:

- respot: `python -m bench.pull --child ...`, which calls `respot.client.pull.pull_outputs`, the
  code `respot pull` runs (read the manifest, parallel ranged GETs of 16 MiB parts, 10 at a
  time, then SHA-256 of the file against the manifest, then rename into place). Not included:
  reading the job record from DynamoDB and downloading the logs, which `respot pull` also does
  (two small requests locally).
- AWS CLI: `aws s3 cp s3://.../weights.bin DIR/` (awscli from PyPI, pinned in
  requirements.txt), configured with respot's transfer settings (64 MiB multipart
  threshold, 16 MiB parts, 10 requests at a time) so that both tools send the same 64 ranged
  GETs; `--aws-defaults` leaves the CLI at its own (8 MiB parts: 128 GETs). It checks no
  SHA-256 of what it downloads.
Why the same parts: moto (5.2) answers every ranged GET by copying the whole object under a
lock (`FakeKey.value`), so on this endpoint a download's time grows with its number of parts
times the object's size, which S3 does not do; equal request patterns compare the tools, not
moto. Both tools wait up to 900 s for a response (their default is 60 s, after which
they retry, and under load give up). Reported: per tool, the median and the spread (min-max)
of seconds and MB/s.
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

MIB = 2**20
# Both tools wait this long for a response (the defaults are 60 s): on a loaded machine moto
# can take minutes to answer one ranged GET of a large object (see above).
READ_TIMEOUT_SECONDS = 900
BUCKET = "bench-pull"
JOB = "bench-pull-job"
NAME = "weights.bin"


def names(files: int) -> list[str]:
    """The output's file names: weights.bin, or weights-00001.bin ... for several."""
    return [NAME] if files == 1 else [f"weights-{i:05d}.bin" for i in range(1, files + 1)]


def write_output(root: Path, size_bytes: int, files: int = 1) -> None:
    """`files` files of random bytes (incompressible), `size_bytes` in all."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    for name in names(files):
        with (root / name).open("wb") as out:
            left = size_bytes // files
            while left:
                chunk = min(left, 64 * MIB)
                out.write(rng.integers(0, 256, chunk, dtype=np.uint8).tobytes())
                left -= chunk


def child(endpoint: str, dest: Path) -> int:
    """The respot side of one run, in its own process: what `respot pull` does for outputs."""
    from botocore.config import Config

    from respot.client.pull import pull_outputs

    s3 = cloud.session().client(
        "s3", endpoint_url=endpoint, config=Config(read_timeout=READ_TIMEOUT_SECONDS)
    )
    manifest, files = pull_outputs(s3, BUCKET, JOB, dest)
    assert manifest is not None and all(f.verified for f in files), "not verified"
    return 0


def run_respot(endpoint: str, dest: Path) -> None:
    """`python -m bench.pull --child` with fake credentials."""
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    subprocess.run(
        [sys.executable, "-m", "bench.pull", "--child", endpoint, str(dest)],
        check=True,
        env=env,
        cwd=Path(__file__).resolve().parents[1],
    )


AWS_CONFIG_LIKE_RESPOT = """[default]
s3 =
  multipart_threshold = 64MB
  multipart_chunksize = 16MB
  max_concurrent_requests = 10
"""


def run_aws(endpoint: str, uri: str, dest: Path, config_file: str) -> None:
    """`aws s3 cp URI DEST/` with fake credentials and the given config file."""
    exe = Path(sys.executable).with_name("aws")
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": config_file,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }
    subprocess.run(
        [
            str(exe),
            "--endpoint-url",
            endpoint,
            "--cli-read-timeout",
            str(READ_TIMEOUT_SECONDS),
            "s3",
            "cp",
            *(["--recursive"] if uri.endswith("/") else []),
            uri,
            str(dest) + "/",
            "--only-show-errors",
        ],
        check=True,
        env=env,
    )


def timed(action: Any) -> float:
    """Seconds `action()` takes."""
    t0 = time.perf_counter()
    action()
    return time.perf_counter() - t0


def run(
    size_mib: int, runs: int, scratch: Path, aws_defaults: bool, files: int = 1
) -> list[dict[str, Any]]:
    """`runs` rounds, each tool once per round, the order alternating."""
    from respot.storage import layout
    from respot.storage.checkpoints import file_sha256
    from respot.storage.outputs import upload_outputs

    server = cloud.MotoServer()
    endpoint = server.start()
    rows: list[dict[str, Any]] = []
    try:
        # Setting up only: on a loaded machine moto can take minutes to complete a 1 GiB
        # multipart upload, and a retried CompleteMultipartUpload fails (the upload is gone).
        from botocore.config import Config

        s3 = cloud.session().client(
            "s3",
            endpoint_url=endpoint,
            config=Config(read_timeout=1800, retries={"max_attempts": 1}),
        )
        s3.create_bucket(Bucket=BUCKET)
        size = size_mib * MIB
        src = scratch / "output"
        write_output(src, size, files)
        size = sum(p.stat().st_size for p in src.iterdir())
        expected = {n: file_sha256(src / n) for n in names(files)}
        upload_outputs(s3, src, bucket=BUCKET, job_id=JOB, attempt=1, outcome="completed")
        shutil.rmtree(src)
        prefix = f"s3://{BUCKET}/{layout.outputs_prefix(JOB)}"
        uri = prefix + NAME if files == 1 else prefix
        config = scratch / "aws-config"
        config.write_text(AWS_CONFIG_LIKE_RESPOT)
        config_file = os.devnull if aws_defaults else str(config)

        def respot_once(dest: Path) -> float:
            seconds = timed(lambda: run_respot(endpoint, dest))
            assert {n: file_sha256(dest / n) for n in expected} == expected
            return seconds

        def aws_once(dest: Path) -> float:
            seconds = timed(lambda: run_aws(endpoint, uri, dest, config_file))
            assert sum(p.stat().st_size for p in dest.iterdir()) == size
            return seconds

        tools = [("respot pull", respot_once), ("aws s3 cp", aws_once)]
        for i in range(runs):
            order = tools if i % 2 == 0 else list(reversed(tools))
            for tool, once in order:
                dest = scratch / f"dest-{i}-{tool.split()[0]}"
                seconds = once(dest)
                shutil.rmtree(dest, ignore_errors=True)
                rows.append(
                    {
                        "run": i + 1,
                        "tool": tool,
                        "seconds": round(seconds, 3),
                        "mb_per_s": round(size / 1e6 / seconds, 1),
                    }
                )
                print(f"run {i + 1} {tool:<12} {seconds:7.2f}s", flush=True)
    finally:
        server.stop()
    return rows


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Median and spread per tool."""
    out: dict[str, dict[str, float | None]] = {}
    for tool in dict.fromkeys(r["tool"] for r in rows):
        secs = [r["seconds"] for r in rows if r["tool"] == tool]
        mbs = [r["mb_per_s"] for r in rows if r["tool"] == tool]
        out[tool] = {
            "runs": len(secs),
            "median_s": _report.percentile(secs, 50),
            "min_s": min(secs),
            "max_s": max(secs),
            "median_mb_per_s": _report.percentile(mbs, 50),
            "min_mb_per_s": min(mbs),
            "max_mb_per_s": max(mbs),
        }
    return out


def markdown(rows: list[dict[str, Any]], size_mib: int, aws_defaults: bool, files: int = 1) -> str:
    """The results as markdown."""
    stats = summarize(rows)
    parts = "its default settings" if aws_defaults else "respot's part size and concurrency"
    return (
        f"A {size_mib} MiB output in {files} file(s), one moto server on 127.0.0.1, "
        "each tool a new process, "
        f"{len(rows) // 2} runs in alternating order; the AWS CLI at {parts}.\n\n"
        + _report.table(
            ["tool", "runs", "median s", "min-max s", "median MB/s", "min-max MB/s"],
            [
                [
                    tool,
                    s["runs"],
                    round(s["median_s"] or 0, 2),
                    f"{s['min_s']:.2f}-{s['max_s']:.2f}",
                    round(s["median_mb_per_s"] or 0, 1),
                    f"{s['min_mb_per_s']:.1f}-{s['max_mb_per_s']:.1f}",
                ]
                for tool, s in stats.items()
            ],
        )
        + "\n\nrespot's time includes the SHA-256 check of the file against the outputs "
        "manifest; the AWS CLI checks none.\n"
    )


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--aws-defaults", action="store_true")
    parser.add_argument("--files", type=int, default=1, help="the output in this many files")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--child", nargs=2, metavar=("ENDPOINT", "DEST"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child[0], Path(args.child[1]))
    scratch = Path(tempfile.mkdtemp(prefix="respot-bench-pull-"))
    try:
        rows = run(args.size_mib, args.runs, scratch, args.aws_defaults, args.files)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    payload = {
        "size_mib": args.size_mib,
        "files": args.files,
        "aws_defaults": args.aws_defaults,
        "rows": rows,
        "summary": summarize(rows),
    }
    md = markdown(rows, args.size_mib, args.aws_defaults, args.files)
    if not args.no_write:
        command = "python -m bench.pull " + " ".join(argv or sys.argv[1:])
        name = "pull-aws-defaults" if args.aws_defaults else "pull"
        name += f"-{args.size_mib}mib" + (f"-{args.files}files" if args.files > 1 else "")
        _report.write(name, payload, md, command=command)
    print(json.dumps(payload, indent=1) if args.json else md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
