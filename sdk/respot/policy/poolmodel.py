"""An explicit model of each spot pool, learned online from what the job has seen (issue 28).

Three things per set of pools, each from the histories a `PoolsObservation` carries (live:
the account's sightings; benchmark: the traces), each with a prior and no constant fitted to
a trace set:

1. **How long runs last, by age** (`RunLaw`, one for up-runs and one for outages per pool):
   a Kaplan-Meier product-limit estimate, so the run still in progress counts as *censored*
   (it has lasted `age` ticks and is known to last longer) instead of being ignored, as
   `RunStatistics` ignores it. Live, a pool's current run is often the only one the job has
   seen, and ignoring it means learning nothing from it. The estimate is blended with the
   policy's scale-free prior P(L > a) = 1 / (a + 1) (`RespotParameters.lindy_prior_runs`
   pseudo-runs): the prior is a pseudo-population that is still at risk at age a in number
   prior / (a + 1) and ends there in number prior / ((a + 1)(a + 2)), so the hazard at age a
   is (prior / ((a + 1)(a + 2)) + ended) / (prior / (a + 1) + at risk). With no data this is
   the Lindy hazard 1 / (a + 2); with many runs it is the Kaplan-Meier hazard. Why this and
   not an exponential or Weibull fit: spot run lengths have falling hazards and bumpy laws
   (runs that end at a round number of hours), which a one- or two-parameter family misfits
   on exactly the ages the wait decisions look at, and the prior is scale-free, so it needs
   no time scale chosen on a trace set (an exponential prior would need a mean; the job's
   horizon is one candidate, but it says nothing about the market).
2. **Within-region co-movement** (`CoMovement`): for two pools i, j of one region, the chance
   that j is down at the tick i goes down (i's up-run ends), counted over i's run ends, with
   the independence value (j's down fraction) as a prior of one such event. And, over every
   pool, the chance that *every other* pool is down when one goes down (the job, preempted,
   finds nothing to move to): `stranded`.
3. **The chance that a set of pools is still all down** after t more ticks
   (`PoolModel.all_down`): between the independent product of their outage survivals and the
   fully correlated minimum, weighted by their learned co-movement.

Incremental like `RunStatistics`: a cached model extends itself while the histories are
longer views of the same sources, so a tick costs the new columns only.
"""

from __future__ import annotations

from collections.abc import Sequence

from respot.policy.history import RunStatistics
from respot.policy.model import HistoryView
from respot.policy.pools import Pool


