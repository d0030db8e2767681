"""The activity switch's resources and rights (respot/control/activity.py).

`commands` and `reconcile` get, in their environment, the name of each idle_off schedule's
rule and the ids of each idle_off queue's event source mapping, and exactly the rights to
switch those: events:EnableRule/DisableRule on that rule, lambda:UpdateEventSourceMapping
on those mappings, and to read their state (events:DescribeRule,
lambda:GetEventSourceMapping: a deploy re-applies the template's "disabled" while the marker
says "on", so "on" is checked, not believed). `reconcile` also reads those queues' message
counts (it turns off only when nothing waits on them). The EC2 event functions (`KEEPERS`)
may only read and enable: a deploy can disable the schedule that runs the tick, and their
rules stay on. The marker item lives in the job table, which all of them already write.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import ArnFormat, Fn, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sqs as sqs

from infra.constructs.functions import ControlFunctions, schedule_rule_name
from infra.wiring import WIRING, Wiring
from respot.control.activity import ENV_MAPPINGS, ENV_QUEUES, ENV_RULE

SWITCHERS = ("commands", "reconcile")  # a submission ensures "on"; the tick turns off
# An EC2 event of a live job ensures "on" too (at most every few minutes; never turns off).
KEEPERS = ("instance_state", "spot_interruption", "spot_fulfillment")
DRAIN_CHECKER = "reconcile"


def wire_activity(
    functions: ControlFunctions, queues: Mapping[str, sqs.IQueue], wiring: Wiring = WIRING
) -> None:
    """Environment and least-privilege statements for the functions that switch."""
    stack = Stack.of(functions)
    idle_queues = [q.name for q in wiring.queues if q.idle_off]
    rules = [schedule_rule_name(stack.stack_name, s.name) for s in wiring.schedules if s.idle_off]
    if not idle_queues and not rules:
        return
    mappings = [functions.mappings[name] for name in idle_queues]
    rule_arns = [
        stack.format_arn(
            service="events",
            resource="rule",
            resource_name=name,
            arn_format=ArnFormat.SLASH_RESOURCE_NAME,
        )
        for name in rules
    ]
    env = {
        ENV_RULE: ",".join(rules),
        ENV_MAPPINGS: Fn.join(",", [m.event_source_mapping_id for m in mappings]),
        ENV_QUEUES: Fn.join(",", [queues[name].queue_url for name in idle_queues]),
    }
    for name in (*SWITCHERS, *KEEPERS):
        if name not in functions.functions:
            continue
        switches = name in SWITCHERS
        function = functions.functions[name]
        for key, value in env.items():
            if switches or key != ENV_QUEUES:
                function.add_environment(key, value)
        role = functions.roles[name]
        if rule_arns:
            role.add_to_policy(
                iam.PolicyStatement(
                    sid="ActivitySwitchSchedule",
                    actions=[
                        "events:EnableRule",
                        *(["events:DisableRule"] if switches else []),
                        "events:DescribeRule",
                    ],
                    resources=rule_arns,
                )
            )
        if mappings:
            role.add_to_policy(
                iam.PolicyStatement(
                    sid="ActivitySwitchPollers",
                    actions=["lambda:UpdateEventSourceMapping", "lambda:GetEventSourceMapping"],
                    resources=[m.event_source_mapping_arn for m in mappings],
                )
            )
        if name == DRAIN_CHECKER and idle_queues:
            role.add_to_policy(
                iam.PolicyStatement(
                    sid="ActivitySwitchDrained",
                    actions=["sqs:GetQueueAttributes"],
                    resources=[queues[q].queue_arn for q in idle_queues],
                )
            )
