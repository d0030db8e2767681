"""What the past of a spot trace says about its future: run lengths, hazards, availability.

Only integer counts are kept, so statistics built tick by tick are exactly those built from
the whole history at once (a policy may cache them without changing a single decision).

A *run* is a maximal stretch of equal availability (an up-run of 1s or a down-run of 0s).
Run lengths are counted in ticks. The estimators blend the completed runs of the history
with a scale-free ("Lindy") prior, P(L > a) = 1 / (a + 1): without data, a run that has
lasted a ticks is expected to last about as long again. The prior carries the weight of
`prior_runs` observations and fades as completed runs accumulate.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterable, Iterator, Sequence
from typing import overload


class RunStatistics:
    """Incremental run-length statistics of a 0/1 availability history."""

    __slots__ = ("_at_least", "_cumulative", "age", "last", "runs", "ticks", "up_ticks")

    def __init__(self, history: Iterable[int] = ()) -> None:
        self.ticks = 0  # entries seen
        self.up_ticks = 0  # entries equal to 1
        self.last = -1  # value of the trailing run (-1: no history yet)
        self.age = 0  # length of the trailing run so far (it is not completed yet)
        self.runs = [0, 0]  # completed runs, by value (down, up)
        # _at_least[v][k]: completed runs of value v with length >= k (index 0 unused).
        self._at_least: tuple[list[int], list[int]] = ([0], [0])
        # Prefix sums of _at_least, rebuilt lazily after a run completes (None: stale).
        self._cumulative: list[list[int] | None] = [None, None]
        self.extend(history)

    def extend(self, values: Iterable[int]) -> None:
        """Append history entries (any truthy value counts as available)."""
        for raw in values:
            value = 1 if raw else 0
            if value == self.last:
                self.age += 1
            else:
                if self.last >= 0:
                    self._complete(self.last, self.age)
                self.last = value
                self.age = 1
            self.ticks += 1
            self.up_ticks += value

    def _complete(self, value: int, length: int) -> None:
        counts = self._at_least[value]
        if len(counts) <= length:
            counts.extend([0] * (length + 1 - len(counts)))
        for k in range(1, length + 1):
            counts[k] += 1
        self.runs[value] += 1
        self._cumulative[value] = None

    def current_age(self, value: int) -> int:
        """Ticks the trailing run of `value` has lasted before now (0 if it is not `value`)."""
        return self.age if self.last == value else 0

    def _longer_than(self, value: int, age: int) -> int:
        counts = self._at_least[value]
        return counts[age + 1] if age + 1 < len(counts) else 0

    def hazard(self, value: int, age: int, prior_runs: float) -> float:
        """P(a run of `value` that has lasted `age` ticks ends after the next tick)."""
        alive = self._longer_than(value, age)
        ending = alive - self._longer_than(value, age + 1)
        return (prior_runs / (age + 2) + ending) / (prior_runs + alive)

    def survival(self, value: int, age: int, prior_runs: float) -> float:
        """P(a new run of `value` lasts more than `age` ticks)."""
        alive = self._longer_than(value, age)
        return (prior_runs / (age + 1) + alive) / (prior_runs + self.runs[value])

    def expected_residual(self, value: int, age: int, horizon: int, prior_runs: float) -> float:
        """E[min(L - age, horizon) | L > age]: ticks a run of `value` that has lasted `age`
        ticks is expected to last from now on, counting this tick, at most `horizon`.

        The survival function is the one of `survival` (completed runs blended with the Lindy
        prior), so the sum over t < horizon of P(L > age + t | L > age) has a closed form:
        the prior contributes a difference of harmonic numbers, the runs a prefix sum.
        """
        if horizon <= 0:
            return 0.0
        prior_part = prior_runs * (_harmonic(age + horizon) - _harmonic(age))
        alive = prior_runs / (age + 1) + self._longer_than(value, age)
        return (prior_part + self._residual_sum(value, age, horizon)) / alive

    def _residual_sum(self, value: int, age: int, horizon: int) -> int:
        """sum over x = age .. age + horizon - 1 of the completed runs longer than x."""
        counts = self._at_least[value]
        cumulative = self._cumulative[value]
        if cumulative is None:
            cumulative = [0]
            for count in counts[1:]:
                cumulative.append(cumulative[-1] + count)
            self._cumulative[value] = cumulative
        top = len(cumulative) - 1
        # sum of n_{>x} for x = age .. age + horizon - 1 = sum of _at_least[age+1 .. age+horizon]
        return cumulative[min(age + horizon, top)] - cumulative[min(age, top)]

    def found_survival(self, value: int, horizon: int, prior_runs: float) -> float:
        """E[S(A)]: `survival` at the age A of a run of `value` found in progress, age unknown.

        By renewal theory a run found in progress at an arbitrary tick has lasted a ticks
        with P(A = a) = S(a) / E[L], S(a) = P(L > a) (`survival`): long runs cover more ticks,
        so a run found is older than a new one. Averaged over that age, the survival is
        sum S(a)^2 / sum S(a). The ages are those a history of `horizon` ticks can show
        (a < horizon): the Lindy prior's S(a) = 1 / (a + 1) has no finite mean. Beyond the
        longest completed run only the prior is left, summed in closed form.
        """
        if horizon <= 0:
            return 1.0
        counts = self._at_least[value]
        weight = prior_runs + self.runs[value]
        if weight <= 0:
            return 1.0
        longest = len(counts) - 1  # completed runs are longer than a only for a < longest
        squares = total = 0.0
        for age in range(min(longest, horizon)):
            alive = prior_runs / (age + 1) + counts[age + 1]
            squares += alive * alive
            total += alive
        if horizon > longest:  # ages longest .. horizon - 1: the prior alone
            total += prior_runs * (_harmonic(horizon) - _harmonic(longest))
            squares += prior_runs**2 * (_harmonic_squares(horizon) - _harmonic_squares(longest))
        return squares / (weight * total) if total > 0 else 1.0

    def found_lasting(self, value: int, start: int, stop: int, horizon: int, prior: float) -> float:
        """sum over t = start .. stop - 1 of P(R > t), R the ticks left (this one included) of
        a run of `value` found in progress, its age unknown.

        By renewal theory P(R > t) = T(t) / T(0), T(t) = sum over x >= t of S(x) (`survival`):
        the remaining life of a run found at an arbitrary tick has the law of its age
        (`found_survival`). The ages are those a history of `horizon` ticks can show
        (x < horizon; T(t) = 0 beyond); the Lindy prior's part of T is a difference of
        harmonic numbers and its sum over t one of sum H_t = (n + 1) H_n - n. With
        stop = start + 1 this is P(R > start).
        """
        if horizon <= 0:
            return 0.0
        stop = min(stop, horizon)
        if stop <= start:
            return 0.0
        total = prior * _harmonic(horizon) + self._residual_sum(value, 0, horizon)
        if total <= 0:
            return 0.0
        # the prior: sum over t of (H_horizon - H_t)
        harmonics = _harmonic_sum(stop - 1) - _harmonic_sum(start - 1)
        part = prior * ((stop - start) * _harmonic(horizon) - harmonics)
        # the completed runs: sum over t of sum over x = t .. horizon - 1 of n_x, i.e. each
        # n_x (x >= start) counted for t = start .. min(x, stop - 1)
        counts = self._at_least[value]
        runs = 0
        for x in range(start, min(len(counts) - 1, horizon)):
            runs += counts[x + 1] * (min(x, stop - 1) - start + 1)
        return (part + runs) / total

    def availability(self, gap_seconds: int, prior: float, prior_seconds: float) -> float:
        """Fraction of time spot was available, shrunk towards `prior` by `prior_seconds`."""
        seen = self.ticks * gap_seconds
        return (self.up_ticks * gap_seconds + prior * prior_seconds) / (seen + prior_seconds)


class PooledRunStatistics:
    """One history's run lengths, with other histories' completed runs as extra evidence.

    Reads like `RunStatistics` (current_age, hazard, survival, expected_residual): the age
    is the own history's; the run-length law blends the own completed runs (weight 1), the
    others' completed runs (weight `weight` each) and the Lindy prior. Several pools of one
    provider see runs of a similar law: early in a window each pool has completed few runs,
    and the others' runs say more about a young run's chances than the prior alone.
    """

    __slots__ = ("others", "own", "weight")

    def __init__(self, own: RunStatistics, others: Sequence[RunStatistics], weight: float) -> None:
        self.own = own
        self.others = tuple(others)
        self.weight = weight

    def current_age(self, value: int) -> int:
        return self.own.current_age(value)

    def _alive(self, value: int, age: int) -> float:
        other = sum(s._longer_than(value, age) for s in self.others)
        return self.own._longer_than(value, age) + self.weight * other

    def hazard(self, value: int, age: int, prior_runs: float) -> float:
        alive = self._alive(value, age)
        ending = alive - self._alive(value, age + 1)
        return (prior_runs / (age + 2) + ending) / (prior_runs + alive)

    def survival(self, value: int, age: int, prior_runs: float) -> float:
        runs = self.own.runs[value] + self.weight * sum(s.runs[value] for s in self.others)
        return (prior_runs / (age + 1) + self._alive(value, age)) / (prior_runs + runs)

    def expected_residual(self, value: int, age: int, horizon: int, prior_runs: float) -> float:
        if horizon <= 0:
            return 0.0
        prior_part = prior_runs * (_harmonic(age + horizon) - _harmonic(age))
        runs_part = self.own._residual_sum(value, age, horizon) + self.weight * sum(
            s._residual_sum(value, age, horizon) for s in self.others
        )
        alive = prior_runs / (age + 1) + self._alive(value, age)
        return (prior_part + runs_part) / alive


_EULER_GAMMA = 0.5772156649015329


def _harmonic(n: int) -> float:
    """H_n = 1 + 1/2 + ... + 1/n (exact sum below 16, asymptotic series above: error < 1e-9)."""
    if n < 16:
        return math.fsum(1 / k for k in range(1, n + 1))
    return math.log(n) + _EULER_GAMMA + 1 / (2 * n) - 1 / (12 * n**2) + 1 / (120 * n**4)


def _harmonic_sum(n: int) -> float:
    """H_1 + ... + H_n = (n + 1) H_n - n (0 for n <= 0)."""
    if n <= 0:
        return 0.0
    return (n + 1) * _harmonic(n) - n


def _harmonic_squares(n: int) -> float:
    """1 + 1/4 + ... + 1/n^2 (exact sum below 64, asymptotic series above: error < 1e-12)."""
    if n < 64:
        return math.fsum(1 / k**2 for k in range(1, n + 1))
    return math.pi**2 / 6 - 1 / n + 1 / (2 * n**2) - 1 / (6 * n**3) + 1 / (30 * n**5)


class RunLengths(Sequence[int]):
    """A 0/1 history kept as run-length pairs [(value, length), ...], read as the 0/1 sequence.

    What the control plane stores (a job record's `avail`, a pool's observed history): a few
    pairs for days of ticks. Pass it wherever a history is expected (`Observation.history`,
    `PoolsObservation.histories`); iterating expands it lazily and indexing is a bisection,
    so no list of every tick is built.
    """

    __slots__ = ("_ends", "_values")

    def __init__(self, runs: Iterable[Sequence[int]]) -> None:
        values: list[int] = []
        ends: list[int] = []
        total = 0
        for index, run in enumerate(runs):
            if len(run) != 2:
                raise ValueError(f"run {index}: expected a (value, length) pair, got {run!r}")
            value, length = run
            if value not in (0, 1) or isinstance(value, bool):
                raise ValueError(f"run {index}: value must be 0 or 1, got {value!r}")
            if isinstance(length, bool) or not isinstance(length, int) or length < 0:
                raise ValueError(f"run {index}: length must be an integer >= 0, got {length!r}")
            if length == 0:
                continue
            if values and values[-1] == value:
                ends[-1] += length
            else:
                values.append(value)
                ends.append(total + length)
            total += length
        self._values = tuple(values)
        self._ends = tuple(ends)

    @property
    def runs(self) -> tuple[tuple[int, int], ...]:
        """The maximal runs as (value, length) pairs."""
        starts = (0, *self._ends[:-1])
        return tuple(
            (v, end - start) for v, start, end in zip(self._values, starts, self._ends, strict=True)
        )

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[int, ...]: ...

    def __getitem__(self, index: int | slice) -> int | tuple[int, ...]:
        if isinstance(index, slice):
            return tuple(self)[index]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("history index out of range")
        return self._values[bisect.bisect_right(self._ends, index)]

    def __iter__(self) -> Iterator[int]:
        start = 0
        for value, end in zip(self._values, self._ends, strict=True):
            yield from itertools.repeat(value, end - start)
            start = end

    def __repr__(self) -> str:
        return f"RunLengths({list(self.runs)!r})"
