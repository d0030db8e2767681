"""`respot run --check`'s cost estimate (issue 26): the spot and on-demand bounds of a job by
its deadline, from the deadline policy's rules and the prices handed in; nothing is spent."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from respot.core.cost_estimate import PriceQuote, estimate
from respot.spec.training import TrainingEnvVar

NOW = datetime.now(UTC).replace(microsecond=0)
D = timedelta(minutes=6)  # the changeover
QUOTES = [
    PriceQuote("g5.xlarge", spot_low=0.40, spot_high=0.50, on_demand=1.006),
    PriceQuote("g4dn.xlarge", spot_low=0.20, spot_high=0.30, on_demand=0.526),
]


def _spec(**fields: Any) -> TrainingEnvVar:
    return TrainingEnvVar(name="demo", entry_point="pkg.mod:Session", **fields)


def test_bounds_by_the_deadline_follow_the_policy() -> None:
    # GIVEN 2.9 h of work (3 h billed with the changeover) and 10 h to the deadline
    spec = _spec(estimated_runtime=timedelta(hours=2.9), deadline=NOW + timedelta(hours=10))
    e = estimate(spec, QUOTES, NOW, D)
    assert e.billed_hours == pytest.approx(3.0)
    # THEN spot: the cheapest current spot price for the 3 h
    assert e.spot_type == "g4dn.xlarge" and e.spot_usd == pytest.approx(3.0 * 0.20)
    # AND on-demand: the dearest allowed type's list price for the 3 h
    assert e.on_demand_type == "g5.xlarge" and e.on_demand_usd == pytest.approx(3.0 * 1.006)
    # AND at most: spot billed through the 7 h of slack at the highest spot price, then the
    # whole job on on-demand
    assert e.worst_usd == pytest.approx(7.0 * 0.50 + 3.0 * 1.006)
    assert e.spot_usd is not None and e.on_demand_usd is not None
    assert e.spot_usd <= e.on_demand_usd <= e.worst_usd


def test_max_spot_price_and_max_runtime_bound_the_worst_case() -> None:
    spec = _spec(
        estimated_runtime=timedelta(hours=2.9),
        deadline=NOW + timedelta(hours=10),
        max_spot_price=0.35,
    )
    assert estimate(spec, QUOTES, NOW, D).worst_usd == pytest.approx(7.0 * 0.35 + 3.0 * 1.006)
    capped = _spec(
        estimated_runtime=timedelta(hours=2.9),
        deadline=NOW + timedelta(hours=10),
        max_runtime=timedelta(hours=4),
    )
    assert estimate(capped, QUOTES, NOW, D).worst_usd == pytest.approx(4 * 1.006)


def test_without_a_deadline_nothing_bounds_the_worst_case_but_max_runtime() -> None:
    e = estimate(_spec(estimated_runtime=timedelta(hours=2.9)), QUOTES, NOW, D)
    assert e.worst_usd is None and e.hours_to_deadline is None
    assert any("no deadline" in n for n in e.notes)
    assert e.spot_usd == pytest.approx(0.6)


def test_what_is_unknown_is_said_not_guessed() -> None:
    # GIVEN no estimated runtime THEN no figure at all, and the fix named
    e = estimate(_spec(deadline=NOW + timedelta(hours=1)), QUOTES, NOW, D)
    assert (e.spot_usd, e.on_demand_usd, e.worst_usd) == (None, None, None)
    assert "estimated_runtime" in e.notes[0]
    # GIVEN no spot price (none read) THEN the spot bound and the worst case are unknown
    no_spot = [PriceQuote(q.instance_type, on_demand=q.on_demand) for q in QUOTES]
    spec = _spec(estimated_runtime=timedelta(hours=2.9), deadline=NOW + timedelta(hours=10))
    e = estimate(spec, no_spot, NOW, D)
    assert e.spot_usd is None and e.worst_usd is None and e.on_demand_usd is not None
    # GIVEN a deadline the work cannot make THEN it says so
    late = _spec(estimated_runtime=timedelta(hours=5), deadline=NOW + timedelta(hours=2))
    assert any("cannot make its deadline" in n for n in estimate(late, QUOTES, NOW, D).notes)


def test_an_on_demand_job_is_bounded_by_on_demand_alone() -> None:
    # GIVEN `market: on-demand` (respot notebook start --on-demand), 3 h billed, 10 h to go
    spec = _spec(
        estimated_runtime=timedelta(hours=2.9),
        deadline=NOW + timedelta(hours=10),
        market="on-demand",
    )
    e = estimate(spec, QUOTES, NOW, D)
    # THEN no spot bound (it never buys spot), and the worst is the on-demand run itself,
    # not spot through the slack first
    assert e.spot_usd is None and e.spot_type is None
    assert e.on_demand_usd == pytest.approx(3.0 * 1.006)
    assert e.worst_usd == pytest.approx(3.0 * 1.006)
    assert any("market: on-demand" in n for n in e.notes)
    # AND without a deadline it is bounded all the same (no interruptions on on-demand)
    free = estimate(
        _spec(estimated_runtime=timedelta(hours=2.9), market="on-demand"), QUOTES, NOW, D
    )
    assert free.worst_usd == pytest.approx(3.0 * 1.006)