class RunLaw:
    """Run lengths of one value (1: up-runs, 0: outages) of one or more histories.

    Kaplan-Meier with censoring, blended with the Lindy prior of weight `prior_runs`; reads
    like `RunStatistics` for one value (`current_age`, `hazard`, `survival`,
    `expected_residual`), with `value` kept as the first argument for that reason.
    """

    __slots__ = ("_ages", "_stats", "_survival", "prior_runs", "value")

    def __init__(self, stats: Sequence[RunStatistics], value: int, prior_runs: float) -> None:
        self._stats = tuple(stats)
        self.value = value
        self.prior_runs = prior_runs
        # the trailing run of each history still of `value`: censored at its age
        self._ages = tuple(s.current_age(value) for s in self._stats)
        self._survival: list[float] = [1.0]  # S(0..), built lazily

    def current_age(self, value: int) -> int:
        """The first history's trailing run of `value` (the pool's own; 0 if not `value`)."""
        return self._stats[0].current_age(value) if self._stats else 0

    def _at_risk(self, age: int) -> tuple[int, int]:
        """Runs known to have lasted more than `age` ticks, and those that ended at age + 1."""
        alive = ended = 0
        for stats, trailing in zip(self._stats, self._ages, strict=True):
            longer = stats._longer_than(self.value, age)
            alive += longer + (1 if trailing >= age + 2 else 0)
            ended += longer - stats._longer_than(self.value, age + 1)
        return alive, ended

    def hazard(self, value: int, age: int, prior_runs: float | None = None) -> float:
        """P(a run of `value` that has lasted `age` ticks ends after the next tick)."""
        del value, prior_runs  # the law's own (kept for RunStatistics' signature)
        alive, ended = self._at_risk(age)
        prior = self.prior_runs
        return (prior / ((age + 1) * (age + 2)) + ended) / (prior / (age + 1) + alive)

    def survival(self, value: int, age: int, prior_runs: float | None = None) -> float:
        """P(a new run lasts more than `age` ticks): the product of 1 - hazard below `age`."""
        del value, prior_runs
        table = self._survival
        if len(table) <= age:
            self._extend(age + 1)
        return table[age]

    def _extend(self, size: int) -> None:
        """Grow the survival table to `size` entries (at least doubling: amortized)."""
        table = self._survival
        start = len(table) - 1  # ages start .. size - 2 give entries start + 1 .. size - 1
        stop = max(size - 1, 2 * len(table))
        alive = [0] * (stop - start + 1)  # at risk at ages start .. stop
        for stats, trailing in zip(self._stats, self._ages, strict=True):
            counts = stats._at_least[self.value]
            # counts[a + 1] for a = start .. stop (0 past the longest run)
            chunk = counts[start + 1 : stop + 2]
            for i, c in enumerate(chunk):
                alive[i] += c
            # the censored trailing run: at risk while age + 2 <= trailing
            for i in range(max(0, min(trailing - 1 - start, len(alive)))):
                alive[i] += 1
        ended = [0] * (stop - start)
        for stats in self._stats:
            counts = stats._at_least[self.value]
            chunk = counts[start + 1 : stop + 2]
            for i in range(min(len(chunk), stop - start)):
                after = chunk[i + 1] if i + 1 < len(chunk) else 0
                ended[i] += chunk[i] - after
        prior = self.prior_runs
        last = table[-1]
        for i in range(stop - start):
            age = start + i
            hazard = (prior / ((age + 1) * (age + 2)) + ended[i]) / (prior / (age + 1) + alive[i])
            last *= 1 - hazard
            table.append(last)

    def expected_residual(
        self, value: int, age: int, horizon: int, prior_runs: float | None = None
    ) -> float:
        """E[min(L - age, horizon) | L > age], in ticks, this one included."""
        del value, prior_runs
        if horizon <= 0:
            return 0.0
        now = self.survival(self.value, age)
        if now <= 0:
            return 0.0
        self.survival(self.value, age + horizon)  # extend the table once
        return sum(self._survival[age : age + horizon]) / now

    def mean(self, horizon: int) -> float:
        """E[min(L, horizon)] of a new run, in ticks."""
        return self.expected_residual(self.value, 0, horizon)


class CoMovement:
    """Within-region co-movement of pools, counted tick by tick.

    At each tick t where pool i goes down (up at t - 1, down at t), for every other pool j:
    whether j is down at t. `down_given(j, i)` is that fraction with the independence value
    (j's down fraction so far) as a prior of one event; `stranded()` the same for "every
    other pool is down".
    """

    __slots__ = ("_downs", "_events", "_pair", "_previous", "_stranded", "_ticks", "n")

    def __init__(self, n: int) -> None:
        self.n = n
        self._previous: tuple[int, ...] | None = None
        self._events = [0] * n  # ticks at which pool i went down
        self._pair = [[0] * n for _ in range(n)]  # [i][j]: j down at those ticks
        self._stranded = 0  # events at which every other pool was down
        self._downs = [0] * n  # ticks each pool was down
        self._ticks = 0

    def extend(self, columns: Sequence[Sequence[int]]) -> None:
        """Append ticks; columns[t][k] is pool k's 0/1 at that tick."""
        for raw in columns:
            column = tuple(1 if v else 0 for v in raw)
            self._ticks += 1
            for k, v in enumerate(column):
                if not v:
                    self._downs[k] += 1
            previous = self._previous
            if previous is not None:
                for i in range(self.n):
                    if previous[i] and not column[i]:
                        self._events[i] += 1
                        row = self._pair[i]
                        others_down = True
                        for j in range(self.n):
                            if j != i and not column[j]:
                                row[j] += 1
                            elif j != i:
                                others_down = False
                        if others_down and self.n > 1:
                            self._stranded += 1
            self._previous = column

    @property
    def ticks(self) -> int:
        return self._ticks

    @property
    def events(self) -> tuple[int, int]:
        """Run ends counted, and those that stranded the job (a cache key)."""
        return sum(self._events), self._stranded

    def down_fraction(self, k: int) -> float:
        """Pool k's down fraction, with one tick at one half as its prior."""
        return (self._downs[k] + 0.5) / (self._ticks + 1)

    def down_given(self, j: int, i: int) -> float:
        """P(pool j is down at the tick pool i goes down)."""
        return (self._pair[i][j] + self.down_fraction(j)) / (self._events[i] + 1)

    def stranded(self) -> float:
        """P(every other pool is down at the tick one pool goes down)."""
        events = sum(self._events)
        independent = 1.0
        for k in range(self.n):
            independent *= self.down_fraction(k)
        # the independence value for "every other": the product over n - 1 pools, on average
        average = independent ** ((self.n - 1) / self.n) if self.n > 1 else 0.0
        return (self._stranded + average) / (events + 1)


