"""What a replay runs and what the simulator predicts for it (pure: no runtime, no AWS).

A replay plays one window of a multi-pool trace set (`bench/specs/multi-zone.md`) against
the live control plane on the local runtime, with time compressed: `time_scale` trace
seconds pass per real second, and one trace tick (G) lasts exactly one reconcile period,
the live policy's tick. The live control plane counts whole seconds (its tick, changeover,
work and deadline), so the plan insists on a whole-second tick and says which of the job's
figures round.

Pool k of the set (file-name order) becomes the spot pool of instance type `INSTANCE_TYPE`
in the k-th zone of the local stack: the control plane lists its candidate pools in that
order, so ties break as in the simulator. The live control plane has one region; a set
across regions is played as if its pools were zones of one (no transfers live), which is
said in the report.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from respot.policy.exceptions import JobSpecError
from respot.policy.model import (
    ON_DEMAND_PRICE_PER_HOUR,
    SECONDS_PER_HOUR,
    SPOT_PRICE_PER_HOUR,
    Job,
    on_demand_cost,
)
from respot.policy.omniscient_pools import optimal_pool_normalized_costs
from respot.policy.placement_bench import make_pools_policy
from respot.policy.pools import (
    CHECKPOINT_GB,
    TRANSFER_PRICE_PER_GB,
    PoolSet,
    PoolsOutcome,
    simulate_pools,
)

INSTANCE_TYPE = "g5.xlarge"  # every live pool's type: the benchmark prices all pools alike
LIVE_ZONES = ("us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d", "us-east-1e", "us-east-1f")
DEFAULT_TICK_SECONDS = 2  # real seconds per trace tick when no time scale is given
EXTRA_TICKS = 30  # trace the live market keeps playing after the window (a late finish)


@dataclass(frozen=True)
class ReplayPlan:
    """One window of a set, one job (C, D, d in trace seconds) and the time compression."""

    pool_set: PoolSet
    start: int  # the window's first tick
    job: Job
    tick_seconds: int  # real seconds one trace tick lasts (= the live reconcile period)

    @classmethod
    def build(
        cls,
        pool_set: PoolSet,
        job: Job,
        *,
        window_start: int | None = None,
        window: int | None = None,
        windows: int = 20,
        time_scale: float | None = None,
    ) -> ReplayPlan:
        """Check everything before anything runs; errors name the option and the fix."""
        gap = pool_set.gap_seconds
        if len(pool_set.pools) > len(LIVE_ZONES):
            raise JobSpecError(
                f"--traces: {len(pool_set.pools)} pools, the local stack has "
                f"{len(LIVE_ZONES)} zones; pass at most {len(LIVE_ZONES)} trace files"
            )
        if not job.feasible(gap):
            raise JobSpecError(
                f"--deadline-hours: on-demand alone cannot finish C={job.work_seconds} s "
                f"with d={job.changeover_seconds} s by D={job.deadline_seconds} s at "
                f"G={gap} s; give a later deadline"
            )
        size = job.window_ticks(gap)
        if (window_start is None) == (window is None):
            raise JobSpecError("give exactly one of --window-start N and --window K")
        if window is not None:
            if not 0 <= window < windows:
                raise JobSpecError(f"--window {window}: must be in 0..{windows - 1} (--windows)")
            start = pool_set.window_starts(size, windows)[window]
        else:
            assert window_start is not None
            start = window_start
        if not 0 <= start <= len(pool_set) - size:
            raise JobSpecError(
                f"--window-start {start}: a window of {size} ticks must start in "
                f"0..{len(pool_set) - size} of this set"
            )
        tick = DEFAULT_TICK_SECONDS if time_scale is None else gap / time_scale
        if time_scale is not None and (time_scale <= 0 or abs(tick - round(tick)) > 1e-9):
            raise JobSpecError(
                f"--time-scale {time_scale}: a tick of G={gap} s must last a whole number of "
                f"real seconds (the live policy's tick); use G/k, e.g. {gap / 2:g} for 2 s"
            )
        if round(tick) < 1:
            raise JobSpecError(
                f"--time-scale {time_scale}: a tick would last {tick:.2f} s; the control plane "
                f"needs at least 1 s per tick; use at most {gap:g}"
            )
        return cls(pool_set=pool_set, start=start, job=job, tick_seconds=round(tick))

    # ---- time ------------------------------------------------------------------------------

    @property
    def gap(self) -> int:
        """G, trace seconds per tick."""
        return self.pool_set.gap_seconds

    @property
    def time_scale(self) -> float:
        """Trace seconds per real second."""
        return self.gap / self.tick_seconds

    def real(self, trace_seconds: float) -> float:
        """Real seconds for a trace duration."""
        return trace_seconds / self.time_scale

    def live_seconds(self) -> dict[str, float]:
        """C, D, d in real seconds as the job asks for them (the control plane truncates)."""
        return {
            "work": self.real(self.job.work_seconds),
            "deadline": self.real(self.job.deadline_seconds),
            "changeover": self.real(self.job.changeover_seconds),
        }

    def rounding(self) -> list[str]:
        """The job's figures the live control plane sees rounded down to whole seconds."""
        notes = []
        for name, value in self.live_seconds().items():
            if abs(value - math.floor(value)) > 1e-6:
                notes.append(f"{name} {value:.2f} s is seen live as {math.floor(value)} s")
        return notes

    # ---- the window --------------------------------------------------------------------------

    @property
    def window_ticks(self) -> int:
        """floor(D/G) + 1 ticks, as the benchmark's windows."""
        return self.job.window_ticks(self.gap)

    def window(self) -> tuple[tuple[int, ...], ...]:
        """Every pool's availability over the window."""
        return self.pool_set.window(self.start, self.window_ticks)

    def live_rows(self) -> tuple[tuple[int, ...], ...]:
        """What the live market plays: the window, then the set goes on (a late finish)."""
        end = min(self.start + self.window_ticks + EXTRA_TICKS, len(self.pool_set))
        return tuple(row[self.start : end] for row in self.pool_set.availability)

    def zones(self) -> tuple[str, ...]:
        """The live zone that plays each pool of the set."""
        return LIVE_ZONES[: len(self.pool_set.pools)]

    def events(self) -> list[str]:
        """What happens in the window: each pool's outages, in ticks (for choosing windows)."""
        lines = []
        for pool, row in zip(self.pool_set.pools, self.window(), strict=True):
            downs = [t for t in range(1, len(row)) if row[t] == 0 and row[t - 1] == 1]
            ups = [t for t in range(1, len(row)) if row[t] == 1 and row[t - 1] == 0]
            lines.append(
                f"{pool.name}: {sum(row)}/{len(row)} ticks up, starts "
                f"{'up' if row[0] else 'down'}, lost at {downs or '-'}, back at {ups or '-'}"
            )
        return lines


