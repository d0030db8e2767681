"""Placement over generated markets: the live policy never misses, never loses to round-robin.

Markets come from `respot.policy.synth` (1-18 pools over 1-5 regions, correlated outages
within a region, regime changes), drawn by hypothesis (derandomized: the same examples on
every machine), small enough to run in seconds: a 24-h job due in 26 or 34 h at G = 600 s,
four windows of a 4-day market. (The policy before issue 28 fails it: 15 of 144 such
markets x cells, 9-16 pools, up to 0.17 above round-robin.) The policy is `respot` as
`respot bench placement` reports it: the multi-pool policy fed only the job's own
sightings (`LiveView`), which is what the control plane runs.

Noise, defined from the job and not from a trace: both policies run on the same windows,
so the comparison is paired; a window's costs can differ by one placement decision made a
tick apart or one restart more, which costs at most a changeover plus a tick held at the
on-demand price, (d + G) p_od, i.e. (d + G) / C of the on-demand-only cost C p_od that
normalizes it. The live policy may be above up-round-robin by at most that, on the mean
over the windows of a market.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from respot.policy.bench import Cell
from respot.policy.placement_bench import RESPOT, ROUND_ROBIN, make_pools_policy
from respot.policy.pools import simulate_pools
from respot.policy.synth import synth_market

GAP = 600
WINDOWS = 4
MARKETS = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)


def _costs(policy: str, market_seed: int, pools: int, cell: Cell) -> tuple[list[float], int]:
    market = synth_market(market_seed, pools=pools, gap_seconds=GAP, days=4.0).pool_set()
    job = cell.job
    starts = market.window_starts(job.window_ticks(GAP), WINDOWS)
    size = job.window_ticks(GAP)
    outcomes = [
        simulate_pools(make_pools_policy(policy), market.pools, market.window(s, size), job, GAP)
        for s in starts
    ]
    return [o.normalized_cost for o in outcomes], sum(o.missed for o in outcomes)


def _check(seed: int, pools: int, deadline: float, changeover: float) -> None:
    cell = Cell(24.0, deadline, changeover)
    respot, missed = _costs(RESPOT, seed, pools, cell)
    rr, _ = _costs(ROUND_ROBIN, seed, pools, cell)
    assert missed == 0
    noise = (changeover * 3600 + GAP) / (cell.work_hours * 3600)
    above = sum(respot) / len(respot) - sum(rr) / len(rr)
    assert above <= noise, (
        f"market seed {seed}, {pools} pools, D={deadline} h, d={changeover} h: respot "
        f"{[round(c, 4) for c in respot]} against up-round-robin {[round(c, 4) for c in rr]}"
    )


@MARKETS
@given(
    seed=st.integers(0, 10_000),
    pools=st.integers(2, 18),
    deadline=st.sampled_from([26.0, 34.0]),
    changeover=st.sampled_from([0.05, 0.2]),
)
def test_the_live_policy_never_misses_and_is_never_above_round_robin_by_more_than_noise(
    seed: int, pools: int, deadline: float, changeover: float
) -> None:
    _check(seed, pools, deadline, changeover)


@pytest.mark.xfail(
    strict=True,
    reason=(
        "with one pool respot is the single-zone policy (issue 28 keeps it unchanged), and "
        "on some one-pool markets it is above up-round-robin by more than one decision "
        "(e.g. market seed 1791, D = 34 h, d = 0.05 h: mean 0.711 against 0.696, noise "
        "0.009). Not fixed by issue 28 (the single-zone rules were left alone)."
    ),
)
@MARKETS
@given(
    seed=st.integers(0, 10_000),
    deadline=st.sampled_from([26.0, 34.0]),
    changeover=st.sampled_from([0.05, 0.2]),
)
def test_with_one_pool_the_single_zone_policy_holds_the_same_property(
    seed: int, deadline: float, changeover: float
) -> None:
    _check(seed, 1, deadline, changeover)


# Markets outside the 30 drawn above where the live policy is above round-robin by more
# than noise: a throwaway sweep of 1,000 markets (seeds 10,001-100,000; bench/placement/
# issue28/README.md, "A wider sweep") found these 3 (6 before 2026-11-27). In each, one
# window of four holds on-demand to the end: a return to a run that ends the next tick
# costs the two changeovers of slack a later return needs, and live returns only with
# two changeovers of slack (seed 41973, window 0: 0.696 against round-robin's 0.577).
@pytest.mark.xfail(strict=True, reason="known misses of the property: see the comment above")
@pytest.mark.parametrize(
    ("seed", "pools", "deadline", "changeover"),
    [(49945, 4, 26.0, 0.05), (41973, 11, 26.0, 0.2), (76172, 5, 26.0, 0.2)],
)
def test_the_markets_where_the_live_policy_is_known_to_lose_to_round_robin(
    seed: int, pools: int, deadline: float, changeover: float
) -> None:
    _check(seed, pools, deadline, changeover)
