"""Issue 28's planner against the live policy, paired on the same windows of one set.

    python bench/placement/issue28/compare.py --set NAME --traces PATH... --windows N \
        --saved results-NAME.jsonl [--deadline-hours 52 60 70] [--changeover-hours 0.05 0.2] \
        [--policies respot respot-planned-replace ...] [--out FILE.jsonl]

Runs each policy (names of `respot.policy.placement_bench.make_pools_policy`) on every
window of every cell (C = 48 h; window starts as `respot bench placement` draws them), and
prints per cell each policy's mean / p75 / misses, its saving against up-round-robin and the
gap closed to the optimum, up-round-robin and the optimum read from the saved results of
the same set and windows (`--saved`, rendered by `bench/placement/report.py`). `--out`
writes one JSON line per cell and policy.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from respot.policy.bench import Cell
from respot.policy.placement_bench import evaluate
from respot.policy.pools import load_pool_set


def _p75(values: list[float]) -> float:
    """The 75th percentile as the benchmark reports it (numpy's default: linear)."""
    return float(np.percentile(values, 75))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--set", required=True)
    parser.add_argument("--traces", nargs="+", type=Path, required=True)
    parser.add_argument("--windows", type=int, required=True)
    parser.add_argument("--saved", type=Path, required=True)
    parser.add_argument("--deadline-hours", nargs="+", type=float, default=[52, 60, 70])
    parser.add_argument("--changeover-hours", nargs="+", type=float, default=[0.05, 0.2])
    parser.add_argument("--policies", nargs="+", default=["respot", "respot-planned-replace"])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    pool_set = load_pool_set(args.traces)
    saved = {}
    for line in args.saved.read_text().splitlines():
        row = json.loads(line)
        saved[(row["deadline_hours"], row["changeover_hours"])] = row["results"]
    lines = []
    closed: dict[str, list[float]] = {p: [] for p in args.policies}
    for deadline in args.deadline_hours:
        for changeover in args.changeover_hours:
            cell = Cell(48, deadline, changeover)
            size = cell.job.window_ticks(pool_set.gap_seconds)
            starts = pool_set.window_starts(size, args.windows)
            base = saved[(deadline if deadline % 1 else int(deadline), changeover)]
            rr, opt = base["up-round-robin"]["mean"], base["omniscient"]["mean"]
            for policy in args.policies:
                began = time.process_time()
                costs, misses = evaluate(pool_set, cell, starts, policy)
                mean = statistics.fmean(costs)
                gap = (rr - mean) / (rr - opt) if rr > opt else 0.0
                closed[policy].append(gap)
                row = {
                    "set": args.set,
                    "deadline_hours": deadline,
                    "changeover_hours": changeover,
                    "policy": policy,
                    "windows": len(costs),
                    "mean": mean,
                    "p75": _p75(costs),
                    "misses": misses,
                    "up-round-robin": rr,
                    "omniscient": opt,
                    "saving": (rr - mean) / rr,
                    "gap_closed": gap,
                    "costs": costs,
                }
                lines.append(row)
                print(
                    f"{args.set} {deadline:g} h {changeover:g} h {policy:24s} "
                    f"{mean:.4f} / {_p75(costs):.4f} / {misses}  RR {rr:.4f} opt {opt:.4f}  "
                    f"saving {100 * row['saving']:6.2f}%  gap closed {100 * gap:6.1f}%  "
                    f"({time.process_time() - began:.0f} s)",
                    flush=True,
                )
    for policy, gaps in closed.items():
        print(f"{args.set} {policy:24s} mean gap closed {100 * statistics.fmean(gaps):.1f}%")
    if args.out:
        args.out.write_text("".join(json.dumps(row) + "\n" for row in lines))


if __name__ == "__main__":
    main()
