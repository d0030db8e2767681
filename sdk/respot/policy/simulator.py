"""Runs a policy on one window of a spot trace under the benchmark's rules, tick by tick.

The rules (benchmarks/spot-policy.md), all times in integer seconds: for tick
i = 0 .. floor(D/G) - 1 while w < C, (1) the policy sees the observation and chooses x
(SPOT when a[i] = 0 counts as NONE); (2) NONE drops everything (held = NONE, r = 0, nothing
billed); otherwise a new instance (x != held) sets r = d, the tick is billed at x's price,
progress is max(G - r, 0), then r = max(r - G, 0) and held = x; (3) held spot is preempted at
the tick boundary when a[i+1] = 0 (held = NONE, r = 0, work kept); (4) the job finishes at
(i + 1) * G once w >= C and misses its deadline if w < C after the last tick.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from respot.policy.model import (
    Choice,
    HistoryView,
    Job,
    Observation,
    Policy,
    on_demand_cost,
    tick_price,
)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one policy run on one window cost and whether it finished in time."""

    cost: float  # dollars
    normalized_cost: float  # cost / on-demand-only cost
    missed: bool
    finish_seconds: int | None  # (i + 1) * G of the tick that completed the work
    spot_ticks: int
    on_demand_ticks: int
    changeovers: int
    choices: tuple[Choice, ...]  # effective choice per tick (SPOT when unavailable -> NONE)


def simulate(policy: Policy, window: Sequence[int], job: Job, gap_seconds: int) -> Outcome:
    """Run `policy` on `window` (a[0..floor(D/G)], 0/1) and account for it."""
    ticks = job.ticks(gap_seconds)
    if len(window) < ticks + 1:
        raise ValueError(f"window has {len(window)} ticks, the rules need {ticks + 1}")
    avail = tuple(1 if a else 0 for a in window[: ticks + 1])
    work = job.work_seconds
    changeover = job.changeover_seconds
    held = Choice.NONE
    remaining_changeover = 0
    done = 0
    spot_ticks = on_demand_ticks = changeovers = 0
    finish: int | None = None
    choices: list[Choice] = []
    for tick in range(ticks):
        if done >= work:
            break
        obs = Observation(
            tick=tick,
            gap_seconds=gap_seconds,
            work_seconds=work,
            deadline_seconds=job.deadline_seconds,
            changeover_seconds=changeover,
            done_seconds=done,
            remaining_changeover_seconds=remaining_changeover,
            held=held,
            spot_available=avail[tick] == 1,
            history=HistoryView(avail, tick),
        )
        # 1. Choose; SPOT when unavailable counts as NONE.
        choice = policy.choose(obs)
        if choice is Choice.SPOT and not avail[tick]:
            choice = Choice.NONE
        choices.append(choice)
        # 2. Hold nothing, or bill the tick and make progress after any changeover.
        if choice is Choice.NONE:
            held = Choice.NONE
            remaining_changeover = 0
        else:
            if choice is not held:
                remaining_changeover = changeover
                changeovers += 1
            if choice is Choice.SPOT:
                spot_ticks += 1
            else:
                on_demand_ticks += 1
            done = min(work, done + max(gap_seconds - remaining_changeover, 0))
            remaining_changeover = max(remaining_changeover - gap_seconds, 0)
            held = choice
        # 3. Preemption at the tick boundary: the work is kept, the next instance pays d.
        if held is Choice.SPOT and not avail[tick + 1]:
            held = Choice.NONE
            remaining_changeover = 0
        # 4. Finished at (i + 1) * G once the work is done.
        if done >= work:
            finish = (tick + 1) * gap_seconds
    cost = spot_ticks * tick_price(Choice.SPOT, gap_seconds) + on_demand_ticks * tick_price(
        Choice.ON_DEMAND, gap_seconds
    )
    return Outcome(
        cost=cost,
        normalized_cost=cost / on_demand_cost(job, gap_seconds),
        missed=done < work,
        finish_seconds=finish,
        spot_ticks=spot_ticks,
        on_demand_ticks=on_demand_ticks,
        changeovers=changeovers,
        choices=tuple(choices),
    )
