"""The control plane's Lambda functions and what invokes them, all from `WIRING`.

One function per `WIRING.functions` entry, each with its own role (no managed policies: the
stack adds exactly what its `Grant`s say) and its own log group. Queues feed functions
through event source mappings with partial batch failures; EventBridge rules and schedules
invoke them asynchronously, with retries and a dead-letter queue on both legs.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import CfnResource, Duration, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_destinations as destinations
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.constructs.naming import pascal_id
from infra.nag import suppress
from infra.wiring import WIRING, Wiring, agent_function_name

RUNTIME = lambda_.Runtime.PYTHON_3_12
# arm64 (Graviton): ~20% less per GB-second than x86_64 for the same I/O-bound handlers, and
# every compiled dependency (pydantic-core) ships aarch64 wheels. See infra/bundling.py.
ARCHITECTURE = lambda_.Architecture.ARM_64
LOG_RETENTION = logs.RetentionDays.ONE_MONTH
# EventBridge -> Lambda delivery: retry a while, then dead-letter. Spot events lose their
# value within minutes; an hour is generous and keeps a poison event from lingering a day.
RULE_RETRY_ATTEMPTS = 10
RULE_MAX_EVENT_AGE = Duration.hours(1)
ASYNC_RETRY_ATTEMPTS = 2  # Lambda's own retries of a failed async invocation


def schedule_rule_name(stack_name: str, schedule: str) -> str:
    """The physical name of a switched schedule's rule (EventBridge: at most 64 characters)."""
    return f"{stack_name}-{schedule}"[-64:].lstrip("-")


class WiringError(ValueError):
    """The wiring asks for something AWS would reject (checked at synth, not at deploy)."""


class ControlFunctions(Construct):
    """One Lambda per wiring function, plus its queue mappings, rules and schedules."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        code: lambda_.Code,
        environment: Mapping[str, str],
        queues: Mapping[str, sqs.IQueue],
        event_dead_letters: sqs.IQueue,
        wiring: Wiring = WIRING,
    ) -> None:
        super().__init__(scope, construct_id)
        self.functions: dict[str, lambda_.Function] = {}
        self.roles: dict[str, iam.Role] = {}
        self.rules: dict[str, events.Rule] = {}
        # The event source mapping of each queue (the activity switch names the idle_off ones).
        self.mappings: dict[str, event_sources.SqsEventSource] = {}

        for spec in wiring.functions:
            cid = pascal_id(spec.name)
            log_group = logs.LogGroup(self, f"{cid}Logs", retention=LOG_RETENTION)
            role = iam.Role(
                self,
                f"{cid}Role",
                assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
                description=f"respot {spec.name}: {spec.description}"[:1000],
            )
            log_group.grant_write(role)
            self.roles[spec.name] = role
            self.functions[spec.name] = function = lambda_.Function(
                self,
                cid,
                description=spec.description,
                runtime=RUNTIME,
                architecture=ARCHITECTURE,
                handler=spec.handler,
                function_name=agent_function_name(Stack.of(self).stack_name, spec.name)
                if spec.agent_invoked
                else None,
                code=code,
                memory_size=spec.memory_mb,
                timeout=Duration.seconds(spec.timeout_seconds),
                environment=dict(environment),
                role=role,
                log_group=log_group,
            )
            self._depend_on_policy_only(function, role)
            suppress(
                function,
                "L1",
                "Python 3.12 on purpose: the asset's compiled wheels (pydantic-core) are built "
                "for cp312 in infra/bundling.py, so the runtime moves with that pin, not alone.",
            )

        for queue_spec in wiring.queues:
            function = self._function(queue_spec.function, f"queue {queue_spec.name}")
            if (
                queue_spec.visibility_timeout_seconds
                < wiring.function(queue_spec.function).timeout_seconds
            ):
                raise WiringError(
                    f"queue {queue_spec.name}: visibility timeout "
                    f"{queue_spec.visibility_timeout_seconds}s is shorter than the timeout of "
                    f"{queue_spec.function}; SQS would deliver messages twice while in flight"
                )
            window = queue_spec.max_batching_window_seconds
            source = event_sources.SqsEventSource(
                queues[queue_spec.name],
                batch_size=queue_spec.batch_size,
                max_batching_window=Duration.seconds(window) if window else None,
                report_batch_item_failures=True,
                enabled=not queue_spec.idle_off,  # idle_off: the activity switch turns it on
            )
            function.add_event_source(source)
            self.mappings[queue_spec.name] = source

        asynchronous: set[str] = set()
        for rule_spec in wiring.rules:
            function = self._function(rule_spec.function, f"rule {rule_spec.name}")
            rule = events.Rule(
                self,
                f"{pascal_id(rule_spec.name)}Rule",
                description=rule_spec.description or None,
                event_pattern=events.EventPattern(
                    **{key.replace("-", "_"): value for key, value in rule_spec.pattern.items()}
                ),
            )
            rule.add_target(self._target(function, event_dead_letters))
            self.rules[rule_spec.name] = rule
            asynchronous.add(rule_spec.function)

        for schedule in wiring.schedules:
            function = self._function(schedule.function, f"schedule {schedule.name}")
            if schedule.every_seconds < 60 or schedule.every_seconds % 60:
                raise WiringError(
                    f"schedule {schedule.name}: every {schedule.every_seconds}s; EventBridge "
                    "rates are whole minutes"
                )
            rule = events.Rule(
                self,
                f"{pascal_id(schedule.name)}Schedule",
                description=f"respot {schedule.name} every {schedule.every_seconds}s",
                schedule=events.Schedule.rate(Duration.minutes(schedule.every_seconds // 60)),
                # idle_off: created disabled, switched by the activity switch, which names it
                # by this literal name (a reference would make a cycle through its target).
                enabled=not schedule.idle_off,
                rule_name=schedule_rule_name(Stack.of(self).stack_name, schedule.name)
                if schedule.idle_off
                else None,
            )
            rule.add_target(self._target(function, event_dead_letters))
            self.rules[f"schedule:{schedule.name}"] = rule
            asynchronous.add(schedule.function)

        for name in sorted(asynchronous):
            # After Lambda's own retries, a failed async invocation lands in the dead letters.
            self.functions[name].configure_async_invoke(
                retry_attempts=ASYNC_RETRY_ATTEMPTS,
                on_failure=destinations.SqsDestination(event_dead_letters),
            )

    @staticmethod
    def _depend_on_policy_only(function: lambda_.Function, role: iam.Role) -> None:
        """Drop CDK's DependsOn on the role: `Role: GetAtt` already orders it (cfn-lint W3005).

        The dependency on the role's policy stays: the function (and its event source
        mappings) must not start before its permissions exist.
        """
        policy = role.node.try_find_child("DefaultPolicy")
        cfn_function = function.node.default_child
        if policy is None or not isinstance(cfn_function, CfnResource):
            return
        cfn_policy = policy.node.default_child
        assert isinstance(cfn_policy, CfnResource)
        cfn_function.add_override("DependsOn", [Stack.of(function).get_logical_id(cfn_policy)])

    def _function(self, name: str, used_by: str) -> lambda_.Function:
        try:
            return self.functions[name]
        except KeyError:
            raise WiringError(
                f"{used_by} names function {name!r}, which the wiring lacks"
            ) from None

    @staticmethod
    def _target(function: lambda_.IFunction, dead_letters: sqs.IQueue) -> targets.LambdaFunction:
        return targets.LambdaFunction(
            function,
            dead_letter_queue=dead_letters,
            retry_attempts=RULE_RETRY_ATTEMPTS,
            max_event_age=RULE_MAX_EVENT_AGE,
        )
