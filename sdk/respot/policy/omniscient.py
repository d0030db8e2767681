"""The omniscient optimum: the exact minimum cost with the whole window known in advance.

A backward dynamic program over (tick, held, slack used) under the benchmark's rules,
vectorized with numpy over the slack axis and over a batch of windows.

State reduction. Work w only ever moves in steps that are multiples of g = gcd(G, d)
(G - d, G, and 0), so w counted in units of g is exact (the job is done once w >= C, i.e.
once w reaches K = ceil(C / g) units). Instead of w the program tracks the slack used so far,
L = i * G/g - w (in units of g): idle ticks add G/g, a changeover adds d/g, a productive tick
adds nothing. A window stays winnable only while L <= S = floor(D/G) * G/g - K, so the axis
has S + 1 entries whatever C is, and the transitions are constant shifts along it. At tick i
only L <= i * G/g can have happened and L <= i * G/g - K means done, so each tick computes
just the band between the two.

Changeovers. A new instance pays d before it progresses; with d > G that spans
m = ceil(d / G) ticks. Abandoning a changeover half way never helps an omniscient policy
(it costs money and buys nothing that idling would not), so starting an instance is one
macro-step of m ticks that adds d/g to L; a spot macro-step is only possible when spot stays
available for all its m ticks. With d <= G, m = 1 and this is exactly the tick rule. The
remaining-changeover state r therefore never has to be stored.

Costs are exact integers: prices in units of 1e-4 dollars per hour (9731 and 30600), so
ties between plans are ties, and the dollars are computed once at the end.
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

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int32]

PRICE_UNIT = 1e-4  # dollars per hour; both prices are whole multiples of it
SPOT_UNITS = round(SPOT_PRICE_PER_HOUR / PRICE_UNIT)
ON_DEMAND_UNITS = round(ON_DEMAND_PRICE_PER_HOUR / PRICE_UNIT)
UNREACHABLE = 1 << 30  # "no plan": far above any real cost, and still far from int32 overflow
# Windows are solved in batches whose working set stays about this size (CPU cache).
BATCH_BYTES = 2 * 1024 * 1024


def optimal_costs(windows: Sequence[Sequence[int]], job: Job, gap_seconds: int) -> FloatArray:
    """Minimum cost in dollars for each window (inf where no plan meets the deadline)."""
    ticks = job.ticks(gap_seconds)
    avail = np.zeros((len(windows), ticks + 1), dtype=bool)
    for row, window in enumerate(windows):
        if len(window) < ticks + 1:
            raise ValueError(f"a window has {len(window)} ticks, the rules need {ticks + 1}")
        avail[row] = [bool(a) for a in window[: ticks + 1]]
    unit = math.gcd(gap_seconds, job.changeover_seconds)
    need = -(-job.work_seconds // unit)  # K
    span = ticks * (gap_seconds // unit) - need  # S
    out = np.full(len(windows), np.inf)
    if span < 0:
        return out
    steps = max(1, -(-job.changeover_seconds // gap_seconds))  # m
    per_window = (span + 1) * 4 * (3 * (steps + 1) + 6)
    batch = max(1, BATCH_BYTES // per_window)
    dollars_per_unit = PRICE_UNIT * gap_seconds / SECONDS_PER_HOUR
    for lo in range(0, len(windows), batch):
        units = _solve(avail[lo : lo + batch], job, gap_seconds, unit=unit, need=need, span=span)
        out[lo : lo + batch] = np.where(units >= UNREACHABLE, np.inf, units * dollars_per_unit)
    return out


def optimal_normalized_costs(
    windows: Sequence[Sequence[int]], job: Job, gap_seconds: int
) -> FloatArray:
    """`optimal_costs` divided by the on-demand-only cost."""
    return optimal_costs(windows, job, gap_seconds) / on_demand_cost(job, gap_seconds)


def _solve(
    avail: npt.NDArray[np.bool_], job: Job, gap: int, *, unit: int, need: int, span: int
) -> npt.NDArray[np.int64]:
    """Backward induction for one batch of windows; V_0(NONE, L=0) per window, in price units."""
    n_windows = avail.shape[0]
    ticks = job.ticks(gap)
    gap_u = gap // unit
    change_u = job.changeover_seconds // unit
    steps = max(1, -(-job.changeover_seconds // gap))
    width = span + 1

    # Ticks of spot available from tick i on (capped at `steps`): a spot macro-step needs `steps`.
    run_ahead = np.zeros((n_windows, ticks + 2), dtype=np.int32)
    for i in range(ticks, -1, -1):
        run_ahead[:, i] = np.where(avail[:, i], np.minimum(run_ahead[:, i + 1] + 1, steps), 0)

    # ring[j % (steps + 1)][h] = cost to go at the start of tick j holding h (0 none, 1 on-demand,
    # 2 spot), zero where the work is already done. At tick `ticks` every L <= S is done.
    ring = [np.full((3, n_windows, width), UNREACHABLE, dtype=np.int32) for _ in range(steps + 1)]
    ring[ticks % (steps + 1)][:] = 0
    idle, start_od, start_spot, keep, best = (
        np.empty((n_windows, width), dtype=np.int32) for _ in range(5)
    )

    for i in range(ticks - 1, -1, -1):
        # Band of L worth computing: not done yet (L > i*G/g - K) and possible (L <= i*G/g).
        lo = max(0, i * gap_u - need + 1)
        hi = min(span, i * gap_u) + 1
        cur = ring[i % (steps + 1)]
        cur[:, :, :lo] = 0  # done
        if lo >= hi:
            continue
        nxt = ring[(i + 1) % (steps + 1)]
        band = slice(lo, hi)
        _shifted(idle, nxt[0], gap_u, 0, band)
        if i + steps <= ticks:
            far = ring[(i + steps) % (steps + 1)]
            _shifted(start_od, far[1], change_u, steps * ON_DEMAND_UNITS, band)
            after = _pick(avail[:, i + steps], far[2], far[0])
            _shifted(start_spot, after, change_u, steps * SPOT_UNITS, band)
            cannot = run_ahead[:, i] < steps
            if cannot.any():
                start_spot[cannot, band] = UNREACHABLE
        else:
            start_od[:, band] = UNREACHABLE
            start_spot[:, band] = UNREACHABLE
        # none: min(idle, start on-demand, start spot)
        np.minimum(idle[:, band], start_od[:, band], out=best[:, band])
        np.minimum(best[:, band], start_spot[:, band], out=cur[0, :, band])
        # spot: min(idle, start on-demand, keep spot (lost at the boundary if a[i+1] = 0))
        np.add(_pick(avail[:, i + 1], nxt[2], nxt[0])[:, band], SPOT_UNITS, out=keep[:, band])
        np.minimum(best[:, band], keep[:, band], out=cur[2, :, band])
        # on-demand: min(idle, start spot, keep on-demand)
        np.add(nxt[1, :, band], ON_DEMAND_UNITS, out=keep[:, band])
        np.minimum(idle[:, band], start_spot[:, band], out=best[:, band])
        np.minimum(best[:, band], keep[:, band], out=cur[1, :, band])
        np.minimum(cur[:, :, band], UNREACHABLE, out=cur[:, :, band])
    return ring[0][0][:, 0].astype(np.int64)


def _shifted(out: IntArray, values: IntArray, by: int, add: int, band: slice) -> None:
    """out[:, L] = values[:, L + by] + add on the band; unreachable past the end of the axis."""
    width = values.shape[1]
    lo, hi = band.start, band.stop
    inside = min(hi, width - by)
    if inside > lo:
        np.add(values[:, lo + by : inside + by], add, out=out[:, lo:inside])
    out[:, max(lo, inside) : hi] = UNREACHABLE


def _pick(mask: npt.NDArray[np.bool_], if_true: IntArray, if_false: IntArray) -> IntArray:
    """Per window: `if_true` rows where mask, else `if_false` rows (no copy when uniform)."""
    if mask.all():
        return if_true
    if not mask.any():
        return if_false
    return np.where(mask[:, None], if_true, if_false)