# ---- the prediction ----------------------------------------------------------------------------

# respot-omniscient-view: the same policy shown every pool, which live never is (an upper
# bound); the prediction live is held to is "respot", the policy fed live's own sightings.
REFERENCE_POLICIES = ("up-round-robin", "greedy-any", "respot-omniscient-view")


@dataclass(frozen=True)
class Prediction:
    """The simulator on the plan's window: respot, the references and the optimum."""

    outcomes: dict[str, PoolsOutcome]
    omniscient: float  # normalized

    @property
    def respot(self) -> PoolsOutcome:
        """respot's multi-pool policy on the window, as live places one job (`LiveView`)."""
        return self.outcomes["respot"]


def predict(plan: ReplayPlan) -> Prediction:
    """Run the simulator exactly as `respot bench placement` does, on this one window.

    "respot" is the benchmark's figure of record: the multi-pool policy fed only the job's
    own sightings (`respot.policy.live_view.LiveView`), which is what the live control plane
    feeds it (`respot.core.pool_placement`); a replay that drifts from it fails.
    """
    window = plan.window()
    outcomes = {
        name: simulate_pools(
            make_pools_policy(name),
            plan.pool_set.pools,
            window,
            plan.job,
            plan.gap,
        )
        for name in ("respot", *REFERENCE_POLICIES)
    }
    best = optimal_pool_normalized_costs(plan.pool_set.pools, [window], plan.job, plan.gap)
    return Prediction(outcomes=outcomes, omniscient=float(best[0]))


# ---- the live run's cost, in the benchmark's units ---------------------------------------------


@dataclass(frozen=True)
class LiveAttempt:
    """One attempt of the live job as its cost ledger has it (real seconds)."""

    market: str  # "spot" or "on-demand"
    zone: str
    billed_seconds: float  # launch (or binding) to end
    end: str | None
    ledger_usd: float  # what the ledger charged, at the local market's prices


@dataclass(frozen=True)
class LiveCost:
    """The live run's ledger converted to trace time and the benchmark's prices."""

    spot_hours: float  # trace hours
    on_demand_hours: float
    transfers: int
    cost_usd: float  # at the benchmark's prices, in trace time
    normalized: float
    ledger_usd: float  # the ledger's own figure for the compressed run

    @classmethod
    def of(cls, plan: ReplayPlan, attempts: Sequence[LiveAttempt]) -> LiveCost:
        """Spot and on-demand hours from the ledger, and the set's transfers.

        The live stack has one region; its zone k plays pool k, whose region the set names.
        A transfer is counted as the rules do: a spot attempt in a pool of another region
        than `home` (the newest checkpoint's, first pool 0's) moves it; on-demand runs in
        `home`.
        """
        spot = sum(a.billed_seconds for a in attempts if a.market == "spot")
        od = sum(a.billed_seconds for a in attempts if a.market != "spot")
        spot_h = spot * plan.time_scale / SECONDS_PER_HOUR
        od_h = od * plan.time_scale / SECONDS_PER_HOUR
        region = {z: p.region for z, p in zip(plan.zones(), plan.pool_set.pools, strict=True)}
        home, transfers = plan.pool_set.pools[0].region, 0
        for a in attempts:
            if a.market == "spot" and region.get(a.zone, home) != home:
                transfers += 1
                home = region[a.zone]
        cost = (
            spot_h * SPOT_PRICE_PER_HOUR
            + od_h * ON_DEMAND_PRICE_PER_HOUR
            + transfers * CHECKPOINT_GB * TRANSFER_PRICE_PER_GB
        )
        return cls(
            spot_hours=spot_h,
            on_demand_hours=od_h,
            transfers=transfers,
            cost_usd=cost,
            normalized=cost / on_demand_cost(plan.job, plan.gap),
            ledger_usd=sum(a.ledger_usd for a in attempts),
        )


def tolerance(plan: ReplayPlan, predicted: PoolsOutcome, floor: float) -> float:
    """How far live may be from predicted (normalized) before the replay fails.

    The live system decides on ticks too, but starts, stops and bills on the second: every
    placement change (and the end) may move up to one tick's billing either way. So: one
    on-demand tick per predicted changeover, plus one, over the on-demand-only cost, and at
    least `floor`.
    """
    od_tick = ON_DEMAND_PRICE_PER_HOUR * plan.gap / SECONDS_PER_HOUR
    return max(floor, (predicted.changeovers + 1) * od_tick / on_demand_cost(plan.job, plan.gap))
