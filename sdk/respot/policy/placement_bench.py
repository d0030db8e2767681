"""The multi-zone benchmark of `bench/specs/multi-zone.md` over one set of pools.

`respot` is the policy as the live control plane runs it for one job (`LiveView`: its own
sightings only); `respot-omniscient-view` is the same policy shown every pool at every
tick, an upper bound the control plane cannot reach.

For every (C, D, d) cell: run each policy on every window of the set (window k covers the
same ticks in every pool), normalize costs by the on-demand-only cost and report the mean,
the 75th percentile and the missed deadlines. Work is spread over processes in chunks of
windows; the optimum goes first because it is the longest.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass

import numpy as np

from respot.policy.bench import Cell, PolicyResult, _plain
from respot.policy.exceptions import JobSpecError, UnknownPolicyError
from respot.policy.live_view import LiveView
from respot.policy.multipool import MultiPoolPolicy
from respot.policy.omniscient_pools import optimal_pool_normalized_costs
from respot.policy.pool_baselines import GreedyAny, UniformProgressHome, UniformProgressRoundRobin
from respot.policy.pools import PoolSet, PoolsPolicy, simulate_pools

OMNISCIENT = "omniscient"
ROUND_ROBIN = UniformProgressRoundRobin.name
# The figure of record: respot as the control plane runs it for one job
# (`respot.core.pool_placement`): the same policy fed only the job's own launches,
# refusals and interruptions (`LiveView`; a job alone in a new account. The account's other
# jobs add sightings, which move the cost both ways: bench/placement/issue28/shared.py).
RESPOT = "respot"
# The same policy shown every pool at every tick, which live never sees: an upper bound on
# what more sightings could buy, reported beside the figure of record.
RESPOT_OMNISCIENT_VIEW = "respot-omniscient-view"
_FACTORIES: dict[str, Callable[[], PoolsPolicy]] = {
    UniformProgressHome.name: UniformProgressHome,
    UniformProgressRoundRobin.name: UniformProgressRoundRobin,
    GreedyAny.name: GreedyAny,
    RESPOT: LiveView,
    RESPOT_OMNISCIENT_VIEW: MultiPoolPolicy,
    # the name the live view had before it became the figure of record (README commands)
    "respot-live-view": LiveView,
    "respot-live-view-sightings-only": lambda: LiveView(ask_from_on_demand=False),
    # returns as live made them until 2026-11-24: the on-demand instance stopped first
    "respot-live-view-stop-first": lambda: LiveView(stop_first=True),
    # issue 28's plan over the learned pool model, live (off in `respot`: not better)
    "respot-planned": lambda: LiveView(MultiPoolPolicy(plan="raise")),
    "respot-planned-replace": lambda: LiveView(MultiPoolPolicy(plan="replace")),
    "respot-planned-lower": lambda: LiveView(MultiPoolPolicy(plan="lower")),
    "respot-planned-raise": lambda: LiveView(MultiPoolPolicy(plan="raise")),
}
# Reported policies, in the order of the JSON output.
PLACEMENT_POLICIES: tuple[str, ...] = (
    UniformProgressHome.name,
    ROUND_ROBIN,
    GreedyAny.name,
    OMNISCIENT,
    RESPOT,
    RESPOT_OMNISCIENT_VIEW,
)
CHUNK = 4  # windows per task: small enough to keep two processes busy, large enough to batch


def make_pools_policy(name: str) -> PoolsPolicy:
    """A fresh multi-pool policy by name ("up-home", "up-round-robin", "greedy-any", "respot", ...).

    "respot" is the live policy (`LiveView(MultiPoolPolicy())`), "respot-omniscient-view" the
    same policy seeing every pool.
    """
    try:
        return _FACTORIES[name]()
    except KeyError:
        known = ", ".join(_FACTORIES)
        raise UnknownPolicyError(f"unknown multi-pool policy {name!r} (known: {known})") from None


@dataclass(frozen=True, slots=True)
class PlacementCellResult:
    """Every policy's result for one cell of the multi-zone benchmark."""

    cell: Cell
    windows_per_trace: int
    pools: tuple[str, ...]
    results: dict[str, PolicyResult]

    def saving(self, policy: str = "respot") -> float:
        """(RR - policy) / RR on mean normalized cost, RR = up-round-robin."""
        rr = self.results[ROUND_ROBIN].mean
        return (rr - self.results[policy].mean) / rr

    def gap_closed(self, policy: str = "respot") -> float:
        """(RR - policy) / (RR - optimum) on mean normalized cost (nan when RR is optimal)."""
        rr = self.results[ROUND_ROBIN].mean
        best = self.results[OMNISCIENT].mean
        if rr - best <= 0:
            return float("nan")
        return (rr - self.results[policy].mean) / (rr - best)

    def to_json(self) -> dict[str, object]:
        """One line of `respot bench placement --json`."""
        return {
            "work_hours": _plain(self.cell.work_hours),
            "deadline_hours": _plain(self.cell.deadline_hours),
            "changeover_hours": _plain(self.cell.changeover_hours),
            "windows_per_trace": self.windows_per_trace,
            "pools": list(self.pools),
            "results": {name: r.to_json() for name, r in self.results.items()},
        }


