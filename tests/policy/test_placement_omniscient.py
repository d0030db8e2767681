"""The multi-zone optimum: brute force on tiny cases, the single-zone optimum with one pool."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from respot.policy import NOTHING, ON_DEMAND, Job, Placement, Pool, simulate_pools
from respot.policy.omniscient import optimal_costs
from respot.policy.omniscient_pools import optimal_pool_costs
from respot.policy.placement_bench import make_pools_policy

NAMES = [
    ["us-east-1a"],
    ["us-east-1a", "us-east-1b"],
    ["us-east-1a", "us-west-2b"],
    ["us-west-2a", "us-east-1a", "us-west-2c"],
]


class Scripted:
    name = "scripted"

    def __init__(self, placements):
        self.placements = placements

    def place(self, obs):
        return self.placements[obs.tick]


def brute_force(pools, window, job, gap, price_per_gb):
    """Cheapest cost over every sequence of placements that meets the deadline."""
    options = [NOTHING, ON_DEMAND, *(Placement.spot(k) for k in range(len(pools)))]
    best = math.inf
    for seq in itertools.product(options, repeat=job.ticks(gap)):
        out = simulate_pools(
            Scripted(seq), pools, window, job, gap, transfer_price_per_gb=price_per_gb
        )
        if not out.missed:
            best = min(best, out.cost)
    return best


def random_case(rng):
    gap = rng.randint(2, 7)
    names = rng.choice(NAMES)
    ticks = rng.randint(1, 4 if len(names) == 3 else 5)
    deadline = ticks * gap + rng.randint(0, gap - 1)  # G need not divide D
    changeover = rng.randint(0, 3 * gap)  # d > G too
    work = rng.randint(1, deadline)
    pools = [Pool.named(n) for n in names]
    window = [[rng.randint(0, 1) for _ in range(ticks + 1)] for _ in pools]
    return pools, window, Job(work, deadline, changeover), gap


@pytest.mark.parametrize("seed", range(3))
def test_optimum_equals_brute_force(seed):
    rng = random.Random(seed)
    for _ in range(40):
        pools, window, job, gap = random_case(rng)
        # a fee on the scale of a few ticks of these tiny jobs, so that it changes plans
        price = rng.choice([0.0, 0.0005, 0.003])
        expected = brute_force(pools, window, job, gap, price)
        got = optimal_pool_costs(pools, [window], job, gap, transfer_price_per_gb=price)[0]
        assert got == pytest.approx(expected) or got == expected == math.inf, (
            pools,
            window,
            job,
            gap,
        )


def test_the_fee_changes_the_optimal_plan():
    # pool 0 (home) has spot at ticks 0 and 3, pool 1 (another region) at ticks 1 to 3
    pools = [Pool.named("us-east-1a"), Pool.named("us-west-2a")]
    window = [[1, 0, 0, 1, 1], [0, 1, 1, 1, 1]]
    job = Job(work_seconds=3 * 60, deadline_seconds=4 * 60, changeover_seconds=0)
    free = optimal_pool_costs(pools, [window], job, 60, transfer_price_per_gb=0)[0]
    dear = optimal_pool_costs(pools, [window], job, 60, transfer_price_per_gb=1.0)[0]
    spot_tick, od_tick = 0.9731 * 60 / 3600, 3.06 * 60 / 3600
    assert free == pytest.approx(3 * spot_tick)  # no fee: spot at home, then elsewhere
    assert dear == pytest.approx(2 * spot_tick + od_tick)  # a $10 fee: stay home, one on-demand


@pytest.mark.parametrize("seed", range(3))
def test_one_pool_is_the_single_zone_optimum(seed):
    rng = random.Random(100 + seed)
    gap = rng.choice([60, 195, 600])
    job = Job.from_hours(work=rng.choice([2, 3]), deadline=4, changeover=rng.choice([0.05, 0.2]))
    windows = [[rng.randint(0, 1) for _ in range(job.ticks(gap) + 1)] for _ in range(6)]
    single = optimal_costs(windows, job, gap)
    pooled = optimal_pool_costs([Pool.named("us-west-2a")], [[w] for w in windows], job, gap)
    assert list(pooled) == pytest.approx(list(single))


def test_no_policy_beats_the_optimum_on_random_sets():
    rng = random.Random(11)
    pools = [Pool.named(n) for n in ["us-east-1a", "us-east-1b", "us-west-2a"]]
    job = Job.from_hours(work=3, deadline=5, changeover=0.2)
    gap = 600
    for _ in range(10):
        window = []
        for _pool in pools:
            row: list[int] = []
            while len(row) < job.ticks(gap) + 1:
                row += [rng.randint(0, 1)] * rng.randint(1, 5)
            window.append(row[: job.ticks(gap) + 1])
        best = optimal_pool_costs(pools, [window], job, gap)[0]
        for name in ["up-home", "up-round-robin", "greedy-any", "respot"]:
            out = simulate_pools(make_pools_policy(name), pools, window, job, gap)
            assert not out.missed
            assert out.cost >= best - 1e-9, name
