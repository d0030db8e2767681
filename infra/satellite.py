"""A satellite stack: where respot's instances may also run, in one extra region.

The control plane (functions, table, topic, queues) stays in the home region. A satellite
region holds only what an instance there needs, made the way the home stack makes it:
- a VPC of its own (public subnets, S3 gateway endpoint, no NAT; `infra.constructs.Network`);
- the launch template, instance role/profile and security group of `infra.constructs.Fleet`
  (the same user data builder, IMDSv2 required, no inbound port, encrypted gp3 root), its
  agent sending to the home agent queue and writing to this region's checkpoint bucket;
- a checkpoint bucket in the region (SSE-S3, TLS only, no public access, versioned): a job
  that moves here gets its `jobs/<id>/` objects copied in before its launch, so the agent
  restores and checkpoints next to its GPU (docs/decisions.md, "Satellite regions");
- one EventBridge rule per EC2 rule of the wiring, with the same pattern, forwarding to the
  home region's default bus through a role that may only `events:PutEvents` there (same
  account: the role is all EventBridge needs; no bus policy). Each target retries as the home
  rules' targets do, then dead-letters into this region's `ForwardDeadLetters` queue (a
  rule's dead-letter queue must be in the rule's region), which has the home dead-letter
  queues' alarm (notifying `alarm_topic_arn` only if that topic is in this region: an alarm
  cannot act on another region's topic);
- an SSM parameter `<name_prefix>/satellite` in the region: the launch template id, the
  subnets and zones, the bucket and the instance role id, which the control plane reads
  (`respot.aws.satellites`) instead of a deploy-time reference (the home stack cannot
  reference a stack that references it).

The names below are how the home stack scopes its grants in satellite regions without a
reference: the instance role's fixed name (iam:PassRole) and the bucket's fixed prefix (s3
copy; the bucket's name ends with a piece of this stack's id, so a retained bucket never
blocks the next create of the stack).
"""

from __future__ import annotations

from typing import Any, cast

from aws_cdk import Aws, Environment, Fn, Stack, Tags
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from infra.bundling import LocalAsset, agent_package_asset
from infra.constructs import Fleet, Network
from infra.constructs.functions import RULE_MAX_EVENT_AGE, RULE_RETRY_ATTEMPTS
from infra.constructs.messaging import dead_letter_alarm, dead_letter_queue
from infra.constructs.naming import pascal_id
from infra.constructs.session_manager import SessionManagerAccess
from infra.constructs.storage import (
    SERVER_ACCESS_LOGS_USE_BUCKET_POLICY,
    _private_bucket,
    access_log_bucket,
    checkpoint_lifecycle_rules,
)
from infra.nag import suppress
from infra.regions import (
    SATELLITE_TAG,
    checkpoint_bucket_prefix,
    instance_role_name,
    satellite_parameter_name,
)
from infra.settings import DeploySettings
from infra.wiring import WIRING, Wiring
from respot.core.lifecycle import MANAGED_TAG


def home_bus_arn(region: str) -> str:
    """The home region's default event bus (this account)."""
    return f"arn:{Aws.PARTITION}:events:{region}:{Aws.ACCOUNT_ID}:event-bus/default"


