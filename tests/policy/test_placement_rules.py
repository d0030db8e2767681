"""The multi-zone rules (bench/specs/multi-zone.md): regions, transfer fee, home, baselines."""

from __future__ import annotations

import pytest

from respot.policy import (
    NOTHING,
    ON_DEMAND,
    Choice,
    Job,
    Placement,
    Pool,
    PoolSet,
    TraceError,
    load_pool_set,
    region_of,
    simulate_pools,
)
from respot.policy.model import Trace
from respot.policy.placement_bench import make_pools_policy

FEE = 10 * 0.02  # S * q: a 10 GB checkpoint at $0.02/GB


class Scripted:
    name = "scripted"

    def __init__(self, placements):
        self.placements = list(placements)
        self.seen = []

    def place(self, obs):
        self.seen.append(obs)
        return self.placements[obs.tick] if obs.tick < len(self.placements) else NOTHING


def spot(k):
    return Placement.spot(k)


@pytest.mark.parametrize(
    ("name", "region"),
    [
        ("us-east-1c", "us-east-1"),
        ("us-central1-a", "us-central1"),
        ("us-west-2a_v100_1", "us-west-2"),
        ("europe-west4-b_a100_8", "europe-west4"),
    ],
)
def test_region_is_the_zone_without_its_last_letter(name, region):
    assert region_of(name) == region


def test_a_pool_name_that_is_no_zone_is_a_clear_error():
    with pytest.raises(TraceError, match="zone name"):
        region_of("gpu1")


def test_moving_the_checkpoint_to_another_region_is_billed_once_and_home_follows(tick_price):
    pools = [Pool.named("us-east-1a"), Pool.named("us-east-1b"), Pool.named("us-west-2a")]
    window = [[1] * 7, [1] * 7, [1] * 7]
    job = Job(work_seconds=6 * 600, deadline_seconds=6 * 600, changeover_seconds=0)
    # GIVEN a script: pool 0, pool 1 (same region), pool 2 (other region), on-demand, pool 2
    script = Scripted([spot(0), spot(1), spot(2), ON_DEMAND, spot(2), spot(0)])
    out = simulate_pools(script, pools, window, job, 600)
    homes = [obs.home for obs in script.seen]
    # THEN home moves only when a spot in another region is taken; on-demand runs in home
    assert homes == ["us-east-1", "us-east-1", "us-east-1", "us-west-2", "us-west-2", "us-west-2"]
    assert out.transfers == 2  # to us-west-2, then back to us-east-1 for the last tick
    spot_ticks, od_ticks = 5, 1
    expected = spot_ticks * tick_price(Choice.SPOT, 600) + od_ticks * tick_price(
        Choice.ON_DEMAND, 600
    )
    assert out.cost == pytest.approx(expected + 2 * FEE)
    assert not out.missed and out.changeovers == 6


def test_spot_of_a_pool_without_capacity_counts_as_nothing_and_preemption_is_per_pool():
    pools = [Pool.named("us-east-1a"), Pool.named("us-east-1b")]
    # pool 0 is lost after tick 1; pool 1 has no spot at tick 0
    window = [[1, 1, 0, 0, 0], [0, 1, 1, 1, 1]]
    job = Job(work_seconds=4 * 60, deadline_seconds=4 * 60, changeover_seconds=0)
    script = Scripted([spot(1), spot(0), spot(0), spot(1)])
    out = simulate_pools(script, pools, window, job, 60)
    assert out.placements == (NOTHING, spot(0), NOTHING, spot(1))
    # tick 1 held pool 0, preempted at the boundary: the observation of tick 2 says so
    assert script.seen[2].held == NOTHING and script.seen[2].remaining_changeover_seconds == 0
    assert out.missed  # only 2 of 4 ticks made progress


def test_a_changeover_is_paid_on_every_new_instance_even_in_the_same_region():
    pools = [Pool.named("us-east-1a"), Pool.named("us-east-1b")]
    window = [[1] * 5, [1] * 5]
    job = Job(work_seconds=200, deadline_seconds=400, changeover_seconds=30)
    out = simulate_pools(Scripted([spot(0), spot(1), spot(1)]), pools, window, job, 100)
    # 70 + 70 + 100 = 240 >= 200 after three ticks: two instances, two changeovers
    assert out.changeovers == 2 and out.finish_seconds == 300 and out.transfers == 0


def test_a_set_is_cut_to_its_shortest_file_ordered_by_name_and_needs_one_tick_length(tmp_path):
    import json

    def write(name, gap, data):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"metadata": {"gap_seconds": gap}, "data": data}))
        return path

    b = write("us-west-2b_x_1", 60, [1, 0, 1, 1])
    a = write("us-west-2a_x_1", 60, [0, 1, 1])
    pool_set = load_pool_set([b, a])
    assert [p.name for p in pool_set.pools] == ["us-west-2a_x_1", "us-west-2b_x_1"]
    assert pool_set.availability == ((0, 1, 1), (1, 0, 1)) and len(pool_set) == 3
    assert load_pool_set([tmp_path]) == pool_set
    write("us-west-2c_x_1", 30, [1, 1, 1])
    with pytest.raises(TraceError, match="share gap_seconds"):
        load_pool_set([tmp_path])
    with pytest.raises(TraceError, match="no such file"):
        load_pool_set([tmp_path / "missing.json"])
    with pytest.raises(TraceError, match="shorter than a window"):
        pool_set.window_starts(4, 1)


def pool_set(rows, names=None):
    names = names or [f"us-east-1{chr(97 + k)}" for k in range(len(rows))]
    traces = [Trace(n, 600, tuple(r)) for n, r in zip(names, rows, strict=True)]
    return PoolSet.from_traces(traces)


def test_up_round_robin_moves_to_the_next_pool_with_spot_after_its_own():
    # pools 0..2; pool 0 is lost after tick 0; pools 1 and 2 both have spot afterwards
    ps = pool_set([[1, 0, 0, 0, 0, 0, 0], [0, 1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1]])
    job = Job(work_seconds=6 * 600, deadline_seconds=6 * 600, changeover_seconds=0)
    out = simulate_pools(make_pools_policy("up-round-robin"), ps.pools, ps.window(0, 7), job, 600)
    # 0 while it lasts; then the next after 0 with spot (1); when 1 is lost, the next after 1 (2)
    assert [p.pool for p in out.placements] == [0, 1, 1, 2, 2, 2]


def test_greedy_any_takes_the_first_pool_with_spot_and_up_home_only_pool_zero():
    ps = pool_set([[1, 0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1, 1], [1] * 8])
    job = Job(work_seconds=4 * 600, deadline_seconds=7 * 600, changeover_seconds=60)
    greedy = simulate_pools(make_pools_policy("greedy-any"), ps.pools, ps.window(0, 8), job, 600)
    assert [p.pool for p in greedy.placements[:5]] == [0, 1, 1, 1, 1]
    home = simulate_pools(make_pools_policy("up-home"), ps.pools, ps.window(0, 8), job, 600)
    assert {p.pool for p in home.placements if p.choice is Choice.SPOT} == {0}
    assert home.transfers == greedy.transfers == 0
