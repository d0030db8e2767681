"""A multi-pool policy fed only what a one-job account sees live: the benchmark's view of live.

The benchmark (`simulate_pools`) shows the policy every pool's availability at every tick.
The live control plane (`respot.core.pool_placement`, `respot.core.pool_watch`) knows a pool
only from its own sightings: a spot launch that succeeded or an instance running there (1),
a capacity refusal or an interruption (0); a tick nobody observed repeats the last sighting,
a pool never observed reads as up throughout and one observed later is padded before its
first sighting with that sighting. A pool nobody asked this tick counts as available when
placing (asking is free, a refusal marks it down and the next pool is asked) and is marked
not observed (`PoolsObservation.observed`); so does it when leaving on-demand
(`switch_running`: the return asks while the on-demand instance trains on).

`LiveView(policy)` wraps a policy with exactly that: each tick it rebuilds the observation
from its own sightings, asks the pools in the order the policy picks them (its pick, then
its pick with that pool refused, ...) against the window's true availability, and returns
the first that has spot, or the policy's non-spot answer. From on-demand it does what
`PoolPlacementPolicy.switch_running` does: the same asking, at most `MAX_SPOT_RETURNS`
returns that moved the job, backing off after refused ones (`return_backoff_ticks`: 1, 2,
4, ... ticks, at most two changeovers), and only with two changeovers of slack. A return
that every pool refuses costs nothing: live asks spot first and stops the on-demand
instance only once a spot one has launched (`respot.core.lifecycle.returns._begin_return`), so the
job trains on on-demand. Until 2026-11-24 the on-demand instance stopped first and the job
paid a changeover to be back on on-demand (`restarted`, which `simulate_pools` reads;
`stop_first=True`, `respot-live-view-stop-first`, still models it, with the bounds of then:
at most `MAX_SPOT_RETURNS` returns refused or not, the backoff doubling without limit).
With no other job in the account, this is what live placement of one job would do on the
window; `respot-live-view` in `bench/placement/dev.py --policy` measures it on every window
of a set (`respot-live-view-sightings-only`: returns from on-demand only on a sighting, as
live did until 2026-11-24). `beside`: what the account's other jobs see while this one
runs, tick by tick (`made` is what this job makes, for them); live hands a job those, and
nothing the account saw before the job's start (`respot.core.pool_watch.view`). `account`:
what the account's other jobs saw before this one started, ahead of the job's own
sightings, as live handed a job (up to two days of them) until 2026-11-27; a bench-only
option now. `sightings()` is what this job leaves for the next.
`bench/placement/issue28/shared.py` measures what a colleague's sightings are worth,
before and beside the job: the ones from before its start were not always worth
something, hence the change. Not modelled: the live-only rule for a first spot start from
waiting (two changeovers of slack), and the changeover's length beyond d.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

from respot.policy.model import Choice, HistoryView
from respot.policy.multipool import MultiPoolPolicy
from respot.policy.pools import Placement, PoolsObservation, PoolsPolicy

MAX_SPOT_RETURNS = 24  # on-demand -> spot moves per job (refused returns: the backoff)


def return_backoff_ticks(refused: int, max_ticks: int) -> int:
    """Ticks to wait before the next return from on-demand after `refused` refused ones.

    A return that every pool refuses costs API calls only (a refusal per pool: spot is asked
    before the on-demand instance stops); the next waits 1, 2, 4, ... ticks, never more than
    `max_ticks` (`backoff_cap_ticks`: two changeovers, the time a return must pay back), so
    a job asks the pools at most about once per `max_ticks` ticks while on on-demand.
    """
    if refused <= 0:
        return 0
    return min(2 ** min(refused - 1, 30), max(max_ticks, 1))


def backoff_cap_ticks(changeover_seconds: float, tick_seconds: float) -> int:
    """The longest wait between refused returns: two changeovers, in whole ticks (>= 1)."""
    return max(1, math.ceil(2 * changeover_seconds / max(tick_seconds, 1.0)))


class _Sightings:
    """One pool's history as the account saw it: ticks 0.. as a growing list of 0/1.

    `before`: the account's sightings of the pool before the job's tick 0 (they head the
    list, so the job's tick t is entry `offset + t`); None: nobody has observed it.
    """

    __slots__ = ("now", "offset", "ticks")

    def __init__(self, before: Sequence[int] | None = None, offset: int = 0) -> None:
        # None: never observed (reads as up)
        self.ticks: list[int] | None = None if before is None else [int(v) for v in before]
        self.offset = offset
        self.now: int | None = None  # a sighting at the tick being decided

    def see(self, tick: int, value: int) -> None:
        """A sighting at `tick` (the tick being decided); the newest of a tick wins."""
        if self.ticks is None:
            # first sighting: the past reads as it (a new list, so that cached statistics
            # of the old reading are rebuilt, not extended)
            self.ticks = [value] * (self.offset + tick)
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
        """The account's ticks, then the job's 0..tick-1 (`ones`: all up, never observed)."""
        if self.ticks is None:
            return HistoryView(ones, self.offset + tick)
        # a list that only grows: the policy's cached statistics extend it tick by tick
        return HistoryView(self.ticks, self.offset + tick)  # type: ignore[arg-type]

    @property
    def last(self) -> int:
        if self.now is not None:
            return self.now
        return self.ticks[-1] if self.ticks else 1


class LiveView:
    """`policy` placed as live would place it, seeing only its own sightings."""

    name = "respot"  # the figure of record of `respot bench placement`

    def __init__(
        self,
        policy: PoolsPolicy | None = None,
        *,
        ask_from_on_demand: bool = True,
        stop_first: bool = False,
        account: Sequence[Sequence[int] | None] | None = None,
        beside: Mapping[int, Sequence[tuple[int, int]]] | None = None,
    ) -> None:
        """`account`: what the account saw of each pool before the job's first tick.

        One entry per pool, oldest tick first, every observed pool over the same ticks
        (None: a pool nobody observed), as `respot.core.pool_watch` handed a job placed live
        the sightings its colleagues' jobs made until 2026-11-27 (live hands none from
        before a job's start now); None: a job alone in a new account, or live.
        `beside`: the sightings (pool, 0/1) other jobs of the account make at each of this
        job's ticks, seen before this job asks (the newest of a tick wins, as live).
        """
        self.policy = policy or MultiPoolPolicy()
        self.ask_from_on_demand = ask_from_on_demand
        self.stop_first = stop_first  # the return before 2026-11-24: on-demand stopped first
        self.account = None if account is None else tuple(account)
        lengths = {len(row) for row in self.account or () if row is not None}
        if len(lengths) > 1:
            raise ValueError(f"account sightings cover different ticks per pool: {lengths}")
        self._offset = lengths.pop() if lengths else 0
        self.beside = beside or {}
        self.made: list[tuple[int, int, int]] = []  # (tick, pool, 0/1) this job's sightings
        self._returns = self._refused = self._next_return = 0
        self.restarted = False
        self._asked_from_on_demand = False
        self._pools: list[_Sightings] = []
        self._tick = -1
        self._held: Placement | None = None
        self._ones: tuple[int, ...] = ()

    def place(self, obs: PoolsObservation) -> Placement:
        if obs.tick == 0 or len(self._pools) != len(obs.pools):
            before = self.account or (None,) * len(obs.pools)
            if len(before) != len(obs.pools):
                raise ValueError(f"account sightings for {len(before)} pools, not {len(obs.pools)}")
            self._pools = [_Sightings(row, self._offset) for row in before]
            self.made = []
            self._held = None
            self._returns = self._refused = self._next_return = 0
            self._ones = (1,) * (self._offset + obs.deadline_seconds // obs.gap_seconds + 1)
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
        # a return that every pool refused: the on-demand instance trained on (spot first),
        # and the next return backs off. Stop first (before 2026-11-24), the job was placed
        # again from nothing (the pools just refused are seen down), and going back to
        # on-demand paid a changeover (`simulate_pools` reads `restarted`)
        returned = obs.held.choice is Choice.ON_DEMAND and self._asked_from_on_demand
        self.restarted = False
        if returned and choice.choice is not Choice.SPOT:
            if self.stop_first:
                idle = replace(obs, held=Placement(Choice.NONE))
                choice = self._ask(idle, idle.held, available, observed, histories)
                self.restarted = choice == obs.held
            else:
                choice = obs.held
            self._refused += 1
            cap = backoff_cap_ticks(obs.changeover_seconds, obs.gap_seconds)
            if self.stop_first:
                cap = 2**30  # then: doubling without limit
            self._next_return = obs.tick + return_backoff_ticks(self._refused, cap)
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
        tick = obs.tick
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
                # the live return: at most MAX_SPOT_RETURNS that moved the job, with slack
                # for the whole changeover and the one back; spot is asked first
                late = obs.slack_seconds < 2 * obs.changeover_seconds
                backing_off = obs.tick < self._next_return
                moved = self._returns - (0 if self.stop_first else self._refused)
                if moved >= MAX_SPOT_RETURNS or late or backing_off:
                    return held
                self._returns += 1
                self._asked_from_on_demand = True
                held = Placement(Choice.NONE)
            if held.choice is Choice.SPOT and held.pool == k:
                break  # keeps the instance it runs
            up = obs.available[k]
            self._see(k, tick, int(up))  # asked: launched, or refused
            if up:
                break
            available[k], observed[k] = False, True
            choice = Placement(Choice.NONE)
        return choice

    def sightings(self, ticks: int) -> list[list[int] | None]:
        """The account's sightings of each pool over the job's first `ticks` ticks.

        What a later job of the account would be handed (`account`): the ticks this job
        closed, the last sighting repeated past its end (as live, a tick nobody observed
        repeats the last one); None for a pool nobody observed. The account's sightings from
        before this job are not included.
        """
        rows: list[list[int] | None] = []
        for pool in self._pools:
            if pool.ticks is None:
                rows.append(None)
                continue
            own = pool.ticks[pool.offset : pool.offset + ticks]
            last = own[-1] if own else (pool.ticks[-1] if pool.ticks else 1)
            rows.append(own + [last] * (ticks - len(own)))
        return rows

    def _learn(self, obs: PoolsObservation) -> None:
        """Close the ticks before this one; note what this tick already shows."""
        tick = obs.tick
        if tick != self._tick + 1 and tick != 0:
            raise ValueError(f"LiveView needs every tick in order (got {tick} after {self._tick})")
        for pool in self._pools:
            if tick > 0:
                pool.close()
        self._tick = tick
        for k, value in self.beside.get(tick, ()):  # the account's other jobs, first
            self._pools[k].see(tick, int(value))
        held = obs.held
        before = self._held
        if held.choice is Choice.SPOT and held.pool is not None:
            self._see(held.pool, tick, 1)  # a running instance: up this tick
        elif before is not None and before.choice is Choice.SPOT and before.pool is not None:
            self._see(before.pool, tick, 0)  # it was taken: the interruption notice

    def _see(self, pool: int, tick: int, value: int) -> None:
        """A sighting this job makes (what it writes to the account's records)."""
        self._pools[pool].see(tick, value)
        self.made.append((tick, pool, value))
