"""The learned pool model (`respot.policy.poolmodel`) and the plan over it (`planner`).

Histories are generated from known laws; the estimates must converge to the generator's
truth. Tolerances are statistical (thousands of runs), fixed seeds: the same on any machine.
"""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import given, settings

from respot.policy import MultiPoolPolicy, Pool, RespotPolicy, simulate, simulate_pools
from respot.policy.history import RunStatistics
from respot.policy.model import HistoryView
from respot.policy.planner import slack_value
from respot.policy.poolmodel import CachedCoMovement, CoMovement, PoolModel, RunLaw
from respot.policy.pools import Placement, PoolsObservation
from respot.policy.respot_policy import ON_DEMAND_PRICE_PER_SECOND, SPOT_PRICE_PER_SECOND
from tests.policy.test_multipool_policy import feasible_jobs, pool_cases, runs_window


def geometric_history(rng: random.Random, ticks: int, end_up: float, end_down: float) -> list[int]:
    """0/1 ticks whose up-runs end with probability end_up a tick, outages end_down."""
    value = 1
    out = []
    for _ in range(ticks):
        out.append(value)
        if rng.random() < (end_up if value else end_down):
            value = 1 - value
    return out


def test_with_no_runs_the_law_is_the_lindy_prior():
    law = RunLaw([RunStatistics()], 1, 1.0)
    for age in (0, 1, 5, 40):
        assert abs(law.survival(1, age) - 1 / (age + 1)) < 1e-12
        assert abs(law.hazard(1, age) - 1 / (age + 2)) < 1e-12


def test_run_lengths_by_age_converge_to_the_generators_law():
    rng = random.Random(7)
    history = geometric_history(rng, 60_000, end_up=0.1, end_down=0.3)
    stats = RunStatistics(history)
    up, down = RunLaw([stats], 1, 1.0), RunLaw([stats], 0, 1.0)
    # a run ends after each of its ticks with probability p: P(L > a) = (1 - p)^a
    for age in range(0, 15):
        assert abs(up.survival(1, age) - 0.9**age) < 0.03, age
        assert abs(down.survival(0, age) - 0.7**age) < 0.03, age
    assert abs(up.hazard(1, 5) - 0.1) < 0.02
    assert abs(up.mean(10_000) - 10) < 0.6  # E[L] = 1 / p
    assert abs(down.expected_residual(0, 3, 10_000) - 1 / 0.3) < 0.3  # memoryless


def test_censored_runs_correct_the_bias_of_completed_runs_alone():
    # GIVEN many short windows (60 ticks) of a market whose up-runs last 40 ticks on average:
    # the long runs are the ones cut by the window's end, so completed runs alone are short
    rng = random.Random(11)
    windows = [RunStatistics(geometric_history(rng, 60, 1 / 40, 0.5)) for _ in range(3000)]
    law = RunLaw(windows, 1, 1.0)
    naive = sum(s._longer_than(1, 30) for s in windows) / sum(s.runs[1] for s in windows)
    truth = (1 - 1 / 40) ** 30
    # THEN the Kaplan-Meier estimate with censoring is close to the truth; the naive is not
    assert abs(law.survival(1, 30) - truth) < 0.05
    assert abs(naive - truth) > 0.15


def test_a_run_still_in_progress_is_evidence():
    # a pool seen up for 200 ticks without a completed run: RunStatistics ignores the run
    # (the prior alone), the censored estimate counts it
    stats = RunStatistics([1] * 200)
    law = RunLaw([stats], 1, 1.0)
    assert stats.survival(1, 100, 1.0) == 1 / 101
    assert law.survival(1, 100) > 0.3


def test_survival_table_matches_the_product_of_hazards():
    rng = random.Random(3)
    for _ in range(20):
        stats = [
            RunStatistics(rng.random() < 0.7 for _ in range(rng.randint(0, 300)))
            for _ in range(rng.randint(1, 4))
        ]
        for value in (0, 1):
            law = RunLaw(stats, value, 1.0)
            product = [1.0]
            for age in range(400):
                product.append(product[-1] * (1 - law.hazard(value, age)))
            fresh = RunLaw(stats, value, 1.0)
            for age in (5, 0, 399, 37, 400):
                assert abs(fresh.survival(value, age) - product[age]) < 1e-12


def comoving_market(rng: random.Random, ticks: int, rho: float) -> list[list[int]]:
    """Pools A, B in one region, C in another. A: geometric runs. At each tick A goes down,
    B goes down with it with probability rho and stays down as long as A; otherwise B is up.
    C: independent geometric runs."""
    a = geometric_history(rng, ticks, 0.05, 0.2)
    c = geometric_history(rng, ticks, 0.05, 0.2)
    b = []
    follows = False
    for t, value in enumerate(a):
        if value == 0 and (t == 0 or a[t - 1] == 1):
            follows = rng.random() < rho
        b.append(0 if value == 0 and follows else 1)
    return [a, b, c]


def movement_of(histories: list[list[int]]) -> CoMovement:
    movement = CoMovement(len(histories))
    movement.extend(list(zip(*histories, strict=True)))
    return movement


