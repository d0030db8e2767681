"""The foreign-event cost figure is its parts at bench/prices.py's prices (no tolerance)."""

from __future__ import annotations

import pytest

from bench.foreign_events import foreign_event_cost, report
from bench.prices import PRICES


def test_the_figure_adds_its_priced_parts_and_the_satellite_forward():
    cost = foreign_event_cost(billed_ms=100)
    assert cost.lambda_requests == PRICES["lambda_request"].usd * 1000
    gb_seconds = 1000 * 0.1 * 0.25  # 1,000 invocations of 100 ms at 256 MB
    assert cost.lambda_duration == pytest.approx(PRICES["lambda_gb_second_arm64"].usd * gb_seconds)
    parts = cost.lambda_requests + cost.lambda_duration + cost.dynamodb_read + cost.logs
    assert cost.home_total == parts
    assert cost.forward == 1.00 / 1e6 * 1000  # EventBridge: $1.00 per million, cross-region
    assert cost.satellite_total == cost.home_total + cost.forward
    assert foreign_event_cost(billed_ms=200).lambda_duration == pytest.approx(
        2 * cost.lambda_duration
    )
    assert "https://aws.amazon.com/eventbridge/pricing/" in report(cost)
