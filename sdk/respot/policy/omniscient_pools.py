"""The multi-zone omniscient optimum: exact minimum cost with every pool's window known.

A backward dynamic program over (tick, held, slack used, home) under `bench/specs/multi-zone.md`,
vectorized with numpy over the slack axis, one window at a time (the tick loop branches on
which pools have spot, so a tick with none of them costs nothing for them).

It extends the single-zone program of `respot.policy.omniscient` (read its docstring first):
- slack used L = i * G/g - w in units of g = gcd(G, d) replaces the work done (exact);
- starting an instance is one macro-step of m = ceil(d / G) ticks that adds d/g to L (an
  omniscient plan never abandons a changeover: its ticks make no progress, idling would be
  as good and free), so the remaining changeover r is never stored;
- held is NONE or OD in each region h (`home`, where the checkpoint and on-demand are), or
  the spot of pool k, whose region is then home by the rules. States: 2 R + K.
- taking pool k's spot from home h != region(k) adds the transfer fee S * q.
- "restart pool k while holding it" is not a move of the rules; the program allows it for
  brevity, which changes nothing: keeping k for the same m ticks costs the same money and
  uses less slack, and the cost-to-go never falls as slack used grows.

Costs are exact: float64 holding integers, in units of 1e-4 dollars per hour x 1 second
(prices 9731 and 30600 per second of holding, the fee 0.2 $ = 7,200,000), far below 2^53.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from respot.policy.model import (
    ON_DEMAND_PRICE_PER_HOUR,
    SECONDS_PER_HOUR,
    SPOT_PRICE_PER_HOUR,
    Job,
    on_demand_cost,
)
from respot.policy.pools import CHECKPOINT_GB, TRANSFER_PRICE_PER_GB, Pool

FloatArray = npt.NDArray[np.float64]

PRICE_UNIT = 1e-4  # dollars per hour; both prices are whole multiples of it
DOLLARS_PER_UNIT = PRICE_UNIT / SECONDS_PER_HOUR  # one unit held for one second
SPOT_UNITS = round(SPOT_PRICE_PER_HOUR / PRICE_UNIT)
ON_DEMAND_UNITS = round(ON_DEMAND_PRICE_PER_HOUR / PRICE_UNIT)


def optimal_pool_costs(
    pools: Sequence[Pool],
    windows: Sequence[Sequence[Sequence[int]]],
    job: Job,
    gap_seconds: int,
    *,
    checkpoint_gb: float = CHECKPOINT_GB,
    transfer_price_per_gb: float = TRANSFER_PRICE_PER_GB,
) -> FloatArray:
    """Minimum cost in dollars for each window (window[k] = a_k[0..]); inf if none can finish."""
    fee_units = checkpoint_gb * transfer_price_per_gb / DOLLARS_PER_UNIT
    out = np.full(len(windows), np.inf)
    for index, window in enumerate(windows):
        if len(window) != len(pools):
            raise ValueError(f"{len(window)} availability rows for {len(pools)} pools")
        units = _solve(pools, window, job, gap_seconds, fee_units)
        out[index] = units * DOLLARS_PER_UNIT
    return out


def optimal_pool_normalized_costs(
    pools: Sequence[Pool],
    windows: Sequence[Sequence[Sequence[int]]],
    job: Job,
    gap_seconds: int,
    *,
    checkpoint_gb: float = CHECKPOINT_GB,
    transfer_price_per_gb: float = TRANSFER_PRICE_PER_GB,
) -> FloatArray:
    """`optimal_pool_costs` divided by the on-demand-only cost."""
    costs = optimal_pool_costs(
        pools,
        windows,
        job,
        gap_seconds,
        checkpoint_gb=checkpoint_gb,
        transfer_price_per_gb=transfer_price_per_gb,
    )
    return costs / on_demand_cost(job, gap_seconds)


def _solve(
    pools: Sequence[Pool], window: Sequence[Sequence[int]], job: Job, gap: int, fee: float
) -> float:
    """Backward induction for one window: V_0(NONE in pool 0's region, L = 0), in units."""
    ticks = job.ticks(gap)
    n_pools = len(pools)
    avail = np.zeros((n_pools, ticks + 1), dtype=bool)
    for k, row in enumerate(window):
        if len(row) < ticks + 1:
            raise ValueError(f"a window row has {len(row)} ticks, the rules need {ticks + 1}")
        avail[k] = [bool(a) for a in row[: ticks + 1]]
    unit = math.gcd(gap, job.changeover_seconds)
    need = -(-job.work_seconds // unit)  # K: work in units
    span = ticks * (gap // unit) - need  # S: slack in units
    if span < 0:
        return math.inf
    gap_u = gap // unit
    change_u = job.changeover_seconds // unit
    steps = max(1, -(-job.changeover_seconds // gap))  # m
    regions = list(dict.fromkeys(pool.region for pool in pools))
    n_regions = len(regions)
    region = [regions.index(pool.region) for pool in pools]
    spot_tick, od_tick = SPOT_UNITS * gap, ON_DEMAND_UNITS * gap
    width = span + 1
    n_states = 2 * n_regions + n_pools  # NONE_h, OD_h, SPOT_k

    # run_ahead[k, i]: ticks of spot in pool k from tick i on, capped at m.
    run_ahead = np.zeros((n_pools, ticks + 2), dtype=np.int64)
    for i in range(ticks, -1, -1):
        run_ahead[:, i] = np.where(avail[:, i], np.minimum(run_ahead[:, i + 1] + 1, steps), 0)
    up_now = [[k for k in range(n_pools) if run_ahead[k, i] >= steps] for i in range(ticks)]

    ring = np.full((steps + 1, n_states, width), np.inf)
    ring[ticks % (steps + 1)] = 0.0  # at the last boundary every L <= S is done
    idle = np.empty((n_regions, width))
    start_od = np.empty((n_regions, width))
    start_spot = np.empty((n_pools, width))
    spot_from = np.empty((n_regions, width))
    base = np.empty((n_regions, width))
    scratch = np.empty(width)

    for i in range(ticks - 1, -1, -1):
        lo = max(0, i * gap_u - need + 1)  # below: the work is done
        hi = min(span, i * gap_u) + 1  # above: cannot have happened by tick i
        cur = ring[i % (steps + 1)]
        cur[:, :lo] = 0.0
        if lo >= hi:
            continue
        nxt = ring[(i + 1) % (steps + 1)]
        band = slice(lo, hi)
        for h in range(n_regions):
            _shifted(idle[h], nxt[h], gap_u, 0.0, lo, hi)
        fits = i + steps <= ticks
        startable = up_now[i] if fits else []
        if fits:
            far = ring[(i + steps) % (steps + 1)]
            for h in range(n_regions):
                _shifted(start_od[h], far[n_regions + h], change_u, steps * od_tick, lo, hi)
            for k in startable:
                after = far[2 * n_regions + k] if avail[k, i + steps] else far[region[k]]
                _shifted(start_spot[k], after, change_u, steps * spot_tick, lo, hi)
        else:
            start_od[:, band] = np.inf
        for h in range(n_regions):
            target = spot_from[h, band]
            target[...] = np.inf
            for k in startable:
                if region[k] == h:
                    np.minimum(target, start_spot[k, band], out=target)
                else:
                    np.add(start_spot[k, band], fee, out=scratch[band])
                    np.minimum(target, scratch[band], out=target)
            np.minimum(idle[h, band], spot_from[h, band], out=base[h, band])
            # on-demand held in h: idle, keep on-demand, or take a spot
            np.add(nxt[n_regions + h, band], od_tick, out=scratch[band])
            np.minimum(base[h, band], scratch[band], out=cur[n_regions + h, band])
            # nothing held in h: idle, start on-demand, or take a spot
            np.minimum(base[h, band], start_od[h, band], out=base[h, band])
            cur[h, band] = base[h, band]
        for k in range(n_pools):
            # spot of k held (its region is home): keep it, or whatever NONE there could do
            if avail[k, i]:
                kept = nxt[2 * n_regions + k] if avail[k, i + 1] else nxt[region[k]]
                np.add(kept[band], spot_tick, out=scratch[band])
                np.minimum(base[region[k], band], scratch[band], out=cur[2 * n_regions + k, band])
            else:
                cur[2 * n_regions + k, band] = np.inf  # cannot be held at tick i
    return float(ring[0][region[0]][0])


def _shifted(out: FloatArray, values: FloatArray, by: int, add: float, lo: int, hi: int) -> None:
    """out[L] = values[L + by] + add for lo <= L < hi; inf past the end of the axis."""
    width = values.shape[0]
    inside = min(hi, width - by)
    if inside > lo:
        np.add(values[lo + by : inside + by], add, out=out[lo:inside])
    out[max(lo, inside) : hi] = np.inf
