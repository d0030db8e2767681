"""Synthetic spot markets for `respot bench placement`: many pools, deterministic by seed.

`synth_market(seed, pools=K, ...)` draws a market of K pools (1-30) spread over a few
regions (pools are zone x instance type, named `<region><zone letter>_<type>` so that
`region_of` reads the region back) and returns each pool's 0/1 availability per tick. The
model, every random draw from one `random.Random(seed)`:

- **Pools alternate up-runs and outages** whose lengths are heavy-tailed (log-normal: most
  runs short, a few very long, as in the development sets), each pool with its own medians.
- **Regime changes.** Every pool's medians are redrawn at the start of each regime; regimes
  last a geometric number of ticks (mean `regime_hours`), so a window may cross from a
  calm market to a scarce one and back, and what was learned early stops being true.
- **Correlated outages within a region.** Each region has its own shock process: outages of
  the region (log-normal lengths) that take down each of its pools with probability
  `correlation` (drawn per region), on top of the pools' own outages. With correlation near
  1, a region's pools fail together and moving within it does not help.
- **Price spreads** are drawn per pool (`spot_price_per_hour`, up to +-`price_spread` around
  the benchmark's spot price) and written to the trace's metadata. The benchmark's rules
  price every pool alike (`bench/specs/multi-zone.md`), so they do not enter its costs yet.

The market keeps what drew it (`SynthMarket.segments`: each pool's own up-runs and outages
with the log-normal law each was drawn from; `shock_rates`: the chance per tick that a shock
of its region begins and takes it down), for analyses that ask what knowing the true law
would be worth (`bench/placement/issue28/pool_choice.py`). No policy reads them.

`write_market(directory, market)` writes one trace file per pool in the format of
`bench/traces/` (`{"metadata": {"gap_seconds": G, ...}, "data": [0/1, ...]}`), which
`respot bench placement --traces DIR` reads. Nothing here was fitted to a trace set: the
ranges are wide on purpose (a generator that only made markets like the development sets
would not test generalization).
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path

from respot.policy.model import SPOT_PRICE_PER_HOUR
from respot.policy.pools import Pool, PoolSet

REGIONS = (
    "us-east-1",
    "us-west-2",
    "eu-west-1",
    "ap-south-1",
    "us-east-2",
    "eu-central-1",
    "ap-northeast-1",
    "sa-east-1",
    "ca-central-1",
    "eu-north-1",
)
ZONE_LETTERS = "abcdef"
TYPES = ("g5", "p3", "g6")
MAX_POOLS = len(REGIONS) * len(ZONE_LETTERS) * len(TYPES)


@dataclass(frozen=True, slots=True)
class Segment:
    """One up-run or outage of a pool's own process (region shocks aside) and its law."""

    start: int  # first tick
    ticks: int  # length drawn (the last segment may run past the end of the market)
    up: bool
    median_ticks: float  # the log-normal law it was drawn from: median and sigma of log-length
    sigma: float


@dataclass(frozen=True, slots=True)
class SynthMarket:
    """A generated set: pool names, the tick, each pool's 0/1 availability and its price."""

    seed: int
    gap_seconds: int
    names: tuple[str, ...]
    availability: tuple[tuple[int, ...], ...]
    prices: tuple[float, ...]  # spot $/h per pool (metadata only: the rules price pools alike)
    # What drew it, per pool in `names` order (for analyses only; no policy reads these):
    segments: tuple[tuple[Segment, ...], ...] = ()
    shock_rates: tuple[float, ...] = ()  # chance per tick that a region shock downs the pool

    def pool_set(self) -> PoolSet:
        """The market as the benchmark's `PoolSet` (pools in file-name order, as loaded)."""
        order = sorted(range(len(self.names)), key=lambda k: self.names[k])
        return PoolSet(
            pools=tuple(Pool.named(self.names[k]) for k in order),
            gap_seconds=self.gap_seconds,
            availability=tuple(self.availability[k] for k in order),
            source=f"synth seed {self.seed}",
        )


def _lognormal_ticks(rng: random.Random, median_ticks: float, sigma: float) -> int:
    return max(1, round(median_ticks * math.exp(sigma * rng.gauss(0.0, 1.0))))


def _layout(rng: random.Random, pools: int, regions: int) -> list[str]:
    """`pools` distinct pool names over `regions` regions, spread as evenly as possible."""
    names: list[str] = []
    slots = [
        [f"{region}{zone}_{kind}" for zone in ZONE_LETTERS[:3] for kind in TYPES]
        for region in REGIONS[:regions]
    ]
    for slot in slots:
        rng.shuffle(slot)
    index = 0
    while len(names) < pools:
        slot = slots[index % regions]
        if slot:
            names.append(slot.pop())
        elif not any(slots):  # more pools than 3 zones x 3 types: use the other zone letters
            region = REGIONS[len(names) % regions]
            names.append(f"{region}{ZONE_LETTERS[3 + len(names) // 90]}_{TYPES[len(names) % 3]}")
        index += 1
    return names


