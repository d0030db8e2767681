"""What the live policy would gain from seeing the pools it does not ask, phase by phase.

    python bench/placement/issue28/information.py [--sets aws-2022-10-26 ...]

The live policy (`LiveView(MultiPoolPolicy())`) knows a pool only from its own sightings.
This reruns it on every cell of the development sets with the true availability of every
pool added to its sightings in one phase of the job: while it holds on-demand (`od`), while
it holds nothing (`idle`), while it runs on spot (`spot`), or always (`all`, which is the
everything-seen policy up to the order of asking). Not a policy live could run: AWS tells
whether a pool has spot only to a launch, which takes the instance. It says where the gap
between `respot` and `respot-omniscient-view` lies. Prints the mean gap closed per set and
phase, with the saved up-round-robin and optimum of `bench/placement/issue28/`.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from respot.policy.bench import Cell
from respot.policy.live_view import LiveView
from respot.policy.model import Choice
from respot.policy.pools import PoolsObservation, load_pool_set, simulate_pools

HERE = Path(__file__).resolve().parent
TRACES = HERE.parents[1] / "traces"
SETS = {
    "aws-2022-10-26": (sorted((TRACES / "aws-2022-10-26").glob("*_1.json")), 100),
    "aws-2023-08-27": (sorted((TRACES / "aws-2023-08-27").glob("*_1.json")), 100),
    "aws-2023-04-19": ([TRACES / "aws-2023-04-19"], 8),
}
PHASES = {"none": (), "od": (Choice.ON_DEMAND,), "idle": (Choice.NONE,), "spot": (Choice.SPOT,)}
PHASES["all"] = (Choice.ON_DEMAND, Choice.NONE, Choice.SPOT)


class Sighted(LiveView):
    """The live policy, shown every pool's availability while it holds one of `phases`."""

    def __init__(self, phases: tuple[Choice, ...]) -> None:
        super().__init__()
        self.phases = phases

    def _learn(self, obs: PoolsObservation) -> None:
        super()._learn(obs)
        if obs.held.choice in self.phases:
            for pool, up in zip(self._pools, obs.available, strict=True):
                pool.see(obs.tick, int(up))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sets", nargs="+", default=list(SETS))
    args = parser.parse_args()
    for name in args.sets:
        paths, windows = SETS[name]
        pool_set = load_pool_set(paths)
        saved = {}
        for line in (HERE / f"results-{name}.jsonl").read_text().splitlines():
            row = json.loads(line)
            saved[(float(row["deadline_hours"]), float(row["changeover_hours"]))] = row["results"]
        for phase, held in PHASES.items():
            closed = []
            for (deadline, changeover), base in sorted(saved.items()):
                job = Cell(48, deadline, changeover).job
                size = job.window_ticks(pool_set.gap_seconds)
                costs = [
                    simulate_pools(
                        Sighted(held),
                        pool_set.pools,
                        pool_set.window(start, size),
                        job,
                        pool_set.gap_seconds,
                    ).normalized_cost
                    for start in pool_set.window_starts(size, windows)
                ]
                rr, opt = base["up-round-robin"]["mean"], base["omniscient"]["mean"]
                closed.append((rr - statistics.fmean(costs)) / (rr - opt))
            mean = 100 * statistics.fmean(closed)
            print(f"{name} sees every pool while {phase:4s}: gap closed {mean:.1f}%")


if __name__ == "__main__":
    main()
