"""The omniscient optimum: the exact minimum cost with the whole window known in advance.

A backward dynamic program over (tick, held, slack used) under the benchmark's rules,
vectorized with numpy over the slack axis and over a batch of windows.

State reduction. Work w only ever moves in steps that are multiples of g = gcd(G, d)
(G - d, G, and 0), so w counted in units of g is exact (the job is done once w >= C, i.e.
once w reaches K = ceil(C / g) units). Instead of w the program tracks the slack used so far,
L = i * G/g - w (in units of g): idle ticks add G/g, a changeover adds d/g, a productive tick
adds nothing. A window stays winnable only while L <= S = floor(D/G) * G/g - K, so the axis
has S + 1 entries whatever C is, and the transitions are constant shifts along it.

Changeovers. A new instance pays d before it progresses; with d > G that spans
m = ceil(d / G) ticks. Abandoning a changeover half way never helps an omniscient policy
(it costs money and buys nothing that idling would not), so starting an instance is one
macro-step of m ticks that adds d/g to L; a spot macro-step is only possible when spot stays
available for all its m ticks. With d <= G, m = 1 and this is exactly the tick rule. The
remaining-changeover state r therefore never has to be stored.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from respot.policy.model import Choice, Job, on_demand_cost, tick_price

FloatArray = npt.NDArray[np.float64]

# Batches of windows are sized so that the value arrays stay under this many bytes.
BATCH_BYTES = 256 * 1024 * 1024


def optimal_costs(windows: Sequence[Sequence[int]], job: Job, gap_seconds: int) -> FloatArray:
    """Minimum cost in dollars for each window (inf where no plan meets the deadline)."""
    ticks = job.ticks(gap_seconds)
    avail = np.asarray([list(w[: ticks + 1]) for w in windows], dtype=bool).reshape(
        len(windows), -1
    )
    if avail.shape[1] < ticks + 1:
        raise ValueError(f"windows have {avail.shape[1]} ticks, the rules need {ticks + 1}")
    avail = avail[:, : ticks + 1]
    unit = math.gcd(gap_seconds, job.changeover_seconds)
    need = -(-job.work_seconds // unit)  # K
    span = ticks * (gap_seconds // unit) - need  # S
    if span < 0:
        return np.full(len(windows), np.inf)
    steps = max(1, -(-job.changeover_seconds // gap_seconds))  # m
    per_window = (span + 1) * 3 * (steps + 1) * 8
    batch = max(1, BATCH_BYTES // per_window)
    out = np.empty(len(windows))
    for lo in range(0, len(windows), batch):
        out[lo : lo + batch] = _solve(
            avail[lo : lo + batch], job, gap_seconds, unit=unit, need=need, span=span
        )
    return out


def optimal_normalized_costs(
    windows: Sequence[Sequence[int]], job: Job, gap_seconds: int
) -> FloatArray:
    """`optimal_costs` divided by the on-demand-only cost."""
    return optimal_costs(windows, job, gap_seconds) / on_demand_cost(job, gap_seconds)


def _shift(values: FloatArray, by: int) -> FloatArray:
    """out[:, L] = values[:, L + by], inf past the end of the slack axis."""
    if by == 0:
        return values
    out = np.full_like(values, np.inf)
    if by < values.shape[1]:
        out[:, : values.shape[1] - by] = values[:, by:]
    return out


def _solve(
    avail: npt.NDArray[np.bool_], job: Job, gap: int, *, unit: int, need: int, span: int
) -> FloatArray:
    """Backward induction for one batch of windows; returns V_0(NONE, L=0) per window."""
    n_windows, _ = avail.shape
    ticks = job.ticks(gap)
    gap_u = gap // unit
    change_u = job.changeover_seconds // unit
    steps = max(1, -(-job.changeover_seconds // gap))
    price_spot = tick_price(Choice.SPOT, gap)
    price_od = tick_price(Choice.ON_DEMAND, gap)
    slack_used = np.arange(span + 1)

    # Ticks of spot available from tick i on (capped at `steps`): a spot macro-step needs `steps`.
    run_ahead = np.zeros((n_windows, ticks + 2), dtype=np.int64)
    for i in range(ticks, -1, -1):
        run_ahead[:, i] = np.where(avail[:, i], np.minimum(run_ahead[:, i + 1] + 1, steps), 0)

    inf = np.full((n_windows, span + 1), np.inf)

    def continuation(j: int, values: tuple[FloatArray, FloatArray, FloatArray] | None):
        """Cost to go at the start of tick j: zero where the work is already done."""
        if j > ticks or values is None:
            return (inf, inf, inf)
        done = slack_used <= j * gap_u - need
        if not done.any():
            return values
        return tuple(np.where(done, 0.0, v) for v in values)

    # cont[j % (steps + 1)] holds (none, on_demand, spot) continuation values of tick j.
    cont: list[tuple[FloatArray, FloatArray, FloatArray]] = [(inf, inf, inf)] * (steps + 1)
    cont[ticks % (steps + 1)] = continuation(ticks, (inf, inf, inf))
    for i in range(ticks - 1, -1, -1):
        nxt_none, nxt_od, nxt_spot = cont[(i + 1) % (steps + 1)]
        if i + steps <= ticks:
            far_none, far_od, far_spot = cont[(i + steps) % (steps + 1)]
            start_od = steps * price_od + _shift(far_od, change_u)
            after = np.where(avail[:, i + steps, None], far_spot, far_none)
            start_spot = np.where(
                (run_ahead[:, i] >= steps)[:, None],
                steps * price_spot + _shift(after, change_u),
                np.inf,
            )
        else:
            start_od = start_spot = inf
        idle = _shift(nxt_none, gap_u)
        keep_od = price_od + nxt_od
        keep_spot = price_spot + np.where(avail[:, i + 1, None], nxt_spot, nxt_none)
        v_none = np.minimum(np.minimum(idle, start_od), start_spot)
        v_od = np.minimum(np.minimum(idle, start_spot), keep_od)
        v_spot = np.minimum(np.minimum(idle, start_od), keep_spot)
        cont[i % (steps + 1)] = continuation(i, (v_none, v_od, v_spot))
    return cont[0][0][:, 0].copy()