def synth_market(
    seed: int,
    *,
    pools: int,
    regions: int | None = None,
    gap_seconds: int = 300,
    days: float = 12.0,
    regime_hours: float = 36.0,
    correlation: tuple[float, float] = (0.3, 1.0),
    price_spread: float = 0.3,
) -> SynthMarket:
    """A market of `pools` pools over `regions` regions (default: drawn, 1 to 5).

    Deterministic: the same arguments give the same market on any machine.
    """
    if not 1 <= pools <= 30:
        raise ValueError(f"pools must be 1 to 30, got {pools}")
    if gap_seconds < 1:
        raise ValueError(f"gap_seconds must be >= 1, got {gap_seconds}")
    rng = random.Random(seed)  # noqa: S311 - a reproducible market, not a secret
    if regions is None:  # drawn: 1 to 5 regions, enough that none holds more than 9 pools
        regions = rng.randint(min(5, math.ceil(pools / 9)), min(5, pools))
    if not 1 <= regions <= min(pools, len(REGIONS)):
        raise ValueError(f"regions must be 1 to {min(pools, len(REGIONS))}, got {regions}")
    names = _layout(rng, pools, regions)
    ticks = max(2, round(days * 86400 / gap_seconds))
    per_hour = 3600 / gap_seconds
    region_of_pool = [REGIONS.index(name.split("_")[0][:-1]) for name in names]

    # Region shocks: outages of a region, each taking down each of its pools with
    # probability rho (the region's correlation), on top of the pools' own outages.
    hits: list[list[int]] = [[0] * ticks for _ in names]
    shock_rate: dict[int, float] = {}
    for r in sorted(set(region_of_pool)):
        rho = rng.uniform(*correlation)
        mean_gap = rng.uniform(6.0, 72.0) * per_hour  # ticks between a region's shocks
        shock_rate[r] = rho / mean_gap
        t = round(rng.expovariate(1 / mean_gap))
        while t < ticks:
            length = _lognormal_ticks(rng, rng.uniform(0.25, 6.0) * per_hour, 1.0)
            for k, pool_region in enumerate(region_of_pool):
                if pool_region == r and rng.random() < rho:
                    for i in range(t, min(t + length, ticks)):
                        hits[k][i] = 1
            t += length + round(rng.expovariate(1 / mean_gap))
    availability: list[tuple[int, ...]] = []
    segments: list[tuple[Segment, ...]] = []
    regime_ticks = max(1.0, regime_hours * per_hour)
    for k in range(len(names)):
        row = [0] * ticks
        drawn: list[Segment] = []
        t = 0
        up = rng.random() < 0.7
        while t < ticks:
            # a regime: medians of up-runs and outages for this pool
            scarce = rng.random() < 0.35
            up_median = rng.uniform(0.1, 2.0 if scarce else 24.0) * per_hour
            down_median = rng.uniform(0.5, 12.0 if scarce else 2.0) * per_hour
            sigma = rng.uniform(0.5, 1.6)
            end = min(ticks, t + 1 + round(rng.expovariate(1 / regime_ticks)))
            while t < end:
                median = up_median if up else down_median
                length = _lognormal_ticks(rng, median, sigma)
                drawn.append(Segment(t, length, up, median, sigma))
                for i in range(t, min(t + length, ticks)):
                    row[i] = 1 if up else 0
                t += length
                up = not up
        availability.append(tuple(0 if hits[k][i] else row[i] for i in range(ticks)))
        segments.append(tuple(drawn))
    prices = tuple(
        round(SPOT_PRICE_PER_HOUR * (1 + rng.uniform(-price_spread, price_spread)), 4)
        for _ in names
    )
    return SynthMarket(
        seed=seed,
        gap_seconds=gap_seconds,
        names=tuple(names),
        availability=tuple(availability),
        prices=prices,
        segments=tuple(segments),
        shock_rates=tuple(shock_rate[r] for r in region_of_pool),
    )


def write_market(directory: Path, market: SynthMarket) -> list[Path]:
    """One trace file per pool in `directory` (created), in the format of `bench/traces/`."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, row, price in zip(market.names, market.availability, market.prices, strict=True):
        path = directory / f"{name}.json"
        payload = {
            "metadata": {
                "gap_seconds": market.gap_seconds,
                "generator": "respot.policy.synth",
                "seed": market.seed,
                "spot_price_per_hour": price,
            },
            "data": list(row),
        }
        path.write_text(json.dumps(payload), encoding="utf-8")
        paths.append(path)
    return paths
