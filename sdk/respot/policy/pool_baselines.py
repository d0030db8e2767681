"""The multi-zone benchmark's baselines: up-home, up-round-robin and greedy-any.

Each runs a single-zone rule on a view of the pools (`single_view`) and maps its choice back
to a pool. All use the tick-exact safety net of `respot.policy.safety` (the job's time rules
do not depend on the pool, so the single-zone guarantee carries over unchanged).

A policy object keeps the pool it last used (round-robin's pointer); the simulator gives each
window a fresh object, and tick 0 resets it.
"""

from __future__ import annotations

from collections.abc import Sequence

from respot.policy.baselines import UniformProgressPolicy
from respot.policy.model import Choice, Observation
from respot.policy.pools import NOTHING, ON_DEMAND, Placement, PoolsObservation
from respot.policy.safety import guard


def single_view(
    obs: PoolsObservation, *, pool: int | None, history: Sequence[int] = ()
) -> Observation:
    """The single-zone observation of a job that would take the spot of `pool` this tick.

    `spot_available` is a[pool][i] (False when `pool` is None); `held` is SPOT when the job
    holds that very pool's spot, so that a changeover is charged exactly when the multi-pool
    rules charge one. `history` is passed through for policies that read it.
    """
    held = obs.held.choice
    if held is Choice.SPOT and obs.held.pool != pool:
        held = Choice.NONE  # taking another pool's spot is a new instance, like starting afresh
    return Observation(
        tick=obs.tick,
        gap_seconds=obs.gap_seconds,
        work_seconds=obs.work_seconds,
        deadline_seconds=obs.deadline_seconds,
        changeover_seconds=obs.changeover_seconds,
        done_seconds=obs.done_seconds,
        remaining_changeover_seconds=obs.remaining_changeover_seconds,
        held=held,
        spot_available=pool is not None and obs.available[pool],
        history=history,
    )


def to_placement(choice: Choice, pool: int | None) -> Placement:
    """A single-zone choice as a placement on `pool`."""
    if choice is Choice.SPOT:
        return NOTHING if pool is None else Placement.spot(pool)
    return ON_DEMAND if choice is Choice.ON_DEMAND else NOTHING


class UniformProgressHome:
    """`up-home`: Uniform Progress on pool 0 alone (the checkpoint never leaves its region)."""

    name = "up-home"

    def __init__(self) -> None:
        self._rule = UniformProgressPolicy()

    def place(self, obs: PoolsObservation) -> Placement:
        """Uniform Progress's choice with pool 0 as the only spot."""
        return to_placement(self._rule.choose(single_view(obs, pool=0)), 0)


class UniformProgressRoundRobin:
    """`up-round-robin`: Uniform Progress; when its pool has no spot, the next pool that has.

    Uniform Progress decides as if spot were available whenever some pool has it. Its pool is
    the one it last took (pool 0 at first); when that pool has no spot at tick i (or it was
    just preempted), it takes the next pool after it in file order that has spot, wrapping
    around. Only when no pool has spot does Uniform Progress's on-demand-or-wait rule apply.
    """

    name = "up-round-robin"

    def __init__(self) -> None:
        self._rule = UniformProgressPolicy()
        self._pool = 0

    def place(self, obs: PoolsObservation) -> Placement:
        """Uniform Progress's choice on the current pool or the next one with spot."""
        if obs.tick == 0:
            self._pool = 0
        n = len(obs.pools)
        candidate = next(
            (k for k in ((self._pool + j) % n for j in range(n)) if obs.available[k]), None
        )
        placement = to_placement(self._rule.choose(single_view(obs, pool=candidate)), candidate)
        if placement.pool is not None:
            self._pool = placement.pool
        return placement


class GreedyAny:
    """`greedy-any`: hold the current spot pool while it lasts, else the first pool with spot.

    Otherwise idle; the tick-exact safety net moves it to on-demand when idling (or a new
    spot's changeover) could miss the deadline, and it leaves on-demand again as soon as the
    wanted spot is safe (the spec names only the net, not Greedy's stay-on-on-demand).
    """

    name = "greedy-any"

    def place(self, obs: PoolsObservation) -> Placement:
        """Keep the held spot, or the first pool with spot, or nothing; then the safety net."""
        if obs.held.pool is not None and obs.available[obs.held.pool]:
            candidate: int | None = obs.held.pool
        else:
            candidate = next((k for k, up in enumerate(obs.available) if up), None)
        wanted = Choice.SPOT if candidate is not None else Choice.NONE
        return to_placement(guard(single_view(obs, pool=candidate), wanted), candidate)
