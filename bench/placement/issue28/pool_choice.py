"""How much of the many-pool gap is the pool chosen, and how much of it a run's age predicts.

    python bench/placement/issue28/pool_choice.py [--pools 9 18 27] [--fresh] [--dev]

(`--fresh --dev`: about 1 min; its output is saved as `pool_choice.txt`.)

On the synthetic sweep (`respot.policy.synth`, seed = pool count, as in the README of this
folder), variants of up-round-robin that differ only in the pool taken when the one
held has no spot (Uniform Progress decides spot, on-demand or nothing, as in
`up-round-robin`):
- `hindsight`: the pool with spot whose run lasts longest from now (it reads the future,
  less an hour's worth of ticks for a pool outside the checkpoint's region: a transfer);
  an upper bound on what choosing the pool is worth, not a policy;
- `oldest-home`: the pool of the checkpoint's region whose current run is oldest (any
  region if none there has spot): what the age of a run alone predicts, with every pool
  seen;
- `oldest`: the same over every region;
- `true-law`, `true-law-home`, `true-law-home-median`: the pool whose run the generator's
  own law says will last longest, knowing what no policy can (`SynthMarket.segments` and
  `shock_rates`): the log-normal law the pool's current up-run was drawn from, its age
  since it was drawn (region shocks aside) and the rate of the region's shocks, so that
  P(R > t) = S(a + t) / S(a) * (1 - h)^t for the ticks R it has left. `true-law` takes the
  largest E[min(R, H)] to the end of the window H (an hour's ticks less outside the
  checkpoint's region, as `hindsight`), `-home` the same within the checkpoint's region
  when one of its pools has spot, `-median` the largest median of min(R, H): what the best
  possible learned model of each pool would be worth to the choice of pool;
- `true-law-priced`: the same law in respot's own rule of choice: the least (changeover at
  the spot price + the transfer fee outside the checkpoint's region) per expected second
  of work, E[min(R, H)] G - d (capped at the work left).
Prints the mean gap closed per set against the saved up-round-robin and optimum of this
folder (`results-synth-K.jsonl`; with `--fresh`, the twelve fresh markets of `fresh/`;
with `--dev`, the three development sets, where no law is known: the first three only).
Not a policy live could run: each sees every pool.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from respot.policy.baselines import UniformProgressPolicy
from respot.policy.bench import Cell
from respot.policy.history import RunStatistics
from respot.policy.pool_baselines import single_view, to_placement
from respot.policy.pools import (
    Placement,
    PoolSet,
    PoolsObservation,
    load_pool_set,
    simulate_pools,
)
from respot.policy.respot_policy import SPOT_PRICE_PER_SECOND
from respot.policy.synth import SynthMarket, synth_market

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


class _TrueLaw:
    """What drew each pool of a generated market, in the order of its `pool_set()`."""

    def __init__(self, market: SynthMarket) -> None:
        order = sorted(range(len(market.names)), key=lambda k: market.names[k])
        ticks = len(market.availability[0])
        self.rates = [market.shock_rates[k] for k in order]
        self.segments = []  # per pool, per tick: the own segment in progress
        for k in order:
            at = []
            for segment in market.segments[k]:
                at.extend([segment] * max(0, min(segment.ticks, ticks - segment.start)))
            self.segments.append(at)

    def lasting(self, pool: int, tick: int, horizon: int, *, median: bool) -> float:
        """E[min(R, H)] (or its median) of the pool's up-run at absolute `tick`, by its law."""
        segment = self.segments[pool][tick]
        age = tick - segment.start
        law = statistics.NormalDist(math.log(segment.median_ticks), segment.sigma)

        def survival(ticks: float) -> float:  # P(L > ticks), L drawn from the segment's law
            return 1.0 - law.cdf(math.log(ticks)) if ticks > 0 else 1.0

        alive, keep, total = survival(age + 0.5), 1.0 - self.rates[pool], 0.0
        for more in range(horizon):
            chance = survival(age + more + 0.5) / alive * keep**more if alive > 0 else 0.0
            if median and chance < 0.5:
                return more
            if chance < 1e-6:
                break
            total += chance
        return horizon if median else total


def _true_law(
    law: _TrueLaw, start: int, fee_ticks: int, *, home_first: bool, median: bool
) -> Callable[[PoolsObservation, list[int]], int]:
    def pick(obs: PoolsObservation, up: list[int]) -> int:
        if home_first:
            up = [k for k in up if obs.pools[k].region == obs.home] or up

        def worth(k: int) -> float:
            away = obs.pools[k].region != obs.home
            lasting = law.lasting(k, start + obs.tick, obs.ticks_left, median=median)
            return lasting - (fee_ticks if away else 0)

        return max(up, key=lambda k: (worth(k), -k))

    return pick


