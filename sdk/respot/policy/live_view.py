"""A multi-pool policy fed only what a one-job account sees live: the benchmark's view of live.

The benchmark (`simulate_pools`) shows the policy every pool's availability at every tick.
The live control plane (`respot.core.pool_placement`, `respot.core.pool_watch`) knows a pool
only from its own sightings: a spot launch that succeeded or an instance running there (1),
a capacity refusal or an interruption (0); a tick nobody observed repeats the last sighting,
a pool never observed reads as up throughout and one observed later is padded before its
first sighting with that sighting. A pool nobody asked this tick counts as available when
placing (asking is free, a refusal marks it down and the next pool is asked) and is marked
not observed (`PoolsObservation.observed`); so does it when leaving on-demand
(`switch_running`: the return stops the on-demand instance and asks).

`LiveView(policy)` wraps a policy with exactly that: each tick it rebuilds the observation
from its own sightings, asks the pools in the order the policy picks them (its pick, then
its pick with that pool refused, ...) against the window's true availability, and returns
the first that has spot, or the policy's non-spot answer. From on-demand it does what
`PoolPlacementPolicy.switch_running` does: the same asking, at most `MAX_SPOT_RETURNS`
returns, backing off after refused ones (`return_backoff_ticks`), and only with two
changeovers of slack; a return that every pool refuses has stopped
the on-demand instance, so the job pays a changeover to be back on on-demand (`restarted`,
which `simulate_pools` reads). With no other job in the account, this is what live placement
of one job would do on the window; `respot-live-view` in `bench/placement/dev.py --policy`
measures it on every window of a set (`respot-live-view-sightings-only`: returns from
on-demand only on a sighting, as live did until 2026-11-24). Not modelled: other jobs'
sightings, the live-only rule for a first spot start from waiting (two changeovers of
slack), and the changeover's length beyond d.
"""

from __future__ import annotations

from dataclasses import replace

from respot.policy.model import Choice, HistoryView
from respot.policy.multipool import MultiPoolPolicy
from respot.policy.pools import Placement, PoolsObservation, PoolsPolicy

MAX_SPOT_RETURNS = 24  # on-demand -> spot moves per job; refused ones also back off


def return_backoff_ticks(refused: int) -> int:
    """Ticks to wait before the next return from on-demand after `refused` refused ones.

    A return that every pool refuses has cost a changeover; the next waits 1, 2, 4, ...
    ticks, so over a window of T ticks at most log2(T) + 1 of them are refused.
    """
    return 2 ** (refused - 1) if refused > 0 else 0


class _Sightings:
    """One pool's history as the account saw it: ticks 0.. as a growing list of 0/1."""

    __slots__ = ("now", "ticks")

    def __init__(self) -> None:
        self.ticks: list[int] | None = None  # None: never observed (reads as up)
        self.now: int | None = None  # a sighting at the tick being decided

    def see(self, tick: int, value: int) -> None:
        """A sighting at `tick` (the tick being decided); the newest of a tick wins."""
        if self.ticks is None:
            # first sighting: the past reads as it (a new list, so that cached statistics
            # of the old reading are rebuilt, not extended)
            self.ticks = [value] * tick
        self.now = value

    def close(self) -> None:
        """End the tick: its sighting, or the last one repeated, joins the history."""
        if self.ticks is None:
            return
        if self.now is not None:
            self.ticks.append(self.now)
        else:
            self.ticks.append(self.ticks[-1] if self.ticks else 1)
        self.now = None

    def history(self, tick: int, ones: tuple[int, ...]) -> HistoryView:
        """Ticks 0..tick-1 (`ones`: a shared all-up source, for a pool never observed)."""
        if self.ticks is None:
            return HistoryView(ones, tick)
        # a list that only grows: the policy's cached statistics extend it tick by tick
        return HistoryView(self.ticks, tick)  # type: ignore[arg-type]

    @property
    def last(self) -> int:
        if self.now is not None:
            return self.now
        return self.ticks[-1] if self.ticks else 1


