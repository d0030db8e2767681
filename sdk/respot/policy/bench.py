"""The cost-to-finish benchmark of benchmarks/spot-policy.md over a set of trace files.

For every (C, D, d) cell: run each policy on every window of every trace, normalize costs by
the on-demand-only cost and report the mean, the 75th percentile and the missed deadlines.
Work is spread over processes, one task per (cell, trace, policy); the optimum goes first
because it is the longest.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass

import numpy as np

from respot.policy.exceptions import JobSpecError
from respot.policy.model import Job, Trace
from respot.policy.omniscient import optimal_normalized_costs
from respot.policy.registry import make_policy
from respot.policy.simulator import simulate

OMNISCIENT = "omniscient"
# Reported policies, in the order of the JSON output.
BENCH_POLICIES: tuple[str, ...] = (
    "on-demand",
    "greedy",
    "uniform-progress",
    OMNISCIENT,
    "respot",
)


@dataclass(frozen=True, slots=True)
class Cell:
    """One (C, D, d) setting of the benchmark, in hours."""

    work_hours: float
    deadline_hours: float
    changeover_hours: float

    @property
    def job(self) -> Job:
        """The job in integer seconds."""
        return Job.from_hours(self.work_hours, self.deadline_hours, self.changeover_hours)


@dataclass(frozen=True, slots=True)
class PolicyResult:
    """Normalized cost statistics of one policy over all windows of all traces of a cell."""

    mean: float
    p75: float
    misses: int
    n: int

    def to_json(self) -> dict[str, float | int]:
        """The `{"mean", "p75", "misses", "n"}` object of the JSON output."""
        return {"mean": self.mean, "p75": self.p75, "misses": self.misses, "n": self.n}


@dataclass(frozen=True, slots=True)
class CellResult:
    """Every policy's result for one cell."""

    cell: Cell
    windows_per_trace: int
    results: dict[str, PolicyResult]

    def gap_closed(self, policy: str = "respot") -> float:
        """(UP - policy) / (UP - optimum) on mean normalized cost (nan when UP is optimal)."""
        up = self.results["uniform-progress"].mean
        best = self.results[OMNISCIENT].mean
        if up - best <= 0:
            return float("nan")
        return (up - self.results[policy].mean) / (up - best)

    def to_json(self) -> dict[str, object]:
        """One line of `respot bench policy --json`."""
        return {
            "work_hours": _plain(self.cell.work_hours),
            "deadline_hours": _plain(self.cell.deadline_hours),
            "changeover_hours": _plain(self.cell.changeover_hours),
            "windows_per_trace": self.windows_per_trace,
            "results": {name: r.to_json() for name, r in self.results.items()},
        }


def _plain(value: float) -> float | int:
    """48.0 -> 48 so that the JSON reads like the command line."""
    return int(value) if float(value).is_integer() else value


def check_cells(traces: Sequence[Trace], cells: Sequence[Cell], windows: int) -> None:
    """Fail early, naming the problem, on jobs or traces the benchmark cannot run."""
    if windows < 1:
        raise JobSpecError(f"windows must be >= 1, got {windows}")
    for cell in cells:
        job = cell.job
        for trace in traces:
            if not job.feasible(trace.gap_seconds):
                raise JobSpecError(
                    f"C={cell.work_hours} h, D={cell.deadline_hours} h, d={cell.changeover_hours}"
                    f" h: on-demand alone cannot finish in time with G={trace.gap_seconds} s"
                )
            trace.window_starts(job.window_ticks(trace.gap_seconds), windows)


def _evaluate(trace: Trace, cell: Cell, windows: int, policy: str) -> tuple[list[float], int]:
    """Normalized costs of `policy` on the windows of one trace, and its missed deadlines."""
    job = cell.job
    gap = trace.gap_seconds
    size = job.window_ticks(gap)
    spans = [trace.window(start, size) for start in trace.window_starts(size, windows)]
    if policy == OMNISCIENT:
        costs = optimal_normalized_costs(spans, job, gap)
        return [float(c) for c in costs], int(np.count_nonzero(~np.isfinite(costs)))
    outcomes = [simulate(make_policy(policy), span, job, gap) for span in spans]
    return [o.normalized_cost for o in outcomes], sum(o.missed for o in outcomes)


_WORKER_TRACES: Sequence[Trace] = ()


def _init_worker(traces: Sequence[Trace]) -> None:
    global _WORKER_TRACES  # noqa: PLW0603 - one copy of the traces per worker process
    _WORKER_TRACES = traces


def _task(trace_index: int, cell: Cell, windows: int, policy: str) -> tuple[list[float], int]:
    return _evaluate(_WORKER_TRACES[trace_index], cell, windows, policy)


Task = tuple[int, int, str]  # (cell index, trace index, policy)


def _run_tasks(
    traces: Sequence[Trace],
    cells: Sequence[Cell],
    windows: int,
    tasks: Sequence[Task],
    workers: int | None,
) -> Iterator[tuple[Task, tuple[list[float], int]]]:
    """Yield each task with its result as soon as it is done (in this process if workers=1)."""
    workers = workers or os.cpu_count() or 1
    if workers == 1:
        for task in tasks:
            ci, ti, policy = task
            yield task, _evaluate(traces[ti], cells[ci], windows, policy)
        return
    with ProcessPoolExecutor(workers, initializer=_init_worker, initargs=(traces,)) as pool:
        futures = {
            pool.submit(_task, ti, cells[ci], windows, policy): (ci, ti, policy)
            for ci, ti, policy in tasks
        }
        for future in as_completed(futures):
            yield futures[future], future.result()


def run_bench(
    traces: Sequence[Trace],
    cells: Sequence[Cell],
    windows: int,
    *,
    policies: Sequence[str] = BENCH_POLICIES,
    workers: int | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> list[CellResult]:
    """Run every policy on every cell; `on_progress(n)` reports n more windows evaluated."""
    check_cells(traces, cells, windows)
    tasks = [
        (ci, ti, policy)
        for policy in sorted(policies, key=lambda name: name != OMNISCIENT)  # optimum first
        for ci in range(len(cells))
        for ti in range(len(traces))
    ]
    done: dict[Task, tuple[list[float], int]] = {}
    for task, outcome in _run_tasks(traces, cells, windows, tasks, workers):
        done[task] = outcome
        if on_progress:
            on_progress(len(outcome[0]))
    results = []
    for ci, cell in enumerate(cells):
        per_policy = {}
        for policy in policies:
            # In trace order, so that the sums (and the digits) do not depend on scheduling.
            outcomes = [done[(ci, ti, policy)] for ti in range(len(traces))]
            normalized = np.concatenate([values for values, _ in outcomes])
            per_policy[policy] = PolicyResult(
                mean=float(normalized.mean()),
                p75=float(np.percentile(normalized, 75)),  # numpy's default: linear
                misses=sum(missed for _, missed in outcomes),
                n=len(normalized),
            )
        results.append(CellResult(cell=cell, windows_per_trace=windows, results=per_policy))
    return results