def test_within_region_co_movement_converges_to_the_generators():
    for rho in (0.0, 0.4, 1.0):
        rng = random.Random(int(rho * 10) + 1)
        histories = comoving_market(rng, 40_000, rho)
        movement = movement_of(histories)
        # P(B down at the tick A goes down) = rho; C is independent of A: its down fraction
        assert abs(movement.down_given(1, 0) - rho) < 0.04, rho
        assert abs(movement.down_given(2, 0) - movement.down_fraction(2)) < 0.04
        pools = [Pool.named(n) for n in ("us-east-1a_g", "us-east-1b_g", "eu-west-1a_g")]
        model = PoolModel(pools, [RunStatistics(h) for h in histories], movement, 1.0)
        assert model.siblings(0) == [1]
        if rho == 1.0:
            assert model.correlation([0, 1]) > 0.95
        if rho == 0.0:
            assert model.correlation([0, 2]) < 0.05


def test_all_down_is_the_product_when_independent_and_the_minimum_when_as_one():
    rng = random.Random(5)
    for rho, combine in ((0.0, "product"), (1.0, "min")):
        histories = comoving_market(rng, 40_000, rho)
        # end on a tick where A and B are both down (and C, for the independent pair)
        movement = movement_of(histories)
        stats = [RunStatistics(h) for h in histories]
        pools = [Pool.named(n) for n in ("us-east-1a_g", "us-east-1b_g", "eu-west-1a_g")]
        model = PoolModel(pools, stats, movement, 1.0)
        group = [0, 1] if rho == 1.0 else [0, 2]
        each = []
        for k in group:
            law = model.down[k]
            age = stats[k].current_age(0)
            each.append(law.survival(0, age + 4) / law.survival(0, age))
        expected = each[0] * each[1] if combine == "product" else min(each)
        assert abs(model.all_down(group, 4) - expected) < 0.05 * max(each)


def test_the_cached_co_movement_extends_as_the_fresh_one_counts():
    rng = random.Random(9)
    rows = comoving_market(rng, 500, 0.5)
    sources = tuple(tuple(r) for r in rows)
    cached = CachedCoMovement()
    for tick in range(0, 501, 37):
        got = cached.update([HistoryView(s, tick) for s in sources])
        fresh = movement_of([list(s[:tick]) for s in sources])
        assert got._pair == fresh._pair and got.events == fresh.events
        assert got.stranded() == fresh.stranded()


def plan(slack: float, stranded: float, outage_end: float = 0.2) -> float:
    rng = random.Random(2)
    up = RunStatistics(geometric_history(rng, 20_000, 0.05, outage_end))
    return slack_value(
        slack_ticks=slack,
        work_ticks=500,
        changeover_ticks=2.4,
        spot_per_tick=SPOT_PRICE_PER_SECOND * 300,
        on_demand_per_tick=ON_DEMAND_PRICE_PER_SECOND * 300,
        run=RunLaw([up], 1, 1.0),
        outage=RunLaw([up], 0, 1.0),
        stranded=stranded,
        gap_seconds=300,
    )


def test_the_plan_prices_scarce_slack_above_ample_slack():
    # 25 cycles of 20 ticks, each restart 2.4 ticks of slack: 60 ticks of slack binds
    assert plan(10, 0.5) > plan(400, 0.5)
    # outages that strand the job make slack worth more
    assert plan(80, 0.9) > plan(80, 0.0)
    # with no outages, slack beyond the restarts' needs is worth nothing
    assert plan(400, 0.0) == 0.0


@settings(max_examples=60, deadline=None)
@given(feasible_jobs(), runs_window(400))
def test_with_one_pool_the_planned_policy_is_the_single_zone_policy(case, window):
    job, gap = case
    window = (window * (job.ticks(gap) // len(window) + 2))[: job.ticks(gap) + 1]
    single = simulate(RespotPolicy(), window, job, gap)
    pool = Pool.named("us-west-2a_v100_1")
    for mode in ("replace", "lower", "raise"):
        pooled = simulate_pools(MultiPoolPolicy(plan=mode), [pool], [window], job, gap)
        assert tuple(p.choice for p in pooled.placements) == single.choices
        assert pooled.cost == single.cost


@settings(max_examples=100, deadline=None)
@given(pool_cases())
def test_the_planned_policy_misses_nothing_and_depends_on_the_observation_alone(case):
    job, gap, pools, window = case
    recorded: list[Placement] = []
    fresh: list[Placement] = []
    cached = MultiPoolPolicy(plan="replace")

    class Recording:
        name = "recording"

        def place(self, obs: PoolsObservation) -> Placement:
            recorded.append(cached.place(obs))
            return recorded[-1]

    class FreshEachTick:
        name = "fresh"

        def place(self, obs: PoolsObservation) -> Placement:
            plain = replace(obs, histories=tuple(tuple(h) for h in obs.histories))
            fresh.append(MultiPoolPolicy(plan="replace").place(plain))
            return fresh[-1]

    out = simulate_pools(Recording(), pools, window, job, gap)
    simulate_pools(FreshEachTick(), pools, window, job, gap)
    assert not out.missed
    assert recorded == fresh


def test_an_unknown_plan_mode_is_refused_with_the_modes_named():
    try:
        MultiPoolPolicy(plan="dp")
    except ValueError as exc:
        assert "replace" in str(exc) and "'dp'" in str(exc)
    else:
        raise AssertionError("plan='dp' was accepted")
