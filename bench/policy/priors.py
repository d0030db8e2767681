"""How much respot's results depend on its priors (bench/policy/README.md, "Priors").

    python bench/policy/priors.py --traces DIR [--windows 100] [--json]

Runs Uniform Progress and respot with each prior scaled down and up (one at a time) on
the six cells of record, and prints respot's mean normalized cost and its saving over
Uniform Progress per variant. Uses the benchmark's rules and windows (respot.policy).
"""

from __future__ import annotations

import argparse
import json
import statistics
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

from respot.policy import RespotParameters, RespotPolicy, UniformProgressPolicy, simulate
from respot.policy.bench import Cell
from respot.policy.model import Trace, load_traces

CELLS = [Cell(48, deadline, change) for deadline in (52, 60, 70) for change in (0.05, 0.2)]
BASE = RespotParameters()
VARIANTS: dict[str, RespotParameters] = {
    "as shipped": BASE,
    "availability prior 0.25": replace(BASE, availability_prior=0.25),
    "availability prior 0.75": replace(BASE, availability_prior=0.75),
    "availability weight 30 min": replace(BASE, availability_prior_seconds=1800),
    "availability weight 8 h": replace(BASE, availability_prior_seconds=8 * 3600),
    "Lindy weight 0.3 runs": replace(BASE, lindy_prior_runs=0.3),
    "Lindy weight 3 runs": replace(BASE, lindy_prior_runs=3.0),
    "cycle prior 0.3 cycles": replace(BASE, cycle_prior_runs=0.3),
    "cycle prior 3 cycles": replace(BASE, cycle_prior_runs=3.0),
}


def _run(args: tuple[Trace, Cell, int, str]) -> tuple[Cell, str, list[float]]:
    trace, cell, windows, variant = args
    job = cell.job
    size = job.window_ticks(trace.gap_seconds)
    costs = []
    for start in trace.window_starts(size, windows):
        span = trace.window(start, size)
        if variant == "uniform-progress":
            policy: UniformProgressPolicy | RespotPolicy = UniformProgressPolicy()
        else:
            policy = RespotPolicy(VARIANTS[variant])
        outcome = simulate(policy, span, job, trace.gap_seconds)
        if outcome.missed:
            raise AssertionError(f"{variant} missed a deadline on {trace.name}")
        costs.append(outcome.normalized_cost)
    return cell, variant, costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, required=True)
    parser.add_argument("--windows", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    traces = load_traces(args.traces)
    names = ["uniform-progress", *VARIANTS]
    tasks = [(t, c, args.windows, v) for v in names for c in CELLS for t in traces]
    costs: dict[tuple[Cell, str], list[float]] = {}
    with ProcessPoolExecutor() as pool:
        for cell, variant, values in pool.map(_run, tasks):
            costs.setdefault((cell, variant), []).extend(values)
    rows = []
    for variant in VARIANTS:
        means = [statistics.fmean(costs[(c, variant)]) for c in CELLS]
        up = [statistics.fmean(costs[(c, "uniform-progress")]) for c in CELLS]
        savings = [(u - m) / u for u, m in zip(up, means, strict=True)]
        rows.append({"variant": variant, "means": means, "savings_vs_up": savings})
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return
    header = " | ".join(f"{c.deadline_hours:g}/{c.changeover_hours:g}" for c in CELLS)
    print(f"| respot variant | {header} | mean saving vs UP |")
    print("|---" * (len(CELLS) + 2) + "|")
    for row in rows:
        cells = " | ".join(
            f"{m:.4f} ({s:+.1%})" for m, s in zip(row["means"], row["savings_vs_up"], strict=True)
        )
        print(f"| {row['variant']} | {cells} | {statistics.fmean(row['savings_vs_up']):.2%} |")


if __name__ == "__main__":
    main()