class LiveView:
    """`policy` placed as live would place it, seeing only its own sightings."""

    name = "respot-live-view"

    def __init__(
        self, policy: PoolsPolicy | None = None, *, ask_from_on_demand: bool = True
    ) -> None:
        self.policy = policy or MultiPoolPolicy()
        self.ask_from_on_demand = ask_from_on_demand
        self._returns = self._refused = self._next_return = 0
        self.restarted = False
        self._asked_from_on_demand = False
        self._pools: list[_Sightings] = []
        self._tick = -1
        self._held: Placement | None = None
        self._ones: tuple[int, ...] = ()

    def place(self, obs: PoolsObservation) -> Placement:
        if obs.tick == 0 or len(self._pools) != len(obs.pools):
            self._pools = [_Sightings() for _ in obs.pools]
            self._held = None
            self._returns = self._refused = self._next_return = 0
            self._ones = (1,) * (obs.deadline_seconds // obs.gap_seconds + 1)
        self._learn(obs)
        sightings = self._pools
        tick = obs.tick
        held = obs.held
        if held.choice is Choice.ON_DEMAND and not self.ask_from_on_demand:
            # from on-demand nothing is asked: the newest sightings are all there is
            available = [bool(s.last) for s in sightings]
        else:
            available = [bool(s.now) if s.now is not None else True for s in sightings]
        observed = [s.now is not None for s in sightings]
        histories = tuple(s.history(tick, self._ones) for s in sightings)
        choice = self._ask(obs, obs.held, available, observed, histories)
        # a return that every pool refused has stopped the on-demand instance: the job is
        # placed again from nothing (the pools just refused are seen down), and going back
        # to on-demand pays a changeover (`simulate_pools` reads `restarted`)
        returned = obs.held.choice is Choice.ON_DEMAND and self._asked_from_on_demand
        self.restarted = False
        if returned and choice.choice is not Choice.SPOT:
            idle = replace(obs, held=Placement(Choice.NONE))
            choice = self._ask(idle, idle.held, available, observed, histories)
            self.restarted = choice == obs.held
            self._refused += 1
            self._next_return = obs.tick + return_backoff_ticks(self._refused)
        self._held = choice
        return choice

    def _ask(
        self,
        obs: PoolsObservation,
        held: Placement,
        available: list[bool],
        observed: list[bool],
        histories: tuple[HistoryView, ...],
    ) -> Placement:
        """The policy's answer once the pools it picks have been asked, in its order."""
        sightings, tick = self._pools, obs.tick
        self._asked_from_on_demand = False
        choice = Placement(Choice.NONE)
        for _ in range(len(obs.pools) + 1):  # each refusal is asked about again, once per pool
            view = replace(
                obs, available=tuple(available), observed=tuple(observed), histories=histories
            )
            choice = self.policy.place(view)
            if choice.choice is not Choice.SPOT or choice.pool is None:
                break
            k = choice.pool
            if held.choice is Choice.ON_DEMAND:
                # the live return: at most MAX_SPOT_RETURNS, with slack for the whole
                # changeover and the one back; the on-demand instance stops first
                late = obs.slack_seconds < 2 * obs.changeover_seconds
                backing_off = obs.tick < self._next_return
                if self._returns >= MAX_SPOT_RETURNS or late or backing_off:
                    return held
                self._returns += 1
                self._asked_from_on_demand = True
                held = Placement(Choice.NONE)
            if held.choice is Choice.SPOT and held.pool == k:
                break  # keeps the instance it runs
            up = obs.available[k]
            sightings[k].see(tick, int(up))  # asked: launched, or refused
            if up:
                break
            available[k], observed[k] = False, True
            choice = Placement(Choice.NONE)
        return choice

    def _learn(self, obs: PoolsObservation) -> None:
        """Close the ticks before this one; note what this tick already shows."""
        tick = obs.tick
        if tick != self._tick + 1 and tick != 0:
            raise ValueError(f"LiveView needs every tick in order (got {tick} after {self._tick})")
        for pool in self._pools:
            if tick > 0:
                pool.close()
        self._tick = tick
        held = obs.held
        before = self._held
        if held.choice is Choice.SPOT and held.pool is not None:
            self._pools[held.pool].see(tick, 1)  # a running instance: up this tick
        elif before is not None and before.choice is Choice.SPOT and before.pool is not None:
            self._pools[before.pool].see(tick, 0)  # it was taken: the interruption notice
