"""bench.scale matches EC2 events by id: a redelivered event cannot hide a dropped one."""

from __future__ import annotations

from bench.scale import match_rule_events
from infra.wiring import STATE_CHANGE, WIRING

FULFIL = "EC2 Spot Instance Request Fulfillment"


def test_a_dropped_event_is_found_even_when_another_is_redelivered() -> None:
    # GIVEN two fulfilments and a "pending" state change (no rule takes "pending") on the bus
    put = [
        ("ev-a", FULFIL, {"instance-id": "i-a"}),
        ("ev-b", FULFIL, {"instance-id": "i-b"}),
        ("ev-p", STATE_CHANGE, {"instance-id": "i-a", "state": "pending"}),
    ]
    # WHEN the handler saw ev-a twice (a redelivery) and never saw ev-b (dropped)
    handled = [("spot_fulfillment", "ev-a"), ("spot_fulfillment", "ev-a")]
    result = match_rule_events(put, handled, WIRING.rules)
    # THEN a count would balance (2 expected, 2 handled), but matching by id finds ev-b missing
    assert result["expected"]["spot_fulfillment"] == len(handled) == 2
    assert result["missing"] == {"spot_fulfillment": ["ev-b"]}
    assert result["redelivered"]["spot_fulfillment"] == 1
    assert result["handled_distinct"]["spot_fulfillment"] == 1
    # AND the pending state change is expected by no function
    assert result["expected"]["instance_state"] == 0


def test_every_event_handled_once_or_more_is_nothing_missing() -> None:
    put = [
        ("ev-r", STATE_CHANGE, {"instance-id": "i-a", "state": "running"}),
        ("ev-t", STATE_CHANGE, {"instance-id": "i-a", "state": "terminated"}),
    ]
    handled = [("instance_state", "ev-t"), ("instance_state", "ev-r"), ("instance_state", "ev-r")]
    result = match_rule_events(put, handled, WIRING.rules)
    assert result["missing"] == {}
    assert result["expected"]["instance_state"] == 2
    assert result["redelivered"]["instance_state"] == 1


def test_an_event_handled_by_the_wrong_function_is_still_missing() -> None:
    put = [("ev-x", FULFIL, {"instance-id": "i-a"})]
    result = match_rule_events(put, [("instance_state", "ev-x")], WIRING.rules)
    assert result["missing"] == {"spot_fulfillment": ["ev-x"]}
