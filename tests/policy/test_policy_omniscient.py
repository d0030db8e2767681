"""The omniscient optimum: equal to brute force over every choice sequence on tiny traces."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from respot.policy import Choice, Job, make_policy, simulate
from respot.policy.omniscient import optimal_costs, optimal_normalized_costs


def brute_force(window, job, gap, scripted):
    """Cheapest cost over all 3^T choice sequences that meet the deadline."""
    best = math.inf
    ticks = job.ticks(gap)
    for seq in itertools.product(list(Choice), repeat=ticks):
        out = simulate(scripted(seq), window, job, gap)
        if not out.missed:
            best = min(best, out.cost)
    return best


def random_case(rng):
    gap = rng.randint(2, 7)
    ticks = rng.randint(1, 6)
    deadline = ticks * gap + rng.randint(0, gap - 1)  # G need not divide D
    changeover = rng.randint(0, 3 * gap)  # d > G too
    work = rng.randint(1, deadline)
    window = [rng.randint(0, 1) for _ in range(ticks + 1)]
    return window, Job(work, deadline, changeover), gap


@pytest.mark.parametrize("seed", range(4))
def test_optimum_equals_brute_force(seed, scripted):
    rng = random.Random(seed)
    cases = [random_case(rng) for _ in range(40)]
    for window, job, gap in cases:
        expected = brute_force(window, job, gap, scripted)
        got = optimal_costs([window], job, gap)[0]
        assert got == pytest.approx(expected) or (got == expected == math.inf), (window, job)


def test_batched_windows_match_single_windows():
    rng = random.Random(7)
    job = Job(work_seconds=40, deadline_seconds=75, changeover_seconds=13)
    windows = [[rng.randint(0, 1) for _ in range(job.ticks(6) + 1)] for _ in range(25)]
    together = optimal_costs(windows, job, 6)
    alone = [optimal_costs([w], job, 6)[0] for w in windows]
    assert list(together) == alone


def test_optimum_is_a_lower_bound_for_every_policy():
    rng = random.Random(11)
    job = Job.from_hours(work=4, deadline=6, changeover=0.2)
    windows = [
        [1 if rng.random() < 0.6 else 0 for _ in range(job.ticks(600) + 1)] for _ in range(20)
    ]
    best = optimal_normalized_costs(windows, job, 600)
    for name in ["on-demand", "greedy", "uniform-progress", "respot"]:
        for window, bound in zip(windows, best, strict=True):
            assert simulate(make_policy(name), window, job, 600).normalized_cost >= bound - 1e-12


def test_optimum_uses_free_spot_and_reports_infeasible_jobs():
    # All spot, no changeover: the optimum is C / G spot ticks.
    job = Job(work_seconds=60, deadline_seconds=100, changeover_seconds=0)
    assert optimal_costs([[1] * 11], job, 10)[0] == pytest.approx(6 * 0.9731 * 10 / 3600)
    # Work that cannot fit before the deadline: no plan, infinite cost.
    hopeless = Job(work_seconds=95, deadline_seconds=100, changeover_seconds=10)
    assert optimal_costs([[1] * 11], hopeless, 10)[0] == math.inf
