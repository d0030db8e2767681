"""Cold start of every Lambda handler: import time, first control plane, and the bundle's size.

    .venv/bin/python -m bench.coldstart [--repeat 5] [--json]

For each function of WIRING, in a fresh interpreter each time (`python -X importtime`):
- import time of its handler module (the cumulative time of the module's own line), and the
  heaviest top-level imports under it;
- the first call's extra work: building the control plane (boto3 and its four clients) from
  a Lambda-like environment (no request is sent);
and the Lambda asset: built the way the stack builds it (`infra.bundling`: the handlers'
third-party packages fetched for the Lambda platform, next to `sdk/respot` and `lambdas/`),
measured unzipped and zipped.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from bench import _report
from infra.wiring import WIRING

REPO = Path(__file__).resolve().parents[1]
_LINE = re.compile(r"^import time:\s+(\d+)\s+\|\s+(\d+)\s+\|(\s*)(\S+)$")

FIRST_CALL = """
import time
t0 = time.perf_counter()
import {module}
t1 = time.perf_counter()
from lambdas._runtime import control_plane
control_plane()
t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""

LAMBDA_ENV = {
    "RESPOT_TABLE": "respot-jobs",
    "RESPOT_BUCKET": "respot-artifacts",
    "RESPOT_LAUNCH_TEMPLATE_ID": "lt-0123456789abcdef0",
    "RESPOT_SUBNETS": '[{"subnet_id": "subnet-1", "availability_zone": "us-east-1a"}]',
    "RESPOT_INSTANCE_TYPES": "g5.xlarge",
    "RESPOT_AGENT_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/agent-events",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
}


# Subtrees worth watching in a handler's import (cumulative seconds, first time imported).
WATCHED = (
    "pydantic",
    "respot.spec.training",
    "respot.core",
    "respot.client.handle",
    "aws_lambda_powertools.logging",
    "aws_lambda_powertools.utilities.batch",
    "boto3",
    "botocore",
)


def import_profile(module: str) -> tuple[float, list[tuple[str, float]]]:
    """(seconds to import `module`, [(watched subtree, seconds)] heaviest first)."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    total = 0.0
    watched: dict[str, float] = {}
    for m in (_LINE.match(x) for x in proc.stderr.splitlines()):
        if m is None:
            continue
        name, cumulative = m.group(4), int(m.group(2)) / 1e6
        if name == module:
            total = cumulative
        if name in WATCHED and name not in watched:
            watched[name] = cumulative
    heavy = sorted(watched.items(), key=lambda kv: kv[1], reverse=True)
    return total, heavy


def first_call(module: str) -> tuple[float, float]:
    """(import seconds, control plane build seconds), wall clock, in a fresh interpreter."""
    env = {**os.environ, **LAMBDA_ENV}
    proc = subprocess.run(
        [sys.executable, "-c", FIRST_CALL.format(module=module)],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env=env,
    )
    a, b = proc.stdout.split()[-2:]
    return float(a), float(b)


def _tree_bytes(root: Path) -> tuple[int, int]:
    files = [p for p in root.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), len(files)


def build_bundle(out: Path) -> str:
    """Build the Lambda asset into `out` the way infra/bundling.py does; returns the recipe."""
    from infra import bundling

    deps = bundling.third_party(
        bundling.pinned(bundling.LAMBDA_REQUIREMENTS),
        platform=bundling.LAMBDA_PLATFORM,
        python=bundling.LAMBDA_PYTHON,
    )
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(deps, out, dirs_exist_ok=True)
    shutil.copytree(REPO / "sdk" / "respot", out / "respot", ignore=ignore)
    shutil.copytree(REPO / "lambdas", out / "lambdas", ignore=ignore)
    return (
        f"infra.bundling: {', '.join(bundling.LAMBDA_REQUIREMENTS)} for "
        f"{bundling.LAMBDA_PLATFORM} / Python {bundling.LAMBDA_PYTHON}, + sdk/respot + lambdas"
    )


def bundle_size() -> dict[str, Any]:
    """Unzipped and zipped size of the Lambda asset, and its biggest top-level entries."""
    work = Path(tempfile.mkdtemp(prefix="respot-bundle-"))
    try:
        out = work / "asset"
        out.mkdir()
        how = build_bundle(out)
        unzipped, count = _tree_bytes(out)
        archive = work / "asset.zip"
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
            for p in sorted(out.rglob("*")):
                if p.is_file():
                    z.write(p, p.relative_to(out).as_posix())
        biggest = sorted(
            (
                (p.name, _tree_bytes(p)[0] if p.is_dir() else p.stat().st_size)
                for p in out.iterdir()
            ),
            key=lambda kv: kv[1],
            reverse=True,
        )[:8]
        return {
            "built_with": how,
            "unzipped_bytes": unzipped,
            "files": count,
            "zipped_bytes": archive.stat().st_size,
            "biggest": [{"name": n, "bytes": b} for n, b in biggest],
            "lambda_limits": {"zipped_bytes": 50 * 2**20, "unzipped_bytes": 250 * 2**20},
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-bundle", action="store_true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--name", default="coldstart", help="results file name")
    args = parser.parse_args(argv)
    rows = []
    for fn in WIRING.functions:
        imports = sorted(
            (import_profile(fn.module) for _ in range(args.repeat)), key=lambda i: i[0]
        )
        calls = [first_call(fn.module) for _ in range(args.repeat)]
        rows.append(
            {
                "function": fn.name,
                "module": fn.module,
                "memory_mb": fn.memory_mb,
                "import_seconds": round(imports[len(imports) // 2][0], 4),
                "import_wall_seconds": round(statistics.median(c[0] for c in calls), 4),
                "control_plane_seconds": round(statistics.median(c[1] for c in calls), 4),
                "heaviest_imports": [
                    {"module": m, "seconds": round(s, 4)} for m, s in imports[len(imports) // 2][1]
                ],
            }
        )
        print(f"{fn.module}: import {rows[-1]['import_seconds']:.3f}s", flush=True)
    payload: dict[str, Any] = {"repeat": args.repeat, "handlers": rows}
    if not args.no_bundle:
        payload["bundle"] = bundle_size()
    md = markdown(payload)
    if not args.no_write:
        command = "python -m bench.coldstart " + " ".join(argv or sys.argv[1:])
        _report.write(args.name, payload, md, command=command)
    print(json.dumps(payload, indent=1) if args.json else md)
    return 0


def markdown(p: dict[str, Any]) -> str:
    """The results as markdown."""
    table = _report.table(
        [
            "function",
            "import (s, -X importtime)",
            "import (s, wall)",
            "first control plane (s)",
            "what it imports (cumulative s)",
        ],
        [
            [
                r["function"],
                r["import_seconds"],
                r["import_wall_seconds"],
                r["control_plane_seconds"],
                ", ".join(f"{h['module']} {h['seconds']:.3f}" for h in r["heaviest_imports"]),
            ]
            for r in p["handlers"]
        ],
    )
    out = [f"Median of {p['repeat']} fresh interpreters per handler.", "", table]
    if "bundle" in p:
        b = p["bundle"]
        out += [
            "",
            f"Lambda asset ({b['built_with']}): {b['unzipped_bytes'] / 2**20:.1f} MiB unzipped in "
            f"{b['files']} files, {b['zipped_bytes'] / 2**20:.1f} MiB zipped (limits: 50 MiB "
            "zipped upload, 250 MiB unzipped). Biggest entries: "
            + ", ".join(f"{x['name']} {x['bytes'] / 2**20:.1f} MiB" for x in b["biggest"]),
        ]
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
