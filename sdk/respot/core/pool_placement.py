"""Live placement across pools: `respot.policy.MultiPoolPolicy` fed from the pools' shared past.

The job's side of the observation (C, w, D, d, G, r, the tick) is the single-zone one
(`respot.core.deadline.observe`); the pools are the spot candidates of the job (its instance
types x the stack's subnets) and their histories are what the account observed of them since
the job was created (`respot.core.pool_watch.view`: its colleagues' sightings included, none
from before its start), read by the control plane before it decides. A pool seen this tick
(by any job) is available as seen; a pool not seen this tick counts as available when
placing (asking is how to find out: a refusal marks it down for this tick and the next pool
is asked), and so when deciding whether to leave on-demand (the return asks; refused returns
back off, `switch_running`). The policy is the benchmark's, in the benchmark's
configuration; it is told which pools were seen this tick (`PoolsObservation.observed`),
since the age of a run nobody saw is unknown. What one job would cost this way on the
benchmark's windows: `respot.policy.live_view`.

The answer for a job that needs capacity is a market plus the spot pools ranked by the
policy: its pick first, then its pick with that pool down, and so on while it still wants
spot. The lifecycle asks them in that order. Jobs without a deadline (or a work estimate)
keep `SpotFirstPolicy`'s market; their spot pools are the fixed order with the pools seen
down this tick last.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime

from respot.core.deadline import BOOT_GUARD, DeadlinePolicy, boot_unguarded, observe
from respot.core.job import JobRecord, Market, Placement
from respot.core.placement import ControlSettings, MarketChoice, SpotFirstPolicy, candidates
from respot.core.pool_watch import PoolKey, PoolRecord, PoolsView, absolute_tick, view
from respot.core.transfer import checkpoint_gb, checkpoint_region
from respot.policy import Choice, MultiPoolPolicy, Observation, Pool, PoolsObservation
from respot.policy import Placement as PoolChoice
from respot.policy.live_view import MAX_SPOT_RETURNS
from respot.policy.multipool import PoolsDecision
from respot.policy.pools import NOTHING, ON_DEMAND, region_of


def _observation(
    base: Observation,
    pools: list[Placement],
    seen: PoolsView,
    available: tuple[bool, ...],
    observed: tuple[bool, ...],
    held: PoolChoice,
    job: JobRecord,
) -> PoolsObservation:
    # Pools in satellite regions (docs/deploy.md) are in other regions than the checkpoint's:
    # a move there pays the transfer. With one region every pool is where the checkpoint is.
    regions = [region_of(p.availability_zone) for p in pools]
    size = checkpoint_gb(job)
    return PoolsObservation(
        tick=base.tick,
        gap_seconds=base.gap_seconds,
        work_seconds=base.work_seconds,
        deadline_seconds=base.deadline_seconds,
        changeover_seconds=base.changeover_seconds,
        done_seconds=base.done_seconds,
        remaining_changeover_seconds=base.remaining_changeover_seconds,
        held=held,
        home=checkpoint_region(job, default=regions[0]),
        pools=tuple(Pool(PoolKey.of(p).name, r) for p, r in zip(pools, regions, strict=True)),
        available=available,
        observed=observed,
        histories=seen.histories,
        **({"checkpoint_gb": size} if size is not None else {}),
    )


def _held(job: JobRecord, base: Observation, pools: list[Placement]) -> PoolChoice:
    if base.held is Choice.ON_DEMAND:
        return ON_DEMAND
    att = job.current
    if base.held is Choice.SPOT and att is not None:
        for index, pool in enumerate(pools):
            if PoolKey.of(pool) == PoolKey.of(att.placement):
                return PoolChoice.spot(index)
    return NOTHING


def _rank(
    base: Observation,
    pools: list[Placement],
    seen: PoolsView,
    available: list[bool],
    held: PoolChoice,
    job: JobRecord,
) -> tuple[PoolsDecision, list[Placement]]:
    """The policy's decision, and the spot pools in the order it would take them.

    Its pick, then its pick with that pool down, and so on while it still takes spot (at
    most one decision per pool).
    """
    up = list(available)
    observed = [s is not None for s in seen.seen_now]
    ranked: list[Placement] = []
    first: PoolsDecision | None = None
    for _ in pools:
        decision = MultiPoolPolicy().decide(
            _observation(base, pools, seen, tuple(up), tuple(observed), held, job)
        )
        first = first or decision
        if decision.placement.choice is not Choice.SPOT or decision.placement.pool is None:
            break
        ranked.append(pools[decision.placement.pool])
        up[decision.placement.pool] = False  # if it refuses: seen down this tick
        observed[decision.placement.pool] = True
    assert first is not None, "a job has at least one spot pool"
    return first, ranked


class PoolPlacementPolicy:
    """The `MarketPolicy` of the live control plane: market and ranked pools, with reasons."""

    def __init__(self, records: Mapping[PoolKey, PoolRecord] | None = None) -> None:
        self.records = dict(records or {})
        self._deadline = DeadlinePolicy()
        self._fallback = SpotFirstPolicy()

    def _view(
        self, job: JobRecord, pools: list[Placement], now: datetime, settings: ControlSettings
    ) -> PoolsView:
        """The account's sightings of `pools` since the job was created (`pool_watch.view`)."""
        keys = [PoolKey.of(p) for p in pools]
        since = absolute_tick(job.created_at, settings)
        return view(self.records, keys, absolute_tick(now, settings), since)

    def choose(self, job: JobRecord, now: datetime, settings: ControlSettings) -> MarketChoice:
        """Spot (with its pools ranked), on-demand or wait, with the reason."""
        pools = candidates(job, Market.SPOT, settings)
        seen = self._view(job, pools, now, settings)
        base = observe(job, now, settings)
        if base is None or base.ticks_left <= 0 or not pools:
            choice = (
                self._fallback.choose(job, now, settings)
                if base is None
                else self._deadline.choose(job, now, settings)
            )
            if choice.market is Market.SPOT:
                down = [p for p, s in zip(pools, seen.seen_now, strict=True) if s is False]
                up = [p for p in pools if p not in down]
                return replace(choice, pools=tuple(up + down))
            return choice
        available = [s is not False for s in seen.seen_now]  # not seen now: worth asking
        first, ranked = _rank(base, pools, seen, available, _held(job, base, pools), job)
        reason = f"deadline policy across pools: {first.mode.value}"
        if first.placement.choice is Choice.SPOT:
            if boot_unguarded(base) and job.spec.on_demand_fallback:
                return MarketChoice(Market.ON_DEMAND, reason + BOOT_GUARD)
            best = ranked[0]
            reason += f", {best.instance_type} in {best.availability_zone} first of {len(ranked)}"
            return MarketChoice(Market.SPOT, reason, pools=tuple(ranked))
        if first.placement.choice is Choice.ON_DEMAND:
            return DeadlinePolicy._finish_late(job, reason)
        if base.remaining_seconds <= 0:
            return MarketChoice(
                Market.SPOT, "deadline policy across pools: work estimate reached; finishing"
            )
        return MarketChoice(None, reason)

    def switch_running(
        self, job: JobRecord, now: datetime, settings: ControlSettings
    ) -> MarketChoice | None:
        """For a job training on on-demand: spot if the policy says so, else None.

        On-demand -> spot when the multi-pool policy switches (a run of spot in the pools'
        histories old enough to be worth two changeovers; pools nobody asked this tick count
        as available, as when placing, so a job alone in its account returns by asking) and
        the slack pays for the whole changeover to spot and the one back
        (tests/core/test_spot_return.py), at most `MAX_SPOT_RETURNS` moves per job. A return
        that finds no spot after all costs API calls only (spot is asked before the
        on-demand instance stops: `lifecycle.returns._begin_return`), and the next one backs off
        (1, 2, 4, ... ticks, at most two changeovers). A job training on spot stays there:
        leaving a running spot instance for on-demand never finishes sooner
        (`respot.core.deadline`'s docstring).
        """
        att = job.current
        if att is None or att.end is not None or att.notice_at is not None:
            return None
        if att.started_at is None or att.instance_id is None:
            return None
        if att.placement.market is Market.SPOT:
            return None
        # Returns that moved the job (each a changeover); refused ones are the backoff's.
        moved = int(job.policy.get("spot_returns", 0)) - int(job.policy.get("refused_returns", 0))
        returns = max(moved, 0)
        if returns >= MAX_SPOT_RETURNS:
            return None
        backoff = job.policy.get("next_return_at")
        if backoff is not None and now < datetime.fromisoformat(backoff):
            # the last return found no spot anywhere (`lifecycle.returns._refused_return`)
            return None
        pools = candidates(job, Market.SPOT, settings)
        base = observe(job, now, settings)
        if base is None or base.ticks_left <= 0 or not pools:
            return None
        seen = self._view(job, pools, now, settings)
        # As when placing: a pool seen this tick is as seen, one nobody asked counts as
        # available (the return asks it; a refusal of every pool leaves the job training on
        # on-demand, and the next return backs off), with a run of
        # unknown age. Whether to leave on-demand is the policy's: its switch needs a run
        # of spot (the union's, from the histories) old enough to pay two changeovers.
        available = [s is not False for s in seen.seen_now]
        if not any(available):
            return None
        first, ranked = _rank(base, pools, seen, available, ON_DEMAND, job)
        if not ranked or first.placement.choice is not Choice.SPOT:
            return None
        if base.slack_seconds - base.changeover_seconds < base.changeover_seconds:
            # As `boot_unguarded`: live, a booting instance is not abandoned (the safety net
            # moves a running one), so the return must leave slack for its whole changeover
            # and the one back.
            return None
        best = ranked[0]
        how = "seen up" if seen.seen_now[pools.index(best)] else "to be asked first"
        reason = (
            f"deadline policy across pools: {first.mode.value}, spot {how} in "
            f"{best.instance_type} {best.availability_zone} "
            f"(return {returns + 1} of at most {MAX_SPOT_RETURNS})"
        )
        return MarketChoice(Market.SPOT, reason, pools=tuple(ranked))