class PoolModel:
    """The learned model of every pool of one observation (see the module's docstring)."""

    def __init__(
        self,
        pools: Sequence[Pool],
        stats: Sequence[RunStatistics],
        comovement: CoMovement,
        prior_runs: float,
    ) -> None:
        if len(pools) != len(stats) or comovement.n != len(pools):
            raise ValueError("one run statistics and one co-movement row per pool")
        self.pools = tuple(pools)
        self.stats = tuple(stats)
        self.comovement = comovement
        self.prior_runs = prior_runs
        self.up = [RunLaw([s], 1, prior_runs) for s in stats]
        self.down = [RunLaw([s], 0, prior_runs) for s in stats]
        self._pooled_up: RunLaw | None = None

    def pooled_up(self) -> RunLaw:
        """Every pool's up-runs as one law (the run a job gets on some pool)."""
        if self._pooled_up is None:
            self._pooled_up = RunLaw(self.stats, 1, self.prior_runs)
        return self._pooled_up

    def siblings(self, k: int) -> list[int]:
        """The other pools of pool k's region."""
        region = self.pools[k].region
        return [j for j, p in enumerate(self.pools) if j != k and p.region == region]

    def correlation(self, group: Sequence[int]) -> float:
        """How much the pools of `group` move together, 0 (independent) to 1 (as one).

        The mean over ordered pairs of (P(j down | i went down) - P(j down)) /
        (1 - P(j down)), clipped to [0, 1]: 0 when j's outages ignore i's, 1 when j is
        always down as i goes down.
        """
        pairs = [(i, j) for i in group for j in group if i != j]
        if not pairs:
            return 0.0
        total = 0.0
        for i, j in pairs:
            base = self.comovement.down_fraction(j)
            lift = (self.comovement.down_given(j, i) - base) / (1 - base) if base < 1 else 0.0
            total += min(max(lift, 0.0), 1.0)
        return total / len(pairs)

    def all_down(self, group: Sequence[int], more: int) -> float:
        """P(every pool of `group`, all down now, is still down `more` ticks from now).

        Each pool's outage survival from its age, S_k(a_k + t) / S_k(a_k); combined between
        the independent product and the fully correlated minimum, weighted by the group's
        learned `correlation`.
        """
        if not group:
            return 0.0
        each = []
        for k in group:
            law = self.down[k]
            age = self.stats[k].current_age(0)
            now = law.survival(0, age)
            each.append(law.survival(0, age + more) / now if now > 0 else 0.0)
        product = 1.0
        for value in each:
            product *= value
        rho = self.correlation(group)
        return (1 - rho) * product + rho * min(each)


class CachedCoMovement:
    """A `CoMovement` extended in place while the histories are longer views of one source."""

    __slots__ = ("_sources", "movement")

    def __init__(self) -> None:
        self.movement = CoMovement(0)
        self._sources: tuple[object, ...] | None = None

    def update(self, histories: Sequence[Sequence[int]]) -> CoMovement:
        length = len(histories[0]) if histories else 0
        sources = tuple(h.source if isinstance(h, HistoryView) else None for h in histories)
        same = (
            self._sources is not None
            and None not in sources
            and len(sources) == len(self._sources)
            and all(a is b for a, b in zip(sources, self._sources, strict=True))
            and length >= self.movement.ticks
        )
        if not same:
            self.movement = CoMovement(len(histories))
            self._sources = sources
        seen = self.movement.ticks
        if length > seen:
            if all(isinstance(h, HistoryView) for h in histories):
                rows = [h.source[seen:length] for h in histories]  # type: ignore[attr-defined]
            else:
                rows = [list(h)[seen:length] for h in histories]
            self.movement.extend(list(zip(*rows, strict=True)))
        return self.movement
