"""A small plan over the learned pool model: what a second of slack is worth (issue 28).

The multi-pool policy weighs waiting, moving, transferring and on-demand against the slack
at one price, the value of a second of slack (`MultiPoolPolicy._slack_value`, a normal
approximation of the chance that the slack binds). `slack_value` here computes that price
from a dynamic program over the learned model (`respot.policy.poolmodel.PoolModel`) instead:

The rest of the job is a sequence of *cycles*: a spot run on some pool (length U, the pools'
up-run law, Kaplan-Meier with censoring), ended by a preemption after which the job restarts
on another pool that has spot, paying a changeover (c = d / G ticks of slack, c * p_spot
dollars); with probability q (`CoMovement.stranded`: every other pool was down when one went
down) no pool has spot and the job must either wait the outage out (O ticks of slack, the
union's outage law) or cover it with on-demand (the premium (p_od - p_spot) E[O] and one
more changeover). When the slack is too small for a changeover the rest of the work goes to
on-demand (the safety net): the premium on the work left. With n cycles left (the work left
over E[min(U, work left)]) and s ticks of slack, V_n(s) is the expected extra cost over an
all-spot run; V_0 = 0, and

    V_i(s) = c p_spot + (1 - q) V_{i-1}(s - c)
             + q min(E_O[V_{i-1}(s - c - O), or the net's premium if O > s - c],
                     (p_od - p_spot) E[O] + c p_od + V_{i-1}(s - 2c))

for s >= c, and the net's premium (p_od - p_spot) x (the work of i cycles) for s < c. The
slack value is the marginal V_n(s - 1) - V_n(s), per second. No constant is fitted to a
trace set: c, the prices and the work come from the job, U, O and q are learned. The grid
(`GRID` slack points, `STAGES` stages of whole cycles, `OUTAGE_BINS` outage bins) bounds the
arithmetic only; a finer grid changes the value by less than one grid step.
"""

from __future__ import annotations

import math

from respot.policy.poolmodel import RunLaw

GRID = 24  # slack points of the table (resolution, not a fitted constant)
STAGES = 24  # stages (groups of whole cycles)
OUTAGE_BINS = 24  # bins of the outage law


def slack_value(
    *,
    slack_ticks: float,
    work_ticks: float,
    changeover_ticks: float,
    spot_per_tick: float,
    on_demand_per_tick: float,
    run: RunLaw,
    outage: RunLaw,
    stranded: float,
    gap_seconds: int,
) -> float:
    """Dollars per second of slack: the marginal value of the plan's table at `slack_ticks`."""
    if work_ticks <= 0 or slack_ticks <= 0:
        return on_demand_per_tick / gap_seconds
    horizon = max(1, math.ceil(work_ticks))
    mean_run = max(run.mean(horizon), 1.0)
    cycles = max(1, math.ceil(work_ticks / mean_run))
    per_stage = max(1, math.ceil(cycles / STAGES))
    stages = math.ceil(cycles / per_stage)
    unit = slack_ticks / (GRID - 1)  # ticks per grid step: the top is the slack now
    premium = on_demand_per_tick - spot_per_tick
    # one stage: per_stage cycles, per_stage changeovers, stranded at least once w.p. q_s
    change = per_stage * changeover_ticks / unit  # in grid steps
    q = 1 - (1 - min(max(stranded, 0.0), 1.0)) ** per_stage
    # the outage law in bins of `unit` ticks, up to the slack (longer: the net takes over)
    top = max(1, math.ceil(slack_ticks))
    width = max(1, math.ceil(top / OUTAGE_BINS))
    bins: list[tuple[float, float]] = []  # (probability, length in grid steps)
    mean_outage = 0.0
    previous = 1.0
    for start in range(0, top, width):
        end = min(start + width, top)
        below = outage.survival(0, end)
        p = previous - below
        if p > 0:
            bins.append((p, (start + end) / 2 / unit))
            mean_outage += p * (start + end) / 2
        previous = below
    beyond = previous  # P(O > slack): the wait runs out of slack
    mean_outage += beyond * top  # at least the slack: a lower bound, enough to compare
    cycle_work = work_ticks / cycles
    table = [0.0] * GRID

    def at(values: list[float], s: float, net: float) -> float:
        if s < 0:
            return net
        low = int(s)
        if low >= GRID - 1:
            return values[-1]
        frac = s - low
        return values[low] * (1 - frac) + values[low + 1] * frac

    for i in range(1, stages + 1):
        net = premium * cycle_work * per_stage * i  # the rest on on-demand
        net_before = premium * cycle_work * per_stage * (i - 1)
        row = []
        for s in range(GRID):
            if s < change:
                row.append(net)
                continue
            value = per_stage * changeover_ticks * spot_per_tick
            value += (1 - q) * at(table, s - change, net_before)
            if q > 0:
                wait = sum(p * at(table, s - change - o, net_before) for p, o in bins)
                wait += beyond * net_before
                cover = premium * mean_outage + changeover_ticks * on_demand_per_tick
                cover += at(table, s - 2 * change, net_before)
                value += q * min(wait, cover)
            row.append(min(value, net))
        table = row
    # the marginal value of one tick of slack at the top of the table (the slack now)
    step = (table[GRID - 2] - table[GRID - 1]) / unit
    return max(step, 0.0) / gap_seconds
