"""What the account's shared sightings are worth to a job: a colleague's job started before.

    python bench/placement/issue28/shared.py [--sets aws-2022-10-26 ... synth-9 ... fresh]
        [--scenarios alone colleague beside since-start]

The figure of record (`respot` in `respot bench placement`) is a job alone in a new account:
it starts knowing nothing of any pool. Live, the account's sightings are shared
(`respot.core.pool_watch`: every job's launches, refusals, running instances and
interruptions). This reruns the live policy on the windows of the saved results with one
colleague: a job of the same cell ran the same live policy over the two days before the
window (fewer when the window starts earlier in the trace; none for the first window).
`colleague`: the new job is handed the colleague's sightings from those two days
(`LiveView(account=...)`), as the control plane did until 2026-11-27 (`HISTORY_TICKS`
one-minute ticks). `beside`: the same, and the colleague also goes on running its window
while the job runs; the job sees each of its sightings at the tick it is made
(`LiveView(beside=...)`; the colleague asks first within a tick and does not see the
job's: one direction only). `since-start`: only the colleague's sightings made from the
job's start on (`beside` without `account`), which is what the control plane hands a job
since 2026-11-27 (`pool_watch.view`'s `since`). One colleague's worth, not a busy team's.
Prints the mean gap closed per set against the saved up-round-robin and optimum, beside the
job alone (the same code with no account), and the cells above round-robin.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from information import SETS as DEV  # this folder's scripts: the same sets, the same markets
from pool_choice import fresh_markets

from respot.policy.bench import Cell
from respot.policy.live_view import LiveView
from respot.policy.pools import PoolSet, load_pool_set, simulate_pools
from respot.policy.synth import synth_market

HERE = Path(__file__).resolve().parent
# respot.core.pool_watch.HISTORY_TICKS (2,880) ticks of the live policy tick (one minute)
ACCOUNT_SECONDS = 2 * 86400
SWEEP = (1, 3, 9, 18, 27)


def _sets(names: Sequence[str]) -> Iterator[tuple[str, PoolSet, int, Path]]:
    """(label, pools, windows a cell, saved results) for each name; "fresh": all twelve."""
    for name in names:
        if name in DEV:
            paths, windows = DEV[name]
            yield name, load_pool_set(paths), windows, HERE / f"results-{name}.jsonl"
        elif name.startswith("synth-"):
            count = int(name.removeprefix("synth-"))  # as the sweep: seed = pool count
            pools = synth_market(count, pools=count).pool_set()
            yield name, pools, 8, HERE / f"results-{name}.jsonl"
        elif name == "fresh":  # as fresh/run.sh made them
            for label, market, saved in fresh_markets():
                yield label, market.pool_set(), 8, saved
        else:
            raise SystemExit(f"unknown set {name!r}: a development set, synth-K or fresh")


Account = list[list[int] | None]
Beside = Mapping[int, Sequence[tuple[int, int]]]
SCENARIOS = ("alone", "colleague", "beside", "since-start")


def colleague(pool_set: PoolSet, cell: Cell, start: int) -> tuple[Account, Beside] | None:
    """A job of `cell` that started live two days (at most) before tick `start`.

    Its sightings before `start` (the account a job starting then is handed), and the ones
    it makes from `start` on, by the later job's tick (what that job sees beside it).
    """
    gap = pool_set.gap_seconds
    before = min(start, ACCOUNT_SECONDS // gap)
    if before == 0:
        return None
    job = cell.job
    size = job.window_ticks(gap)
    earlier = LiveView()
    simulate_pools(earlier, pool_set.pools, pool_set.window(start - before, size), job, gap)
    beside: dict[int, list[tuple[int, int]]] = {}
    for tick, pool, value in earlier.made:
        if tick >= before:
            beside.setdefault(tick - before, []).append((pool, value))
    return earlier.sightings(before), beside


def _live(scenario: str, shared: tuple[Account, Beside] | None) -> LiveView:
    if shared is None or scenario == "alone":
        return LiveView()
    account, beside = shared
    if scenario == "since-start":  # the account's sightings from the job's start on only
        return LiveView(beside=beside)
    return LiveView(account=account, beside=beside if scenario == "beside" else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--sets", nargs="+", default=[*DEV, *(f"synth-{k}" for k in SWEEP), "fresh"]
    )
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=SCENARIOS)
    args = parser.parse_args()
    scenarios = tuple(args.scenarios)
    pooled: dict[str, list[float]] = {name: [] for name in scenarios}
    above = dict.fromkeys(scenarios, 0)
    for label, pool_set, windows, saved_path in _sets(args.sets):
        closed: dict[str, list[float]] = {name: [] for name in scenarios}
        for line in saved_path.read_text().splitlines():
            row = json.loads(line)
            cell = Cell(48, float(row["deadline_hours"]), float(row["changeover_hours"]))
            base = row["results"]
            rr, opt = base["up-round-robin"]["mean"], base["omniscient"]["mean"]
            job = cell.job
            size = job.window_ticks(pool_set.gap_seconds)
            costs: dict[str, list[float]] = {name: [] for name in scenarios}
            for start in pool_set.window_starts(size, windows):
                window = pool_set.window(start, size)
                shared = colleague(pool_set, cell, start)
                for name in scenarios:
                    outcome = simulate_pools(
                        _live(name, shared), pool_set.pools, window, job, pool_set.gap_seconds
                    )
                    if outcome.missed:
                        raise SystemExit(f"{label} {cell}: {name} missed the deadline")
                    costs[name].append(outcome.normalized_cost)
            for name, values in costs.items():
                mean = statistics.fmean(values)
                closed[name].append((rr - mean) / (rr - opt))
                if mean > rr:
                    above[name] += 1
                    print(
                        f"{label} {cell.deadline_hours:g} h / {cell.changeover_hours:g} h: "
                        f"{name} {mean:.4f} above round-robin {rr:.4f}"
                    )
        for name, values in closed.items():
            print(
                f"{label} {name:10s} gap closed {100 * statistics.fmean(values):.1f}%", flush=True
            )
            if label.startswith("fresh"):
                pooled[name].extend(values)
    for name, values in pooled.items():
        if values:
            print(
                f"fresh ({len(values)} cells) {name:10s} gap closed "
                f"{100 * statistics.fmean(values):.1f}%"
            )
    print("cells above round-robin: " + ", ".join(f"{k} {v}" for k, v in above.items()))


if __name__ == "__main__":
    main()
