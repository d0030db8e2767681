"""The activity switch in the template: switched pollers created off, exact rights to switch."""

from __future__ import annotations

import json
from typing import Any

from infra.wiring import WIRING
from respot.control import activity
from tests.infra.test_stack_template import (
    as_list,
    functions_by_handler,
    logical_id,
    of_type,
    role_statements,
    statements,
)

SWITCHERS = {"lambdas.commands.handler", "lambdas.reconcile.handler"}
# The EC2 event functions may read and enable (a deploy can disable the tick's own schedule).
KEEPERS = {
    "lambdas.instance_state.handler",
    "lambdas.spot_interruption.handler",
    "lambdas.spot_fulfillment.handler",
}
SWITCH_ACTIONS = {
    "events:EnableRule",
    "events:DisableRule",
    "lambda:UpdateEventSourceMapping",
}


def _role(fn: dict[str, Any]) -> str:
    return str(fn["Properties"]["Role"]["Fn::GetAtt"][0])


def test_switched_mappings_and_the_schedule_are_created_disabled_the_intake_enabled(
    respot: Any, resources: dict[str, Any]
) -> None:
    stack, _ = respot
    mappings = of_type(resources, "AWS::Lambda::EventSourceMapping")
    for spec in WIRING.queues:
        queue_id = logical_id(stack, stack.messaging.queues[spec.name])
        (mapping,) = [
            m
            for m in mappings.values()
            if m["Properties"]["EventSourceArn"] == {"Fn::GetAtt": [queue_id, "Arn"]}
        ]
        assert mapping["Properties"].get("Enabled", True) is (not spec.idle_off), spec.name
    assert {q.name for q in WIRING.queues if q.idle_off} == {
        "agent-events",
        "notifications",
        "sweep-events",
        "launch-retries",
    }
    (schedule,) = [
        r
        for r in of_type(resources, "AWS::Events::Rule").values()
        if "ScheduleExpression" in r["Properties"]
    ]
    assert schedule["Properties"]["State"] == "DISABLED"
    assert schedule["Properties"]["Name"] == "Respot-reconcile"
    for rule in of_type(resources, "AWS::Events::Rule").values():
        if "EventPattern" in rule["Properties"]:  # the EC2 intake stays on
            assert rule["Properties"]["State"] == "ENABLED"


def test_only_submit_and_reconcile_may_switch_and_only_those_resources(
    respot: Any, resources: dict[str, Any]
) -> None:
    del respot
    by_handler = functions_by_handler(resources)
    switched = [
        (name, s)
        for name, s in statements(resources)
        if SWITCH_ACTIONS & set(as_list(s.get("Action")))
    ]
    # exactly one rule statement and one mapping statement per switching role
    holders: dict[str, list[dict[str, Any]]] = {}
    for handler, (_, fn) in by_handler.items():
        mine = [s for s in role_statements(resources, _role(fn)) if s in [x for _, x in switched]]
        if mine:
            holders[handler] = mine
    assert set(holders) == SWITCHERS | KEEPERS
    esm = of_type(resources, "AWS::Lambda::EventSourceMapping")
    idle_esm_ids = {mid for mid, m in esm.items() if m["Properties"].get("Enabled", True) is False}
    for handler, mine in holders.items():
        rule = [s for s in mine if "events:EnableRule" in as_list(s["Action"])]
        (rule_statement,) = rule
        # only the switchers may turn off; every holder reads the real state ("on" is checked)
        assert sorted(as_list(rule_statement["Action"])) == sorted(
            ["events:EnableRule", "events:DescribeRule"]
            + (["events:DisableRule"] if handler in SWITCHERS else [])
        )
        (rule_arn,) = as_list(rule_statement["Resource"])
        assert "rule/Respot-reconcile" in json.dumps(rule_arn), handler
        (mapping_statement,) = [
            s for s in mine if "lambda:UpdateEventSourceMapping" in as_list(s["Action"])
        ]
        assert as_list(mapping_statement["Action"]) == [
            "lambda:UpdateEventSourceMapping",
            "lambda:GetEventSourceMapping",
        ]
        resources_named = json.dumps(mapping_statement["Resource"])
        assert len(as_list(mapping_statement["Resource"])) == len(idle_esm_ids) == 4
        for mid in idle_esm_ids:
            assert mid in resources_named, (handler, mid)
        for mid in set(esm) - idle_esm_ids:  # never the intake's mappings
            assert mid not in resources_named, (handler, mid)


def test_the_switching_functions_know_the_rule_mappings_and_queues(
    resources: dict[str, Any],
) -> None:
    by_handler = functions_by_handler(resources)
    for handler, (_, fn) in by_handler.items():
        env = fn["Properties"]["Environment"]["Variables"]
        if handler in SWITCHERS:
            assert env[activity.ENV_RULE] == "Respot-reconcile"
            assert "Fn::Join" in env[activity.ENV_MAPPINGS]
            assert "Fn::Join" in env[activity.ENV_QUEUES]
        elif handler in KEEPERS:
            assert env[activity.ENV_RULE] == "Respot-reconcile"
            assert "Fn::Join" in env[activity.ENV_MAPPINGS]
            assert activity.ENV_QUEUES not in env
        else:
            assert activity.ENV_RULE not in env and activity.ENV_MAPPINGS not in env, handler


def test_only_reconcile_reads_the_switched_queues_counts(resources: dict[str, Any]) -> None:
    # (every queue's consumer reads its own queue's attributes through its mapping's grant;
    # the switch's drain check is a statement of its own)
    by_handler = functions_by_handler(resources)
    holding = {
        h: s
        for h, (_, fn) in by_handler.items()
        for s in role_statements(resources, _role(fn))
        if s.get("Sid") == "ActivitySwitchDrained"
    }
    assert set(holding) == {"lambdas.reconcile.handler"}
    statement = holding["lambdas.reconcile.handler"]
    assert as_list(statement["Action"]) == ["sqs:GetQueueAttributes"]
    assert len(as_list(statement["Resource"])) == 4  # the four idle_off queues
