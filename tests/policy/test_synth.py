"""Synthetic markets (`respot.policy.synth`): deterministic, in the traces' format, as drawn."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from respot.policy.pools import load_pool_set
from respot.policy.synth import synth_market, write_market


def test_the_same_seed_writes_the_same_files_and_the_benchmark_reads_them(tmp_path: Path) -> None:
    first = write_market(tmp_path / "a", synth_market(7, pools=9, days=2))
    again = write_market(tmp_path / "b", synth_market(7, pools=9, days=2))
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in again]
    other = synth_market(8, pools=9, days=2)
    assert other.availability != synth_market(7, pools=9, days=2).availability
    loaded = load_pool_set([tmp_path / "a"])
    assert len(loaded.pools) == 9 and loaded.gap_seconds == 300
    assert loaded == synth_market(7, pools=9, days=2).pool_set()


@pytest.mark.parametrize("pools", [1, 3, 18, 30])
def test_pools_are_distinct_spread_over_regions_and_have_both_spot_and_outages(pools: int) -> None:
    market = synth_market(pools, pools=pools, days=6)
    assert len(set(market.names)) == pools
    regions = {p.region for p in market.pool_set().pools}
    assert 1 <= len(regions) <= 5 and (pools == 1 or len(regions) <= pools)
    union = [any(column) for column in zip(*market.availability, strict=True)]
    assert any(union) and any(any(1 - v for v in row) for row in market.availability)


def test_pools_of_a_region_fail_together_more_often_than_pools_of_different_regions() -> None:
    # the region shocks: with correlation 1 every shock takes the region's pools down at once
    market = synth_market(3, pools=12, regions=2, days=30, correlation=(1.0, 1.0))
    pools = market.pool_set()

    def both_down(a: int, b: int) -> float:
        rows = pools.availability
        return sum(1 for x, y in zip(rows[a], rows[b], strict=True) if not x and not y) / len(
            rows[a]
        )

    same = [
        both_down(a, b)
        for a in range(12)
        for b in range(a + 1, 12)
        if pools.pools[a].region == pools.pools[b].region
    ]
    apart = [
        both_down(a, b)
        for a in range(12)
        for b in range(a + 1, 12)
        if pools.pools[a].region != pools.pools[b].region
    ]
    assert sum(same) / len(same) > sum(apart) / len(apart)


def test_the_record_of_what_drew_a_market_is_the_market() -> None:
    # each pool's own segments tile the market, alternate, and explain every tick of spot:
    # a pool is up only inside one of its up-runs (a region shock can take it down there)
    market = synth_market(5, pools=9, days=3)
    ticks = len(market.availability[0])
    assert len(market.segments) == len(market.shock_rates) == 9
    for row, segments, rate in zip(
        market.availability, market.segments, market.shock_rates, strict=True
    ):
        assert 0 < rate < 1
        assert segments[0].start == 0 and segments[-1].start + segments[-1].ticks >= ticks
        for before, after in itertools.pairwise(segments):
            assert after.start == before.start + before.ticks and after.up != before.up
        own = [0] * ticks
        for segment in segments:
            assert segment.ticks >= 1 and segment.median_ticks > 0 and segment.sigma > 0
            for i in range(segment.start, min(ticks, segment.start + segment.ticks)):
                own[i] = int(segment.up)
        assert all(seen <= drawn for seen, drawn in zip(row, own, strict=True))


def test_bad_sizes_are_refused_naming_the_argument() -> None:
    with pytest.raises(ValueError, match="pools must be 1 to 30"):
        synth_market(1, pools=31)
    with pytest.raises(ValueError, match="regions must be"):
        synth_market(1, pools=3, regions=4)
