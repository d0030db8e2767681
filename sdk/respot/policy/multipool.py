"""respot's multi-pool policy: the single-zone deadline policy over the pools' union.

At each tick it chooses a pool's spot, on-demand, or nothing, from what an online policy may
see (`PoolsObservation`: every pool's present and past, the job, where the checkpoint is).

1. **Which pool.** A job already on a pool's spot keeps it while it lasts (moving would pay a
   changeover now for a run that is still alive). Otherwise, among the pools that have spot
   now, it takes the one with the smallest expected overhead per second of work:
   (d * (p_spot + lambda) + fee_k) / min(P_k, work left), where P_k is the work a new
   instance on pool k is expected to do before k's current run ends (`_expected_progress`:
   the run's remaining life learned from k's own past run lengths with the single-zone
   policy's Lindy prior, plus the other pools' completed runs as a second prior of one
   run's weight, `_choice_statistics`; less the changeover),
   d * (p_spot + lambda) is what the changeover
   costs (billed seconds plus slack at its price lambda), and fee_k the checkpoint transfer
   if k is in another region. A long-lived pool in another region wins over a flickering
   one at home only when its expected work pays for the transfer. Here lambda is the slack
   value of `_slack_value`: the single-zone price weighted by the chance that the slack
   binds at all.
2. **Whether to wait instead** (`_worth_waiting`): with nothing running, hold nothing for a
   tick when that tick of slack is worth less than what it likely saves: the changeover on
   a run that has not proven itself yet, or the transfer when the checkpoint's region is
   likely back next tick.
3. **Whether to hold it, on-demand, or nothing.** The single-zone `RespotPolicy` decides,
   seeing spot as the union of the pools: available when any pool is; its availability
   (prior 1 - 2^-K for K pools, `_union_prior`), outage hazards, run rate, and the age,
   hazard and survival of the current run (a trip off on-demand ends only when no pool has
   spot) learned from the union's past; plus the transfer fee lost if the run ends at once
   after a move to another region. Its hold and on-demand rules price slack at the slack
   value of point 1, not the single-zone all-or-nothing price.
   In an outage of every pool, on-demand from idle is bought as
   late as possible (`_buy_in_outage`): only when the outage time expected ahead exceeds
   the slack and another tick of waiting would leave less slack than the restarts ahead
   need; and no later than the last tick at which that on-demand can still hand the job
   back to spot (`_last_call`: slack 3d, its own changeover and a spot boot's 2d).
4. **The safety net** (`respot.policy.safety.guard`) is applied last, unchanged: the time
   rules do not depend on the pool, so the single-zone proof carries over and no deadline is
   missed when on-demand alone could make it.

With one pool the union is the pool, there is no fee, no choice of pool, no waiting rule
and no outage rule, and the slack value is the single-zone price, so the decisions are
exactly `RespotPolicy`'s (a test compares them tick by tick).

One configuration, benchmark and live (`respot.core.pool_placement`). Live, a pool nobody
asked this tick counts as available (asking is free; a refusal marks it down and the next
pool is asked) and its history repeats its last sighting, so the age of its current run is
unknown (`PoolsObservation.observed`): the run rule of point 2 waits only for a run seen up
this tick. Otherwise such a pool, last seen down, would look like a run just begun at every
tick and a job would wait for it indefinitely.

No constant here is fitted to a trace set: the priors are `RespotParameters`', the prices
and the fee are the benchmark's, and the overhead rule has no free parameter.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from respot.policy.history import PooledRunStatistics, RunStatistics
from respot.policy.model import Choice, HistoryView
from respot.policy.planner import GRID
from respot.policy.planner import slack_value as planned_slack_value
from respot.policy.pool_baselines import single_view, to_placement
from respot.policy.poolmodel import CachedCoMovement, PoolModel, RunLaw
from respot.policy.pools import NOTHING, Placement, PoolsObservation
from respot.policy.respot_policy import (
    ON_DEMAND_PRICE_PER_SECOND,
    SPOT_PRICE_PER_SECOND,
    Decision,
    Mode,
    RespotParameters,
    RespotPolicy,
)
from respot.policy.safety import guard, is_safe

# `MultiPoolPolicy(plan=...)`: off, or how the plan's slack value combines with the rule's
PLAN_MODES = ("", "replace", "lower", "raise")


@dataclass(frozen=True, slots=True)
class PoolsDecision:
    """A placement with the mode that produced it (for logs and Slack threads)."""

    placement: Placement
    mode: Mode


class _Cached:
    """Run statistics of one history, extended in place while it is a longer view of it."""

    __slots__ = ("source", "stats")

    def __init__(self) -> None:
        self.stats = RunStatistics()
        self.source: tuple[int, ...] | None = None

    def update(self, history: Sequence[int]) -> RunStatistics:
        seen = self.stats.ticks
        if (
            isinstance(history, HistoryView)
            and history.source is self.source
            and len(history) >= seen
        ):
            self.stats.extend(history.source[seen : len(history)])
            return self.stats
        self.stats = RunStatistics(history)
        self.source = history.source if isinstance(history, HistoryView) else None
        return self.stats


def _boot_completes(obs: PoolsObservation, *, waited: int) -> bool:
    """Whether a new spot instance started `waited` ticks from now can finish its changeover.

    The net (`safety.is_safe`) keeps spot only while slack - min(r, G) >= d; over a whole
    changeover the slack falls by d, so an uninterrupted boot completes under the net iff the
    slack at its start is at least 2d, or its first tick already finishes the work. (With
    d > G the net admits a start with less, d + G, and abandons it mid-boot.)
    """
    if obs.gap_seconds - obs.changeover_seconds >= obs.remaining_seconds:
        return True
    return obs.slack_seconds - waited * obs.gap_seconds >= 2 * obs.changeover_seconds


def _tail(history: Sequence[int], start: int, stop: int) -> Iterable[int]:
    """history[start:stop] without indexing tick by tick (a view's source is sliced once)."""
    if isinstance(history, HistoryView):
        return history.source[start:stop]
    return itertools.islice(history, start, stop)


def _start_ticks(obs: PoolsObservation, *, later: int, until_done: bool) -> tuple[int, int]:
    """(m, H): the changeover's ticks m = ceil(d / G) and the horizon H of a start `later`
    ticks from now (`until_done`: no further than the tick that would finish the work W,
    m G - d + (H - m) G >= W). A start with H < m makes no progress."""
    gap, changeover = obs.gap_seconds, obs.changeover_seconds
    steps = max(1, -(-changeover // gap))
    horizon = obs.ticks_left - later
    if until_done:
        horizon = min(horizon, -(-(obs.remaining_seconds + changeover) // gap))
    return steps, horizon


def _expected_progress(
    obs: PoolsObservation,
    stats: RunStatistics | PooledRunStatistics,
    prior: float,
    *,
    later: int = 0,
    until_done: bool = False,
    new_run: bool = False,
) -> float:
    """Seconds of work a new instance on this pool is expected to do before the pool's run ends.

    `later` > 0: the same for an instance started `later` ticks from now, given that the run
    is still up then (its age is then `later` ticks more: what waiting for it to prove itself
    would buy). `new_run`: the same for a run that starts when the instance does (age 0: a
    pool waited for through its outage).

    `until_done`: count the run's life only up to the tick that would finish the remaining
    work W (the expectation of min(progress, W), up to a tick's rounding), not all of it.
    A young run's mean life is dominated by its long tail; once that tail reaches past the
    end of the job, min(E[progress], W) is W whether or not the run is likely to end in
    the next ticks, and a lookahead on it sees nothing to gain by waiting.

    The run is up now and has lasted `age` ticks before; L' ticks remain (this one included),
    with P(L' > t) = S(age + t) / S(age) from the pool's past runs and the Lindy prior. The
    changeover takes m = ceil(d / G) ticks, the last of which makes m G - d of progress; every
    later tick makes G. So E = (m G - d) P(L' > m - 1) + G * sum_{t = m}^{H - 1} P(L' > t),
    the sum being P(L' > m) times the expected residual life at age + m (capped at the
    horizon H). With d <= G this is G E[min(L', H)] - d.
    """
    gap, changeover = obs.gap_seconds, obs.changeover_seconds
    steps, horizon = _start_ticks(obs, later=later, until_done=until_done)
    if horizon < steps:
        return 0.0
    age = 0 if new_run else stats.current_age(1) + later
    alive = stats.survival(1, age, prior)

    def lasting(more: int) -> float:  # P(L' > more)
        return stats.survival(1, age + more, prior) / alive if more else 1.0

    tail = lasting(steps) * stats.expected_residual(1, age + steps, horizon - steps, prior)
    return (steps * gap - changeover) * lasting(steps - 1) + gap * tail


def _found_progress(
    obs: PoolsObservation, stats: RunStatistics, prior: float, *, until_done: bool = False
) -> float:
    """`_expected_progress` of a run found up by asking, its age unknown (renewal theory).

    Live, a pool nobody asked this tick has no known age: asking finds its run in progress,
    whose remaining life R has P(R > t) = T(t) / T(0), T(t) = sum over x >= t of S(x)
    (`RunStatistics.found_lasting`), longer than a new run's when long runs are common. The
    same sum as `_expected_progress`: E = (m G - d) P(R > m - 1) + G sum_{t=m}^{H-1} P(R > t).
    """
    gap, changeover = obs.gap_seconds, obs.changeover_seconds
    steps, horizon = _start_ticks(obs, later=0, until_done=until_done)
    if horizon < steps:
        return 0.0
    ages = max(stats.ticks, 1)  # the ages the history can show
    first = stats.found_lasting(1, steps - 1, steps, ages, prior)
    rest = stats.found_lasting(1, steps, horizon, ages, prior)
    return (steps * gap - changeover) * first + gap * rest


class _UnseenRun(RunStatistics):
    """The union's statistics, for a return from on-demand to a pool nobody asked this tick.

    Live, such a pool counts as available (the return asks it; a refusal costs nothing) but
    its history repeats its last sighting, often the refusal of long ago, so its run reads
    as one that starts this very tick, the likeliest to end at once: a job that bought
    on-demand in an outage then held it for good while pools had spot again (synthetic
    9-pool markets, issue 28: 140 ticks of on-demand where round-robin, which sees the
    pools, bought 101). A run found up by asking at an arbitrary tick is not a new one; by
    renewal theory the chance that a run in progress ends after a given tick is the rate at
    which up-runs end per up-tick: completed up-runs over up-ticks, with the policy's prior
    cycle (`cycle_prior_runs` runs over `availability_prior_seconds` of up time), here over
    every pool. The same holds for the switch budget (`RespotPolicy._switch_affordable`),
    which leaves on-demand only for a run whose age puts it among the longest the slack can
    afford, by its survival at that age: the age of a run found up is unknown, so the
    survival is its mean over the ages a run found in progress has (`found_survival`: long
    runs are found more often). With age 0 the survival was 1 and the budget held
    on-demand while a pool had spot for hours (aws-2022-10-26, 52 h / 0.2 h, window 26: 76
    ticks of on-demand against the everything-seen policy's 19). The rest is the union's.
    """

    __slots__ = ("_rate",)

    def __init__(self, union: RunStatistics, rate: float) -> None:
        super().__init__()
        for name in RunStatistics.__slots__:
            setattr(self, name, getattr(union, name))
        self._rate = rate

    def hazard(self, value: int, age: int, prior_runs: float) -> float:
        if value == 1:
            return self._rate
        return super().hazard(value, age, prior_runs)

    def survival(self, value: int, age: int, prior_runs: float) -> float:
        if value == 1:  # the age of the run found is unknown: averaged over it
            return self.found_survival(1, self.ticks, prior_runs)
        return super().survival(value, age, prior_runs)


class MultiPoolPolicy:
    """respot across pools: choose the pool by expected overhead, then decide as one zone.

    A decision depends on the observation alone; cached statistics are integer counts that a
    fresh object rebuilds identically (the single-zone policy's contract).
    """

    name = "respot"

    def __init__(self, parameters: RespotParameters | None = None, *, plan: str = "") -> None:
        """`plan` (issue 28's plan over the learned pool model, across pools only): "" off;
        otherwise the wait for the checkpoint's region uses the learned outage laws and
        co-movement (`respot.policy.poolmodel`), and the slack value off spot is the
        plan's (`respot.policy.planner`) instead of the normal approximation ("replace"),
        the smaller of the two ("lower") or the larger ("raise"). Off by default: see
        bench/placement/issue28/README.md, "The planner", for what it measured."""
        if plan not in PLAN_MODES:
            raise ValueError(f"plan must be one of {PLAN_MODES}, got {plan!r}")
        self.core = RespotPolicy(parameters)
        self.plan = plan
        self._pools: list[_Cached] = []
        self._union = RunStatistics()
        self._union_sources: tuple[tuple[int, ...], ...] | None = None
        self._movement = CachedCoMovement()
        self._planned: tuple[tuple[object, ...], float] | None = None
        self._model: PoolModel | None = None

    def place(self, obs: PoolsObservation) -> Placement:
        """The placement for this tick."""
        return self.decide(obs).placement

    def decide(self, obs: PoolsObservation) -> PoolsDecision:
        """The placement for this tick and the mode that led to it."""
        if obs.remaining_seconds == 0:
            return PoolsDecision(NOTHING, Mode.DONE)
        pools = self._statistics(obs)
        supply = pools[0] if len(pools) == 1 else self._union_statistics(obs)
        slack_value = self._slack_value(obs, supply, pools)
        model: PoolModel | None = None
        if self.plan and len(pools) > 1:
            model = PoolModel(
                obs.pools,
                pools,
                self._movement.update(obs.histories),
                self.core.parameters.lindy_prior_runs,
            )
            if obs.held.choice is Choice.NONE:  # idle: the waits, the pool and the start
                planned = self._plan_value(obs, model, supply)
                if self.plan == "replace":
                    slack_value = planned
                elif self.plan == "lower":
                    slack_value = min(slack_value, planned)
                else:  # "raise"
                    slack_value = max(slack_value, planned)
        self._model = model
        candidate = self._candidate(obs, self._choice_statistics(pools), slack_value)
        if candidate is not None and self._worth_waiting(
            obs, pools, supply, candidate, slack_value
        ):
            return PoolsDecision(NOTHING, Mode.WAIT)
        view = single_view(obs, pool=candidate)
        # A trip off on-demand ends when no pool has spot any more (a lost pool is replaced
        # by another that has spot): the union's run is the one whose hazard and survival
        # decide a switch. The candidate's own run only chose the pool.
        run = supply
        if (
            len(obs.pools) > 1
            and obs.held.choice is Choice.ON_DEMAND
            and candidate is not None
            and not obs.seen_now(candidate)
        ):
            run = _UnseenRun(supply, self._up_run_end_rate(obs, pools))
        fee = 0.0 if candidate is None else obs.transfer_fee(candidate)
        wanted = self.core.wanted(
            view,
            supply=supply,
            run=run,
            move_fee=fee,
            supply_prior=self._union_prior(obs),
            # Across pools, the hold and on-demand rules price slack as the pool choice and
            # the waits do: by the chance that it binds.
            slack_value=slack_value if len(obs.pools) > 1 else None,
        )
        if (
            wanted.mode is Mode.CATCH_UP
            and obs.held.choice is Choice.NONE
            and len(obs.pools) > 1
            and not self._buy_in_outage(obs, pools, supply)
        ):
            wanted = Decision(Choice.NONE, Mode.WAIT)
        if (
            wanted.choice is Choice.NONE
            and obs.held.choice is Choice.NONE
            and candidate is None
            and len(obs.pools) > 1
            and self._last_call(obs, supply)
        ):
            wanted = Decision(Choice.ON_DEMAND, Mode.CATCH_UP)
        choice = guard(view, wanted.choice)
        mode = wanted.mode if choice is wanted.choice else Mode.SAFETY_NET
        return PoolsDecision(to_placement(choice, candidate), mode)

    def _buy_in_outage(
        self, obs: PoolsObservation, pools: Sequence[RunStatistics], supply: RunStatistics
    ) -> bool:
        """Whether to start on-demand now in an outage of every pool, rather than wait a tick.

        Asked only when nothing runs and the single-zone rule would start on-demand (behind
        the pace, at the lock-in price). On-demand bought in an outage keeps a tick of slack,
        which is worth something only if the slack binds later; if it does not (spot covers
        the rest of the work), that on-demand was wasted. While the slack binds, a tick of
        it kept now or later in the window is worth the same, but later the job knows more
        (this outage may end, the outages ahead may be short). So buy as late as possible:
        only when both
        1. the outage time still to come is expected to exceed the slack: the current
           outage's remainder E[min(L - a, R) | L > a] (the union's completed outages with
           the Lindy prior, a its age) plus (1 - f) times the rest of the window, f the
           union's availability *before* this outage began (its own ticks are in the
           remainder term; counting them in f too made a job that starts in an outage
           conclude that spot is scarce for the whole window); and
        2. another tick of waiting would leave less slack than the changeovers still ahead
           need (`_changeover_reserve`), so later would be too late: below that reserve
           the job can no longer afford the restarts that take spot back, and the safety
           net ends in on-demand to the deadline.
        """
        if self._outage_ahead(obs, supply) <= obs.slack_seconds:
            return False
        return obs.slack_seconds - obs.gap_seconds < self._changeover_reserve(obs, pools, supply)

    def _outage_ahead(self, obs: PoolsObservation, supply: RunStatistics) -> float:
        """Seconds of union outage expected in the rest of the window, in an outage of every pool.

        The current outage's remainder E[min(L - a, R) | L > a] (the union's completed outages
        with the Lindy prior, a its age) plus (1 - f) times the rest of the window, f the
        union's availability *before* this outage began (`_buy_in_outage`, point 1).
        """
        p = self.core.parameters
        gap = obs.gap_seconds
        horizon = obs.ticks_left * gap
        age = supply.current_age(0)
        remainder = gap * supply.expected_residual(0, age, obs.ticks_left, p.lindy_prior_runs)
        before = (supply.ticks - age) * gap + p.availability_prior_seconds
        available = (
            supply.up_ticks * gap + self._union_prior(obs) * p.availability_prior_seconds
        ) / before
        return remainder + (1 - available) * max(horizon - remainder, 0.0)

    def _last_call(self, obs: PoolsObservation, supply: RunStatistics) -> bool:
        """Whether on-demand bought now, in an outage, is the last that can hand back to spot.

        Asked only when nothing runs and no pool has spot, after the rules above chose to
        wait. On-demand's own changeover takes d of slack; after it the slack stays put, and
        a spot instance started from it completes its changeover under the net only with
        at least 2d (`_boot_completes`). So on-demand bought at a slack s >= 3d can hand
        the job back to spot when a pool returns; bought a tick later, at s - G < 3d, it
        cannot, and neither can a spot start once the net takes over: the job is locked on
        on-demand for the rest of its work, whatever spot does. The other rules price slack
        by a fluid model (`_slack_value`, the single-zone pace rule), which has no term for
        that threshold, and waited through it (held-out 8-node pools, 60 h / 0.2 h, window
        4: waited in a 14 h outage down to 2,160 s of slack, then 50 ticks on on-demand
        next to a pool with spot). Buy now iff waiting one more tick would cross it
        (s - d >= 2d > s - G - d) and the outage time expected ahead exceeds the slack
        (`_outage_ahead`, as in `_buy_in_outage`): if it does not, the job likely never
        needs on-demand. No constant: d, G and the net's 2d.
        """
        gap, changeover, slack = obs.gap_seconds, obs.changeover_seconds, obs.slack_seconds
        if gap - changeover >= obs.remaining_seconds:
            return False  # one tick of a new instance finishes the job: nothing to hand back
        if not slack - changeover >= 2 * changeover > slack - gap - changeover:
            return False
        return self._outage_ahead(obs, supply) > slack

    def _starts_ahead(
        self, obs: PoolsObservation, pools: Sequence[RunStatistics], supply: RunStatistics
    ) -> float:
        """Starts (spot or on-demand) the rest of the window is expected to need.

        One per spot run the remaining work needs, W / (mean up-run of the pools: their up
        time over their up-runs, with the prior's availability_prior_seconds of up time per
        cycle_prior_runs run), plus two per union outage ahead (on-demand through it, spot
        again after), at the union's outage rate as in `_slack_value`.
        """
        p = self.core.parameters
        gap = obs.gap_seconds
        up_runs = sum(s.runs[1] + (s.last == 1) for s in pools) + p.cycle_prior_runs
        up_time = sum(s.up_ticks for s in pools) * gap + p.availability_prior_seconds
        outages = (supply.runs[0] + p.cycle_prior_runs) / (
            supply.ticks * gap + p.availability_prior_seconds
        )
        starts = obs.remaining_seconds * up_runs / up_time
        return starts + 2 * outages * obs.ticks_left * gap

    def _up_run_end_rate(self, obs: PoolsObservation, pools: Sequence[RunStatistics]) -> float:
        """P(an up-run in progress at an arbitrary tick ends after it), over every pool."""
        p = self.core.parameters
        up_runs = sum(s.runs[1] for s in pools) + p.cycle_prior_runs
        up_ticks = sum(s.up_ticks for s in pools) + p.availability_prior_seconds / obs.gap_seconds
        return min(1.0, up_runs / up_ticks)

    def _changeover_reserve(
        self, obs: PoolsObservation, pools: Sequence[RunStatistics], supply: RunStatistics
    ) -> float:
        """Slack the rest of the window's changeovers are expected to use, plus the net's margin.

        Every start costs d of slack, and `_starts_ahead` counts them. The net's margin is
        d + min(d, G): below it no new spot instance is safe (`safety.is_safe`).
        """
        changeover = obs.changeover_seconds
        starts = self._starts_ahead(obs, pools, supply)
        return changeover + min(changeover, obs.gap_seconds) + changeover * starts

    def _affordable_wait(
        self, obs: PoolsObservation, pools: Sequence[RunStatistics], supply: RunStatistics
    ) -> int:
        """Ticks one start may be put off for: its share of the slack the changeovers spare.

        The slack above the changeover reserve (`_changeover_reserve`) is what waiting for
        runs to prove themselves can spend without taking slack the restarts ahead need; the
        starts ahead (`_starts_ahead`, at least this one) share it evenly. No constant: the
        same counts as the reserve of `_buy_in_outage`.
        """
        spare = obs.slack_seconds - self._changeover_reserve(obs, pools, supply)
        starts = max(self._starts_ahead(obs, pools, supply), 1.0)
        return max(int(spare / starts) // obs.gap_seconds, 0)

    def _slack_value(
        self, obs: PoolsObservation, supply: RunStatistics, pools: Sequence[RunStatistics]
    ) -> float:
        """Dollars a second of slack is worth when choosing where and when to start spot.

        The single-zone price (`RespotPolicy.slack_price`) is the fluid model's: the lock-in
        price when the expected outage time (1 - f) R exceeds the slack s, else p_spot. Here it
        is weighted by the probability that the slack binds at all, P(U > s) for the outage
        time U still to come, and capped by that price. U is taken as normal with mean
        (1 - f) R and variance f (1 - f) R^2 / (n + 1): availability is observed in cycles (an
        up-run and an outage), not in independent ticks, so n counts cycles, those seen
        (completed outages, plus the policy's one prior cycle) and those still to come (the
        union's outage rate times R), combined as 1 / n = 1 / n_seen + 1 / n_ahead. With
        hours of slack and a union that is rarely down, a second of slack is worth almost
        nothing and waiting for a better start is free; near the lock-in it is worth the full
        price. Used only across pools (the pool choice and `_worth_waiting`); with one pool
        the policy is the single-zone one.
        """
        view = single_view(obs, pool=None)
        prior = self._union_prior(obs)
        price = self.core.slack_price(view, supply, prior=prior)
        if len(obs.pools) == 1:
            return price
        p = self.core.parameters
        gap = obs.gap_seconds
        horizon = obs.ticks_left * gap
        available = supply.availability(gap, prior, p.availability_prior_seconds)
        if available >= 1.0 or horizon <= 0:
            return min(price, SPOT_PRICE_PER_SECOND)
        seen = supply.runs[0] + p.cycle_prior_runs
        rate = seen / (supply.ticks * gap + p.availability_prior_seconds)
        ahead = rate * horizon
        cycles = 1 / (1 / seen + 1 / ahead) if ahead > 0 else seen
        spread = math.sqrt(available * (1 - available) / (cycles + 1)) * horizon
        # The slack binds when the outages ahead *and* the changeovers ahead (with the net's
        # margin, `_changeover_reserve`) exceed it: with many pools the union is rarely down,
        # and counting outages alone priced slack at ~0 until the net took over, so every
        # wait looked free and the job waited its slack away, then bought on-demand
        # (issue 28). The restarts are the job's own use of slack that the union's outages
        # do not show.
        mean = (1 - available) * horizon + self._changeover_reserve(obs, pools, supply)
        # The restarts ahead are a count (Poisson with the mean `_starts_ahead`), each
        # taking d of slack: their variance d^2 n joins the outages' (with many pools the
        # latter is ~0 and the chance that the slack binds would jump from 0 to 1 at the
        # reserve, making every wait above it look free).
        starts = self._starts_ahead(obs, pools, supply)
        spread = math.sqrt(spread**2 + obs.changeover_seconds**2 * starts)
        z = (mean - obs.slack_seconds) / spread if spread > 0 else math.copysign(math.inf, mean)
        binds = 0.5 * math.erfc(-z / math.sqrt(2))
        fluid = (ON_DEMAND_PRICE_PER_SECOND - SPOT_PRICE_PER_SECOND * available) / (1 - available)
        return min(binds * fluid, price)

    def _worth_waiting(
        self,
        obs: PoolsObservation,
        pools: Sequence[RunStatistics],
        supply: RunStatistics,
        candidate: int,
        slack_value: float,
    ) -> bool:
        """Whether to hold nothing this tick rather than start the candidate pool's spot.

        Only across pools, only when nothing runs (idle or just preempted) and a tick of
        waiting is safe. Two lookaheads, each pricing a tick of slack at `slack_value`:
        - the run: a run that has just begun is the likeliest to end (falling hazards), so
          starting it k ticks later, if it survives (S_k, the product of 1 - h over those
          ticks), buys more expected work P_k for the same overhead c = d (p_spot + value) +
          fee. Wait iff the overhead per second of work is lower that way for some k from 1
          to max(ceil(d / G), A - age): (value k G + S_k c) / (S_k P_k) < c / P. The
          horizon is at least the changeover's length: a run shorter than it yields nothing,
          and a one-tick horizon would look 34 s ahead on one trace set and 10 min on
          another. While the run is younger than A, the wait one start can afford
          (`_affordable_wait`), it reaches that age: a one-tick look at a bumpy run-length
          law misses a likely end a few ticks ahead. P and P_k count
          the run's life only until the job would be done (E[min(progress, W)], not
          min(E[progress], W), which is W for any young run with a long tail). Only the k
          after which a new instance could still boot under the safety net count
          (`_boot_completes`): waiting for a start the net would then refuse, or abandon
          mid-changeover, only burns the slack the start needed. Only for a run seen up
          this tick (`PoolsObservation.seen_now`): live, a pool nobody asked has a run of
          unknown age;
        - the region: a move to another region pays the fee; wait iff the tick of slack costs
          less than the fee times the chance that a pool in the checkpoint's region is back
          next tick (1 - prod(1 - h_k) over its pools' outage hazards).
        """
        if len(obs.pools) == 1 or obs.held.choice is not Choice.NONE:
            return False
        if obs.tick == 0 or not obs.histories[0]:
            return False  # nothing seen yet: a run's age is unknown, not zero
        if not is_safe(single_view(obs, pool=None), Choice.NONE):
            return False
        prior = self.core.parameters.lindy_prior_runs
        gap = obs.gap_seconds
        fee = obs.transfer_fee(candidate)
        stats = pools[candidate]
        overhead = obs.changeover_seconds * (SPOT_PRICE_PER_SECOND + slack_value) + fee
        now = min(_expected_progress(obs, stats, prior, until_done=True), obs.remaining_seconds)
        # Look as far ahead as a changeover lasts (at least a tick): the runs that would
        # yield nothing are those shorter than it, whatever the tick length. And, while the
        # run is younger than the wait one start can afford, up to that age: a one-tick
        # look at a bumpy run-length law started runs whose remaining life dipped for a
        # tick and grew again a few ticks later.
        age = stats.current_age(1)
        steps = max(1, -(-obs.changeover_seconds // gap))
        steps = min(max(steps, self._affordable_wait(obs, pools, supply) - age), obs.ticks_left)
        if not obs.seen_now(candidate):
            steps = 0  # its run's age is unknown: asking is the way to learn it
        lasts = 1.0
        for k in range(1, steps + 1):
            if not _boot_completes(obs, waited=k):
                break  # the net would refuse or abandon the start waited for
            lasts *= 1 - stats.hazard(1, age + k - 1, prior)  # P(the run is still up in k ticks)
            later = min(
                _expected_progress(obs, stats, prior, later=k, until_done=True),
                obs.remaining_seconds,
            )
            if now > 0 and later > 0 and lasts > 0:
                waiting = (slack_value * k * gap + lasts * overhead) / (lasts * later)
                if waiting < overhead / now:
                    return True
        if self._stick_to_a_pool(obs, pools, candidate, now):
            return True
        if fee > 0:
            home = [
                k
                for k, pool in enumerate(obs.pools)
                if pool.region == obs.home and not obs.available[k]
            ]
            # A wait for the region repeats tick after tick, and each spends a tick of slack
            # the binds-weighted value (`_slack_value`) treats as nearly free while the union
            # looks up; the wait is priced at the single-zone lambda (`slack_price`: at least
            # p_spot a second, a second of work put off), which does not vanish.
            price = self.core.slack_price(
                single_view(obs, pool=None), supply, prior=self._union_prior(obs)
            )
            # and only while a start after the wait can still boot under the net
            # (`_boot_completes`): a wait past that leaves on-demand to the deadline
            if (
                home
                and _boot_completes(obs, waited=1)
                and self._region_wait_cost(obs, pools, home, price) < fee
            ):
                return True
        return False

    def _stick_to_a_pool(
        self, obs: PoolsObservation, pools: Sequence[RunStatistics], candidate: int, now: float
    ) -> bool:
        """Whether a plan that waits out the outages of a pool that is down now costs less.

        Two plans for the rest of the work W, compared by the restarts they pay (d at the
        spot price each, and a transfer fee to leave the checkpoint's region):
        - take the candidate now, and pools as they come: W / P starts, P the candidate's
          expected progress (`now`; a run found up by asking, live, `_found_progress`);
        - stick to pool k, down now, waiting out each of its outages: W / P_k starts, P_k the
          expected progress of k's *new* runs (`new_run`: each start follows an outage),
          which is only a plan if its waits fit the slack: the outage now (its expected
          remainder by its age, `expected_residual`), then one of k's mean outage per later
          start, and d a start, plus the net's margin d + min(d, G), with one standard
          deviation of the waits to spare (sqrt(n) times the mean outage: n outages of that
          mean, about independent).
        Wait iff some such k costs less. A plan, not a tick: its waits are priced by the
        slack they need over the whole job, where a tick-by-tick price (`slack_value`) read
        each wait as nearly free and repeated it (bench/placement/issue28/README.md).
        Means are learned from k's own history with the policy's prior cycle (one run of
        `availability_prior` times `availability_prior_seconds` up, and the rest down).
        """
        if now <= 0 or len(obs.pools) == 1:
            return False
        p = self.core.parameters
        prior = p.lindy_prior_runs
        gap, changeover, work = obs.gap_seconds, obs.changeover_seconds, obs.remaining_seconds
        if not obs.seen_now(candidate):
            now = min(_found_progress(obs, pools[candidate], prior, until_done=True), work)
            if now <= 0:
                return False
        restart = changeover * SPOT_PRICE_PER_SECOND
        take = work / now * restart + obs.transfer_fee(candidate)
        margin = changeover + min(changeover, gap)
        prior_up = p.availability_prior * p.availability_prior_seconds
        prior_down = p.availability_prior_seconds - prior_up
        for k, up in enumerate(obs.available):
            if up or k == candidate or not obs.seen_now(k):
                continue
            stats = pools[k]
            fresh = min(_expected_progress(obs, stats, prior, until_done=True, new_run=True), work)
            if fresh <= 0:
                continue
            starts = work / fresh
            outages = stats.runs[0] + (stats.last == 0) + p.cycle_prior_runs
            outage = ((stats.ticks - stats.up_ticks) * gap + prior_down) / outages
            now_out = stats.expected_residual(0, stats.current_age(0), obs.ticks_left, prior) * gap
            waits = now_out + (starts - 1) * outage
            needed = waits + starts * changeover + margin + math.sqrt(max(starts, 1.0)) * outage
            if needed > obs.slack_seconds:
                continue
            if starts * restart + obs.transfer_fee(k) < take:
                return True
        return False

    def _region_wait_cost(
        self,
        obs: PoolsObservation,
        pools: Sequence[RunStatistics],
        home: Sequence[int],
        slack_value: float,
    ) -> float:
        """Expected cost of waiting for a pool of the checkpoint's region instead of moving.

        Waiting is not one tick: a job that waits now and finds the region still down next
        tick faces the same choice again, and with falling outage hazards (the Lindy prior)
        an outage that has not ended is ever less likely to end soon, so a one-tick test
        ("the tick costs less than the fee times the chance of a return next tick") waits
        tick after tick while pools of another region offer spot (synthetic 9-pool markets,
        issue 28: 130 ticks of on-demand in a window where round-robin bought none). The
        plan compared with moving now (the fee) is: wait up to H ticks, H the break-even
        wait fee / (slack value x G) (a longer wait costs more than the fee even if it
        succeeds), then move. Its cost is the slack value x G x E[min(T, H)] plus the fee
        times P(T > H), T the ticks until some home pool is back: P(T > t) is the product of
        the home pools' outage survivals from their ages (their own outages with the Lindy
        prior). No constant: the fee, G, the slack value and the learned outage lengths.
        """
        prior = self.core.parameters.lindy_prior_runs
        gap = obs.gap_seconds
        fee = obs.checkpoint_gb * obs.transfer_price_per_gb
        tick_cost = slack_value * gap
        if tick_cost <= 0:
            return 0.0
        horizon = min(obs.ticks_left, math.ceil(fee / tick_cost))
        while horizon > 1 and not _boot_completes(obs, waited=horizon):
            horizon -= 1  # a longer wait would leave too little slack for the start after it
        ages = [pools[k].current_age(0) for k in home]
        alive = [pools[k].survival(0, age, prior) for k, age in zip(home, ages, strict=True)]
        expected, down = 0.0, 1.0
        model = self._model
        if model is not None:  # the plan: the learned outage laws and co-movement
            for t in range(horizon):
                expected += down
                down = model.all_down(home, t + 1)
                if down <= 0:
                    break
            return tick_cost * expected + down * fee
        for t in range(horizon):
            expected += down  # the tick t is waited iff every home pool is still down
            down = 1.0
            for k, age, now in zip(home, ages, alive, strict=True):
                down *= pools[k].survival(0, age + t + 1, prior) / now if now > 0 else 0.0
            if down <= 0:
                break
        return tick_cost * expected + down * fee

    def _plan_value(self, obs: PoolsObservation, model: PoolModel, supply: RunStatistics) -> float:
        """The slack value of the plan over the learned model (`planner.slack_value`).

        Cached while its inputs are unchanged (the key is every input: a fresh object
        computes the same value)."""
        gap = obs.gap_seconds
        movement = model.comovement
        # the work left on the plan's grid (GRID steps of C, rounded up): the plan's value
        # barely moves with a tick of work, and an on-demand stint would redo it every tick
        step = max(gap, -(-obs.work_seconds // GRID))
        work = -(-obs.remaining_seconds // step) * step
        key: tuple[object, ...] = (
            obs.slack_seconds,
            work,
            tuple((*s.runs, s.current_age(1)) for s in model.stats),
            tuple(supply.runs),
            supply.current_age(0),
            movement.events,
        )
        if self._planned is not None and self._planned[0] == key:
            return self._planned[1]
        value = planned_slack_value(
            slack_ticks=obs.slack_seconds / gap,
            work_ticks=work / gap,
            changeover_ticks=obs.changeover_seconds / gap,
            spot_per_tick=SPOT_PRICE_PER_SECOND * gap,
            on_demand_per_tick=ON_DEMAND_PRICE_PER_SECOND * gap,
            run=model.pooled_up(),
            outage=RunLaw([supply], 0, self.core.parameters.lindy_prior_runs),
            stranded=movement.stranded(),
            gap_seconds=gap,
        )
        self._planned = (key, value)
        return value

    def _candidate(
        self,
        obs: PoolsObservation,
        pools: Sequence[RunStatistics | PooledRunStatistics],
        slack_value: float,
    ) -> int | None:
        """The pool whose spot the job would take this tick (None: no pool has spot)."""
        held = obs.held.pool
        if held is not None and obs.available[held]:
            return held
        up = [k for k, available in enumerate(obs.available) if available]
        if len(up) <= 1:
            return up[0] if up else None
        prior = self.core.parameters.lindy_prior_runs
        changeover_cost = obs.changeover_seconds * (SPOT_PRICE_PER_SECOND + slack_value)
        best: tuple[float, float, int] | None = None
        for k in up:
            progress = min(_expected_progress(obs, pools[k], prior), obs.remaining_seconds)
            cost = changeover_cost + obs.transfer_fee(k)
            overhead = cost / progress if progress > 0 else math.inf
            key = (overhead, -progress, k)
            if best is None or key < best:
                best = key
        assert best is not None
        return best[2]

    def _choice_statistics(
        self, pools: Sequence[RunStatistics]
    ) -> Sequence[RunStatistics | PooledRunStatistics]:
        """Each pool's run lengths for choosing among the pools up, with the others' as prior.

        Early in a window a pool has completed few runs, and its young run's remaining life
        is mostly the Lindy prior's. The other pools' completed up-runs are evidence of the
        same kind (one provider, one window): they join the prior as a second prior, with
        a total weight of the Lindy prior's (`lindy_prior_runs`, spread evenly over those
        runs), so they count most when the pool's own runs are few and fade as those
        accumulate. Live, a history's runs are what the account saw (a launch to a notice
        or refusal), shorter than the true runs but evidence of the same kind. The wait
        rules keep each pool's own statistics.
        """
        if len(pools) == 1:
            return pools
        prior = self.core.parameters.lindy_prior_runs
        chosen: list[RunStatistics | PooledRunStatistics] = []
        for k, own in enumerate(pools):
            others = [s for j, s in enumerate(pools) if j != k]
            runs = sum(s.runs[1] for s in others)
            chosen.append(PooledRunStatistics(own, others, prior / runs) if runs else own)
        return chosen

    def _union_prior(self, obs: PoolsObservation) -> float:
        """Prior availability of "some pool has spot": 1 - (1 - p)^K for K pools of prior p.

        The maximum-entropy joint law of K 0/1 pools with given marginals is the product law,
        so K fair coins have some pool up with probability 1 - 2^-K; with one pool it is the
        single-zone prior itself. The union's own past replaces it within hours.
        """
        p = self.core.parameters.availability_prior
        return 1 - (1 - p) ** len(obs.pools)

    def _statistics(self, obs: PoolsObservation) -> list[RunStatistics]:
        if len(self._pools) != len(obs.pools):
            self._pools = [_Cached() for _ in obs.pools]
        lengths = {len(history) for history in obs.histories}
        if len(obs.histories) != len(obs.pools) or len(lengths) != 1:
            raise ValueError("every pool needs a history of the same length (ticks seen)")
        return [cached.update(h) for cached, h in zip(self._pools, obs.histories, strict=True)]

    def _union_statistics(self, obs: PoolsObservation) -> RunStatistics:
        """Run statistics of "some pool had spot", tick by tick."""
        histories = obs.histories
        length = len(histories[0])
        views = [h for h in histories if isinstance(h, HistoryView)]
        sources = tuple(h.source for h in views) if len(views) == len(histories) else None
        cached = self._union_sources
        same = (
            sources is not None
            and cached is not None
            and len(sources) == len(cached)
            and all(a is b for a, b in zip(sources, cached, strict=True))
        )
        seen = self._union.ticks
        if not same or length < seen:
            self._union = RunStatistics()
            self._union_sources = sources
            seen = 0
        tails = [_tail(h, seen, length) for h in histories]
        self._union.extend(1 if any(values) else 0 for values in zip(*tails, strict=True))
        return self._union
