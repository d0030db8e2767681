"""respot's deadline-aware placement policy: Uniform Progress pacing, priced decisions.

The idea (docs/policy.md has the derivations and the state diagram):

1. Safety net, by construction. Every choice goes through `respot.policy.safety.guard`:
   a choice is taken only if on-demand could still finish were spot lost at the next tick
   boundary. If on-demand alone from the start finishes in time, the job never misses.
2. Pacing from Uniform Progress. The job is *behind* when its slack is a smaller share of
   the remaining time than it was at the start (the paper's cp(t) < ep(t)). Only then is
   on-demand worth paying for in an outage.
3. Prices instead of fixed rules. Slack has a value lambda (dollars per second): what one
   more second would save by delaying the moment the job must stay on on-demand. With
   availability f, that is (p_od - p_s f) / (1 - f) while the job is headed for that lock-in
   (slack < (1 - f) * remaining time), and p_s otherwise (a second of spot work).
4. Learning from the past of the trace only: f, and the hazard that the current run of
   availability ends next tick, estimated from completed runs with a scale-free prior
   (`respot.policy.history`). Spot capacity that appeared a tick ago often vanishes; a
   run that has lasted long tends to last (in both directions).

The decisions, each a one-tick lookahead with these prices (G tick, d changeover, h hazard):
- outage while behind: go on-demand iff lambda * (G - h * min(d, G)) > p_od * G, i.e.
  unless the outage is likely to end before an on-demand instance has paid for itself;
- spot back while on on-demand and behind: switch iff the tick of spot gained,
  (p_od - p_s) * G, outweighs h * lambda * (min(d, G) + d), the expected slack lost to two
  changeovers if the run ends at once; otherwise hold a tick and look again;
- switch budget: with slack for n more on-demand -> spot -> on-demand round trips and
  N expected spot runs ahead, switch only into runs old enough that a fraction n / N of
  runs survive that long, so the last round trips go to the runs most likely to be long;
- otherwise: stay on spot until preempted, take spot when idle, stay on on-demand through
  an outage, wait while ahead.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from respot.policy.history import RunStatistics
from respot.policy.model import (
    ON_DEMAND_PRICE_PER_HOUR,
    SECONDS_PER_HOUR,
    SPOT_PRICE_PER_HOUR,
    Choice,
    HistoryView,
    Observation,
)
from respot.policy.safety import guard

SPOT_PRICE_PER_SECOND = SPOT_PRICE_PER_HOUR / SECONDS_PER_HOUR
ON_DEMAND_PRICE_PER_SECOND = ON_DEMAND_PRICE_PER_HOUR / SECONDS_PER_HOUR


class Mode(enum.Enum):
    """Why the policy chose what it chose (the states of docs/policy.md's diagram)."""

    DONE = "done"  # the work is complete: hold nothing
    EXPLOIT = "exploit"  # on spot, or spot taken from idle: stay until preempted
    SWITCH = "switch"  # leave on-demand for a spot run judged worth two changeovers
    HOLD = "hold"  # stay on on-demand although spot is up (run too young / budget short)
    CATCH_UP = "catch-up"  # on-demand through an outage while behind the progress line
    WAIT = "wait"  # hold nothing: ahead of the line, or the outage is likely short
    SAFETY_NET = "safety-net"  # the wanted choice could miss the deadline: on-demand


@dataclass(frozen=True, slots=True)
class Decision:
    """A choice with the mode that produced it (for logs and Slack threads)."""

    choice: Choice
    mode: Mode


@dataclass(frozen=True, slots=True)
class RespotParameters:
    """Priors of the learned quantities; none is fitted to a trace set (docs/policy.md)."""

    # Spot availability before any history: 1/2, the maximum-entropy guess for a 0/1 state,
    # worth two hours of observation (an order of magnitude below a 48 h job, so the data
    # of the window dominates within hours; 30 min to 8 h change little, see bench/policy).
    availability_prior: float = 0.5
    availability_prior_seconds: float = 2 * SECONDS_PER_HOUR
    # Weight, in runs, of the scale-free prior P(run lasts > a ticks) = 1 / (a + 1).
    lindy_prior_runs: float = 1.0
    # Weight, in cycles, of the prior spot-run rate: the rate at which Uniform Progress's
    # slack share would just pay for one round trip per cycle, (slack / time) / (2 d).
    cycle_prior_runs: float = 1.0


class RespotPolicy:
    """Uniform Progress pacing with priced, history-aware decisions and a hard safety net.

    A decision depends on the observation alone. The object caches the run statistics of the
    history it saw last and extends them when the next observation's history is a longer view
    of the same window (`HistoryView`); anything else is recomputed from scratch. Both paths
    give the same integers, hence the same decisions.
    """

    name = "respot"

    def __init__(self, parameters: RespotParameters | None = None) -> None:
        self.parameters = parameters or RespotParameters()
        self._stats = RunStatistics()
        self._source: tuple[int, ...] | None = None

    def choose(self, obs: Observation) -> Choice:
        """The choice for this tick."""
        return self.decide(obs).choice

    def decide(self, obs: Observation) -> Decision:
        """The choice for this tick and the mode that led to it."""
        if obs.remaining_seconds == 0:
            return Decision(Choice.NONE, Mode.DONE)
        stats = self._statistics(obs)
        wanted = self.wanted(obs, supply=stats, run=stats)
        choice = guard(obs, wanted.choice)
        if choice is not wanted.choice:
            return Decision(choice, Mode.SAFETY_NET)
        return wanted

    def _statistics(self, obs: Observation) -> RunStatistics:
        history = obs.history
        seen = self._stats.ticks
        if (
            isinstance(history, HistoryView)
            and history.source is self._source
            and len(history) >= seen
        ):
            self._stats.extend(history.source[seen : len(history)])
        else:
            self._stats = RunStatistics(history)
            self._source = history.source if isinstance(history, HistoryView) else None
        return self._stats

    def wanted(
        self,
        obs: Observation,
        *,
        supply: RunStatistics,
        run: RunStatistics,
        move_fee: float = 0.0,
        supply_prior: float | None = None,
        slack_value: float | None = None,
    ) -> Decision:
        """The choice before the safety net, from explicit statistics.

        `supply` describes spot as a whole (availability, outages, how often runs start):
        the trace itself for one pool, the union of the pools for several. `run` is the pool
        whose spot would be taken now (its up-run's age, hazard and survival). `move_fee` is
        what taking that spot costs once on top of its price (a checkpoint transfer). With
        one pool, `supply` is `run` and there is no fee: that is `decide`. `supply_prior`
        replaces the availability prior of `supply` (default: the parameters').
        `slack_value` replaces the price of a second of slack (default: `slack_price`).
        """
        gap = obs.gap_seconds
        horizon = obs.ticks_left * gap  # tick-aligned time left
        total = (obs.last_tick + 1) * gap  # floor(D / G) * G: the usable time
        # 2. Uniform Progress pacing: behind when slack / time left < initial slack / time.
        behind = obs.slack_seconds * total < (total - obs.work_seconds) * horizon
        # 3. The value of a second of slack.
        if slack_value is None:
            slack_price = self.slack_price(obs, supply, prior=supply_prior)
        else:
            slack_price = slack_value
        if obs.spot_available:
            return self._spot_up(
                obs, supply, run, behind=behind, slack_price=slack_price, move_fee=move_fee
            )
        return self._spot_down(obs, supply, behind=behind, slack_price=slack_price)

    def slack_price(
        self, obs: Observation, supply: RunStatistics, *, prior: float | None = None
    ) -> float:
        """Dollars a second of slack is worth now (lambda, docs/policy.md)."""
        p = self.parameters
        horizon = obs.ticks_left * obs.gap_seconds
        available = supply.availability(
            obs.gap_seconds,
            p.availability_prior if prior is None else prior,
            p.availability_prior_seconds,
        )
        if obs.slack_seconds < (1 - available) * horizon:
            price = ON_DEMAND_PRICE_PER_SECOND - SPOT_PRICE_PER_SECOND * available
            return price / (1 - available)
        return SPOT_PRICE_PER_SECOND

    def _spot_up(
        self,
        obs: Observation,
        supply: RunStatistics,
        run: RunStatistics,
        *,
        behind: bool,
        slack_price: float,
        move_fee: float,
    ) -> Decision:
        if obs.held is not Choice.ON_DEMAND:
            return Decision(Choice.SPOT, Mode.EXPLOIT)
        age = run.current_age(1)
        if behind:
            # Switch now, or hold one more tick and look again? Switching saves a tick of
            # on-demand price either way; if the run ends after this tick it costs the spot
            # changeover paid so far (min(d, G)) and the on-demand one that follows (d).
            gap = obs.gap_seconds
            changeover = obs.changeover_seconds
            gain = (ON_DEMAND_PRICE_PER_SECOND - SPOT_PRICE_PER_SECOND) * gap
            # A transfer fee is lost too if the run ends at once (on-demand then runs where
            # the checkpoint went, so there is no fee back).
            ends = run.hazard(1, age, self.parameters.lindy_prior_runs)
            if gain <= ends * slack_price * (min(changeover, gap) + changeover) + ends * move_fee:
                return Decision(Choice.ON_DEMAND, Mode.HOLD)
        if not self._switch_affordable(obs, supply, run, age):
            return Decision(Choice.ON_DEMAND, Mode.HOLD)
        return Decision(Choice.SPOT, Mode.SWITCH)

    def _spot_down(
        self, obs: Observation, stats: RunStatistics, *, behind: bool, slack_price: float
    ) -> Decision:
        if obs.held is Choice.ON_DEMAND:
            return Decision(Choice.ON_DEMAND, Mode.CATCH_UP)
        if not behind:
            return Decision(Choice.NONE, Mode.WAIT)
        # On-demand now, or wait one tick? Waiting costs a tick of slack for sure; on-demand
        # costs a tick of price, and if the outage ends after this tick its changeover so far
        # (min(d, G)) is lost too, so it saves G - min(d, G) of slack then, G otherwise.
        gap = obs.gap_seconds
        ends = stats.hazard(0, stats.current_age(0), self.parameters.lindy_prior_runs)
        saved = gap - ends * min(obs.changeover_seconds, gap)
        if slack_price * saved > ON_DEMAND_PRICE_PER_SECOND * gap:
            return Decision(Choice.ON_DEMAND, Mode.CATCH_UP)
        return Decision(Choice.NONE, Mode.WAIT)

    def _switch_affordable(
        self, obs: Observation, stats: RunStatistics, run: RunStatistics, age: int
    ) -> bool:
        """Whether the switch budget allows leaving on-demand for a spot run of this age."""
        changeover = obs.changeover_seconds
        total = (obs.last_tick + 1) * obs.gap_seconds
        initial_slack = total - obs.work_seconds
        if changeover == 0:
            return True
        round_trip = 2 * changeover
        prior_runs = self.parameters.cycle_prior_runs
        if initial_slack > 0:
            prior_seconds = prior_runs * round_trip * total / initial_slack
            rate = (stats.runs[1] + prior_runs) / (stats.ticks * obs.gap_seconds + prior_seconds)
        else:
            rate = stats.runs[1] / max(stats.ticks * obs.gap_seconds, 1)
        expected_runs = rate * obs.ticks_left * obs.gap_seconds
        affordable = (obs.slack_seconds - changeover) / round_trip
        if affordable >= expected_runs:
            return True
        survive = run.survival(1, age, self.parameters.lindy_prior_runs)
        return survive * expected_runs <= max(affordable, 0.0)
