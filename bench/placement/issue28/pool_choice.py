"""How much of the many-pool gap is the pool chosen, and how much of it a run's age predicts.

    python bench/placement/issue28/pool_choice.py [--pools 9 18 27]

On the synthetic sweep (`respot.policy.synth`, seed = pool count, as in the README of this
folder), three variants of up-round-robin that differ only in the pool taken when the one
held has no spot (Uniform Progress decides spot, on-demand or nothing, as in
`up-round-robin`):
- `hindsight`: the pool with spot whose run lasts longest from now (it reads the future,
  less an hour's worth of ticks for a pool outside the checkpoint's region: a transfer);
  an upper bound on what choosing the pool is worth, not a policy;
- `oldest-home`: the pool of the checkpoint's region whose current run is oldest (any
  region if none there has spot): what the age of a run alone predicts, with every pool
  seen;
- `oldest`: the same over every region.
Prints the mean gap closed per set against the saved up-round-robin and optimum of this
folder (`results-synth-K.jsonl`). Not a policy live could run: each sees every pool.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path

from respot.policy.baselines import UniformProgressPolicy
from respot.policy.bench import Cell
from respot.policy.history import RunStatistics
from respot.policy.pool_baselines import single_view, to_placement
from respot.policy.pools import Placement, PoolsObservation, simulate_pools
from respot.policy.synth import synth_market

HERE = Path(__file__).resolve().parent
WINDOWS = 8  # as the sweep of the README


class _Chooser:
    """Uniform Progress on the pool held while it has spot, else on `pick`'s pool."""

    def __init__(self, pick: Callable[[PoolsObservation, list[int]], int]) -> None:
        self.name = "pool-choice"
        self._rule = UniformProgressPolicy()
        self._pick = pick

    def place(self, obs: PoolsObservation) -> Placement:
        held = obs.held.pool
        if held is not None and obs.available[held]:
            pool: int | None = held
        else:
            up = [k for k, available in enumerate(obs.available) if available]
            pool = self._pick(obs, up) if up else None
        return to_placement(self._rule.choose(single_view(obs, pool=pool)), pool)


def _oldest(home_first: bool) -> Callable[[PoolsObservation, list[int]], int]:
    def pick(obs: PoolsObservation, up: list[int]) -> int:
        if home_first:
            up = [k for k in up if obs.pools[k].region == obs.home] or up
        return max(up, key=lambda k: (RunStatistics(obs.histories[k]).current_age(1), -k))

    return pick


def _hindsight(window: Sequence[Sequence[int]], fee_ticks: int) -> Callable[..., int]:
    def lasting(pool: int, tick: int) -> int:
        row, ticks = window[pool], 0
        while tick + ticks < len(row) and row[tick + ticks]:
            ticks += 1
        return ticks

    def pick(obs: PoolsObservation, up: list[int]) -> int:
        def worth(k: int) -> int:
            away = obs.pools[k].region != obs.home
            return lasting(k, obs.tick) - (fee_ticks if away else 0)

        return max(up, key=worth)

    return pick


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pools", nargs="+", type=int, default=[9, 18, 27])
    args = parser.parse_args()
    for count in args.pools:
        saved = {}
        for line in (HERE / f"results-synth-{count}.jsonl").read_text().splitlines():
            row = json.loads(line)
            saved[(float(row["deadline_hours"]), float(row["changeover_hours"]))] = row["results"]
        pool_set = synth_market(count, pools=count).pool_set()  # as `bench/placement/synth.py`
        fee_ticks = 3600 // pool_set.gap_seconds
        closed: dict[str, list[float]] = {"hindsight": [], "oldest-home": [], "oldest": []}
        for (deadline, changeover), base in sorted(saved.items()):
            job = Cell(48, deadline, changeover).job
            size = job.window_ticks(pool_set.gap_seconds)
            windows = [
                pool_set.window(start, size) for start in pool_set.window_starts(size, WINDOWS)
            ]
            rr, opt = base["up-round-robin"]["mean"], base["omniscient"]["mean"]
            for name, values in closed.items():
                costs = []
                for window in windows:
                    pick = (
                        _hindsight(window, fee_ticks)
                        if name == "hindsight"
                        else _oldest(home_first=name == "oldest-home")
                    )
                    outcome = simulate_pools(
                        _Chooser(pick), pool_set.pools, window, job, pool_set.gap_seconds
                    )
                    costs.append(outcome.normalized_cost)
                values.append((rr - statistics.fmean(costs)) / (rr - opt))
        for name, values in closed.items():
            print(f"synth-{count} {name:12s} gap closed {100 * statistics.fmean(values):.1f}%")


if __name__ == "__main__":
    main()