class SatelliteStack(Stack):
    """The instances' side of respot in one extra region, reporting to the home stack."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        home: Any,  # infra.stack.RespotStack (imported lazily by app.py to avoid a cycle)
        region: str,
        settings: DeploySettings,
        wiring: Wiring = WIRING,
        agent_asset: LocalAsset | None = None,
        **kwargs: Any,
    ) -> None:
        home_region = home.region
        if region == home_region:
            raise ValueError(f"extra_regions: {region} is the home region; name only other regions")
        super().__init__(
            scope,
            construct_id,
            env=Environment(account=home.account, region=region),
            # The agent queue's URL and ARN come from the home stack (CDK carries them across
            # regions in SSM parameters it manages).
            cross_region_references=True,
            **kwargs,
        )
        home_name: str = home.stack_name

        self.node.set_context(SERVER_ACCESS_LOGS_USE_BUCKET_POLICY, True)
        self.log_bucket = access_log_bucket(self)
        self.bucket = _satellite_bucket(self, home_name, region, self.log_bucket)

        self.network = Network(self, "Network", flow_log_bucket=self.log_bucket)
        self.fleet = Fleet(
            self,
            "Fleet",
            vpc=self.network.vpc,
            bucket=self.bucket,
            agent_queue=home.messaging.agent_queue,
            machine_image=ec2.MachineImage.from_ssm_parameter(settings.ami_parameter),
            data_buckets=settings.data_bucket_arns,
            root_volume_gb=settings.root_volume_gb,
            root_device_name=settings.root_device_name,
            agent_asset=agent_asset
            or agent_package_asset(python=settings.framework_python_version),
            framework_python=settings.framework_python,
            managed_by=home_name,
            role_name=instance_role_name(home_name, region),
            queue_region=home_region,
            # Each job's credentials from the home credentials function, whose session policy
            # names this region's bucket too (infra/constructs/credentials.py).
            credentials_function=home.fleet.credentials_function,
        )

        own_rules = f"arn:{Aws.PARTITION}:events:{region}:{Aws.ACCOUNT_ID}:rule/*"
        self.forwarding_role = iam.Role(
            self,
            "ForwardingRole",
            # Only EventBridge, only for this account's rules in this region (confused-deputy
            # guard, as EventBridge's docs on target roles advise). The rules refer to this role,
            # so the trust names them by ARN pattern rather than by reference (no cycle).
            assumed_by=iam.ServicePrincipal(
                "events.amazonaws.com",
                conditions={
                    "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
                    "ArnLike": {"aws:SourceArn": own_rules},
                },
            ),
            description=f"EventBridge: forward EC2 events of respot's instances to {home_region}",
        )
        bus_arn = home_bus_arn(home_region)
        self.forwarding_role.add_to_policy(
            iam.PolicyStatement(
                sid="PutOnHomeBus", actions=["events:PutEvents"], resources=[bus_arn]
            )
        )
        home_bus = events.EventBus.from_event_bus_arn(self, "HomeBus", bus_arn)
        # What EventBridge could not put on the home bus (throttled past its retries, a
        # refused PutEvents, the home region down) waits here instead of being dropped.
        self.forward_dead_letters = dead_letter_queue(self, "ForwardDeadLetters")
        suppress(
            self.forward_dead_letters,
            "SQS3",
            "This queue is itself a dead-letter queue: the forwarding rules' targets send to "
            "it the events they could not deliver to the home bus. It has an alarm.",
        )
        self.forward_dead_letters_alarm = dead_letter_alarm(
            self,
            "ForwardDeadLettersAlarm",
            self.forward_dead_letters,
            f"respot EC2 events forwarded from {region} to {home_region}",
            _topic_in_region(self, settings.alarm_topic_arn, region),
        )
        self.rules: dict[str, events.Rule] = {}
        for rule in wiring.rules:
            pattern = rule.pattern
            forward = events.Rule(
                self,
                f"Forward{pascal_id(rule.name)}",
                description=f"{rule.description} (forwarded to the home bus in {home_region})",
                event_pattern=events.EventPattern(
                    source=pattern.get("source"),
                    detail_type=pattern.get("detail-type"),
                    detail=pattern.get("detail"),
                ),
                # CDK adds the queue policy: events.amazonaws.com may SendMessage only with
                # aws:SourceArn = this rule.
                targets=[
                    targets.EventBus(
                        home_bus,
                        role=self.forwarding_role,
                        dead_letter_queue=self.forward_dead_letters,
                    )
                ],
            )
            _retry_policy(forward)
            self.rules[rule.name] = forward

        self.parameter = ssm.StringParameter(
            self,
            "SatelliteParameter",
            parameter_name=satellite_parameter_name(settings.name_prefix),
            description=f"respot satellite of {home_name}: launch template, subnets, bucket",
            string_value=self.to_json_string(
                {
                    "home_stack": home_name,
                    "region": region,
                    "launch_template_id": self.fleet.launch_template_id,
                    "bucket": self.bucket.bucket_name,
                    "instance_role_id": self.fleet.role.role_id,
                    "subnets": [
                        {"subnet_id": p.subnet_id, "availability_zone": p.availability_zone}
                        for p in self.network.placements
                    ],
                }
            ),
        )
        if settings.session_manager or settings.workspaces:  # shell (opt-in), tunnels; no port
            SessionManagerAccess(self, "SessionManager", role=self.fleet.role)
        Tags.of(self).add(SATELLITE_TAG, home_name)
        Tags.of(self.fleet.launch_template).add(MANAGED_TAG, home_name)


def _retry_policy(rule: events.Rule) -> None:
    """The home rules' retry policy on the rule's one target.

    EventBridge takes a RetryPolicy on any target (AWS::Events::Rule Target), but CDK's
    `targets.EventBus` has no retry props (aws/aws-cdk#28735), so it is set on the template.
    Without it the default is 24 hours and 185 attempts before the dead-letter queue.
    """
    cfn = cast(events.CfnRule, rule.node.default_child)
    cfn.add_property_override(
        "Targets.0.RetryPolicy",
        {
            "MaximumRetryAttempts": RULE_RETRY_ATTEMPTS,
            "MaximumEventAgeInSeconds": int(RULE_MAX_EVENT_AGE.to_seconds()),
        },
    )


def _topic_in_region(scope: Construct, topic_arn: str | None, region: str) -> sns.ITopic | None:
    """The alarm topic if it lives in `region`; a CloudWatch alarm acts only on its region's."""
    if topic_arn is None or topic_arn.split(":")[3] != region:
        return None
    return sns.Topic.from_topic_arn(scope, "AlarmTopic", topic_arn)


def _satellite_bucket(
    scope: Construct, home_name: str, region: str, log_bucket: s3.IBucket
) -> s3.Bucket:
    """The region's checkpoint bucket: as the home jobs bucket, named after this stack's id.

    `<home>-<account>-<region>-<first 8 hex of the stack id's UUID>` (`infra.regions`): the
    home stack grants by the prefix, the control plane reads the name from the satellite
    parameter, and a new stack (a retry after a failed create, a deploy after `cdk destroy`,
    both of which leave the retained bucket behind) gets a new name instead of "already
    exists"."""
    stack_uuid = Fn.select(2, Fn.split("/", Aws.STACK_ID))
    return _private_bucket(
        scope,
        "CheckpointBucket",
        bucket_name=Fn.join(
            "",
            [
                checkpoint_bucket_prefix(home_name, Aws.ACCOUNT_ID, region),
                Fn.select(0, Fn.split("-", stack_uuid)),
            ],
        ),
        versioned=True,
        server_access_logs_bucket=log_bucket,
        server_access_logs_prefix="s3-access/checkpoint-bucket/",
        lifecycle_rules=checkpoint_lifecycle_rules(),
    )