def _true_law_priced(law: _TrueLaw, start: int) -> Callable[[PoolsObservation, list[int]], int]:
    """The true law in respot's own rule: least (changeover + fee) per expected second of work."""

    def pick(obs: PoolsObservation, up: list[int]) -> int:
        def overhead(k: int) -> float:
            paid = obs.changeover_seconds * SPOT_PRICE_PER_SECOND + obs.transfer_fee(k)
            ticks = law.lasting(k, start + obs.tick, obs.ticks_left, median=False)
            work = max(ticks * obs.gap_seconds - obs.changeover_seconds, obs.gap_seconds)
            return paid / min(work, max(obs.remaining_seconds, obs.gap_seconds))

        return min(up, key=lambda k: (overhead(k), k))

    return pick


NAMES = (
    "hindsight",
    "oldest-home",
    "oldest",
    "true-law",
    "true-law-home",
    "true-law-home-median",
    "true-law-priced",
)


def fresh_markets() -> list[tuple[str, SynthMarket, Path]]:
    """The fresh markets of `fresh/run.sh`: seeds 301-312, their pool counts and ticks."""
    return [
        (
            f"fresh-{seed}",
            synth_market(seed, pools=(seed % 6) * 4 + 2, gap_seconds=300 if seed % 2 == 0 else 120),
            HERE / "fresh" / f"results-fresh-{seed}.jsonl",
        )
        for seed in range(301, 313)
    ]


def _closed(
    pool_set: PoolSet, law: _TrueLaw | None, saved_path: Path, windows: int
) -> dict[str, list[float]]:
    """Gap closed per cell of the saved results, for each pool choice of `NAMES` (those of
    the true law only for a generated market, whose law is known)."""
    saved = {}
    for line in saved_path.read_text().splitlines():
        row = json.loads(line)
        saved[(float(row["deadline_hours"]), float(row["changeover_hours"]))] = row["results"]
    fee_ticks = 3600 // pool_set.gap_seconds
    names = NAMES if law is not None else tuple(n for n in NAMES if not n.startswith("true"))
    closed: dict[str, list[float]] = {name: [] for name in names}
    for (deadline, changeover), base in sorted(saved.items()):
        job = Cell(48, deadline, changeover).job
        size = job.window_ticks(pool_set.gap_seconds)
        starts = pool_set.window_starts(size, windows)
        rr, opt = base["up-round-robin"]["mean"], base["omniscient"]["mean"]
        for name, values in closed.items():
            costs = []
            for start in starts:
                window = pool_set.window(start, size)
                if name == "hindsight":
                    pick = _hindsight(window, fee_ticks)
                elif name.startswith("oldest"):
                    pick = _oldest(home_first=name == "oldest-home")
                elif law is None:
                    raise AssertionError(name)
                elif name == "true-law-priced":
                    pick = _true_law_priced(law, start)
                else:
                    home_first, median = "home" in name, name.endswith("median")
                    pick = _true_law(law, start, fee_ticks, home_first=home_first, median=median)
                outcome = simulate_pools(
                    _Chooser(pick), pool_set.pools, window, job, pool_set.gap_seconds
                )
                costs.append(outcome.normalized_cost)
            values.append((rr - statistics.fmean(costs)) / (rr - opt))
    return closed


def _development_sets() -> list[tuple[str, PoolSet, None, Path, int]]:
    """The three development sets, as `bench/placement/dev.py` reads them."""
    sys.path.insert(0, str(HERE.parent))
    from dev import SETS  # a sibling script, not a package

    return [
        (name, load_pool_set(SETS[name][0]), None, HERE / f"results-{name}.jsonl", SETS[name][1])
        for name in ("aws-2022-10-26", "aws-2023-04-19", "aws-2023-08-27")
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pools", nargs="+", type=int, default=[9, 18, 27])
    parser.add_argument("--fresh", action="store_true", help="also the fresh markets of fresh/")
    parser.add_argument("--dev", action="store_true", help="also the development sets")
    args = parser.parse_args()
    sets = [  # as `bench/placement/synth.py` made them for the sweep: seed = pool count
        (f"synth-{count}", synth_market(count, pools=count), HERE / f"results-synth-{count}.jsonl")
        for count in args.pools
    ]
    generated = [
        (label, market.pool_set(), _TrueLaw(market), saved, WINDOWS)
        for label, market, saved in sets + (fresh_markets() if args.fresh else [])
    ]
    fresh: dict[str, list[float]] = {name: [] for name in NAMES}
    for label, pool_set, law, saved, windows in (
        _development_sets() if args.dev else []
    ) + generated:
        closed = _closed(pool_set, law, saved, windows)
        for name, values in closed.items():
            print(f"{label} {name:20s} gap closed {100 * statistics.fmean(values):.1f}%")
            if label.startswith("fresh"):
                fresh[name].extend(values)
    if args.fresh:
        for name, values in fresh.items():
            print(f"fresh (48 cells) {name:20s} gap closed {100 * statistics.fmean(values):.1f}%")


if __name__ == "__main__":
    main()