def check_placement_cells(pool_set: PoolSet, cells: Sequence[Cell], windows: int) -> None:
    """Fail early, naming the problem, on jobs or sets the benchmark cannot run."""
    if windows < 1:
        raise JobSpecError(f"windows must be >= 1, got {windows}")
    for cell in cells:
        job = cell.job
        if not job.feasible(pool_set.gap_seconds):
            raise JobSpecError(
                f"C={cell.work_hours} h, D={cell.deadline_hours} h, d={cell.changeover_hours}"
                f" h: on-demand alone cannot finish in time with G={pool_set.gap_seconds} s"
            )
        pool_set.window_starts(job.window_ticks(pool_set.gap_seconds), windows)


def evaluate(
    pool_set: PoolSet, cell: Cell, starts: Sequence[int], policy: str
) -> tuple[list[float], int]:
    """Normalized costs of `policy` on the windows starting at `starts`, and its misses."""
    job = cell.job
    gap = pool_set.gap_seconds
    size = job.window_ticks(gap)
    spans = [pool_set.window(start, size) for start in starts]
    if policy == OMNISCIENT:
        costs = optimal_pool_normalized_costs(pool_set.pools, spans, job, gap)
        return [float(c) for c in costs], int(np.count_nonzero(~np.isfinite(costs)))
    outcomes = [
        simulate_pools(make_pools_policy(policy), pool_set.pools, span, job, gap) for span in spans
    ]
    return [o.normalized_cost for o in outcomes], sum(o.missed for o in outcomes)


_WORKER_SET: PoolSet | None = None


def _init_worker(pool_set: PoolSet) -> None:
    global _WORKER_SET  # noqa: PLW0603 - one copy of the traces per worker process
    _WORKER_SET = pool_set


def _task(cell: Cell, starts: list[int], policy: str) -> tuple[list[float], int]:
    assert _WORKER_SET is not None
    return evaluate(_WORKER_SET, cell, starts, policy)


Task = tuple[int, int, str]  # (cell index, chunk index, policy)


def _run_tasks(
    pool_set: PoolSet,
    cells: Sequence[Cell],
    chunks: Sequence[Sequence[list[int]]],
    tasks: Sequence[Task],
    workers: int | None,
) -> Iterator[tuple[Task, tuple[list[float], int]]]:
    workers = workers or os.cpu_count() or 1
    if workers == 1:
        for task in tasks:
            ci, chunk, policy = task
            yield task, evaluate(pool_set, cells[ci], chunks[ci][chunk], policy)
        return
    with ProcessPoolExecutor(workers, initializer=_init_worker, initargs=(pool_set,)) as pool:
        futures = {
            pool.submit(_task, cells[ci], chunks[ci][chunk], policy): (ci, chunk, policy)
            for ci, chunk, policy in tasks
        }
        for future in as_completed(futures):
            yield futures[future], future.result()


def run_placement_bench(
    pool_set: PoolSet,
    cells: Sequence[Cell],
    windows: int,
    *,
    policies: Sequence[str] = PLACEMENT_POLICIES,
    workers: int | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> list[PlacementCellResult]:
    """Run every policy on every cell; `on_progress(n)` reports n more windows evaluated."""
    check_placement_cells(pool_set, cells, windows)
    for name in policies:
        if name != OMNISCIENT:
            make_pools_policy(name)  # unknown names fail before anything runs
    chunks = []
    for cell in cells:
        starts = pool_set.window_starts(cell.job.window_ticks(pool_set.gap_seconds), windows)
        chunks.append([starts[lo : lo + CHUNK] for lo in range(0, len(starts), CHUNK)])
    tasks = [
        (ci, chunk, policy)
        for policy in sorted(policies, key=lambda name: name != OMNISCIENT)  # optimum first
        for ci in reversed(range(len(cells)))  # long deadlines (slowest optimum) first
        for chunk in range(len(chunks[ci]))
    ]
    done: dict[Task, tuple[list[float], int]] = {}
    for task, outcome in _run_tasks(pool_set, cells, chunks, tasks, workers):
        done[task] = outcome
        if on_progress:
            on_progress(len(outcome[0]))
    results = []
    for ci, cell in enumerate(cells):
        per_policy = {}
        for policy in policies:
            outcomes = [done[(ci, chunk, policy)] for chunk in range(len(chunks[ci]))]
            normalized = np.concatenate([values for values, _ in outcomes])
            per_policy[policy] = PolicyResult(
                mean=float(normalized.mean()),
                p75=float(np.percentile(normalized, 75)),
                misses=sum(missed for _, missed in outcomes),
                n=len(normalized),
            )
        results.append(
            PlacementCellResult(
                cell=cell,
                windows_per_trace=windows,
                pools=tuple(pool.name for pool in pool_set.pools),
                results=per_policy,
            )
        )
    return results


def mean_finite(values: Sequence[float]) -> float:
    """Mean of the finite values (nan if none): for per-cell shares averaged over cells."""
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else float("nan")
