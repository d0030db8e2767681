"""Whether the fresh markets' cells above round-robin are more than noise, window by window.

    python bench/placement/issue28/noise.py [--windows 8 32]     # about 9 min, two processes

The fresh markets' figures (12 markets x 4 cells, `fresh/run.sh`) are means over 8 windows a
cell, and the live policy (`respot`, `LiveView`) is above up-round-robin in 10 of the 48
cells, each by at most a third of one decision. Here both run on the same windows of each
cell and the difference of their normalized costs is taken window by window (paired): its
mean and its standard error (sample standard deviation / sqrt(n)). A cell counts as above
round-robin when the mean difference is positive, and as *clearly* above when it is more
than two standard errors above zero. With `--windows 32` the same cells are measured on 32
windows each (the 8 of the report among them when 32 is a multiple of 8: start k * spare //
n). The optimum is not needed (no gap closed here), so this is cheap. The cells are those of
each market's saved results (`fresh/results-*.jsonl`).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from pool_choice import fresh_markets  # this folder's script: the same twelve markets

from respot.policy.bench import Cell
from respot.policy.live_view import LiveView
from respot.policy.placement_bench import make_pools_policy
from respot.policy.pools import simulate_pools


def _cells(saved: Path) -> list[tuple[float, float]]:
    """The cells (D, d) of a market's saved results, in their order."""
    rows = [json.loads(line) for line in saved.read_text().splitlines()]
    return [(float(row["deadline_hours"]), float(row["changeover_hours"])) for row in rows]


def _cell(args: tuple[int, float, float, int]) -> str:
    index, deadline, changeover, windows = args
    label, market, _ = fresh_markets()[index]
    pool_set = market.pool_set()
    job = Cell(48, deadline, changeover).job
    size = job.window_ticks(pool_set.gap_seconds)
    diffs = []
    for start in pool_set.window_starts(size, windows):
        window = pool_set.window(start, size)
        costs = []
        for policy in (LiveView(), make_pools_policy("up-round-robin")):
            outcome = simulate_pools(policy, pool_set.pools, window, job, pool_set.gap_seconds)
            if outcome.missed:
                raise SystemExit(f"{label} {deadline:g}/{changeover:g}: a miss")
            costs.append(outcome.normalized_cost)
        diffs.append(costs[0] - costs[1])
    mean = statistics.fmean(diffs)
    error = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else math.inf
    verdict = "clearly above" if mean > 2 * error else ("above" if mean > 0 else "below")
    return (
        f"{label} {deadline:g} h / {changeover:g} h, {windows} windows: respot - RR "
        f"{mean:+.5f} (standard error {error:.5f}) {verdict}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--windows", nargs="+", type=int, default=[8, 32])
    args = parser.parse_args()
    markets = fresh_markets()
    jobs = [
        (index, deadline, changeover, windows)
        for windows in args.windows
        for index, (_, _, saved) in enumerate(markets)
        for deadline, changeover in _cells(saved)
    ]
    with ProcessPoolExecutor(max_workers=2) as pool:
        lines = list(pool.map(_cell, jobs))
    for line in lines:
        print(line)
    for windows in args.windows:
        ours = [line for line in lines if f", {windows} windows:" in line]
        above = sum(" above" in line for line in ours)
        clearly = sum("clearly above" in line for line in ours)
        print(
            f"{windows} windows: {above} of {len(ours)} cells above round-robin, "
            f"{clearly} more than two standard errors above"
        )


if __name__ == "__main__":
    main()
