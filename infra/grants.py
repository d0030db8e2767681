"""What each wiring `Grant` means in IAM: least-privilege statements for one function.

`policy_for(grant, ...)` is the only place a `Grant` becomes IAM; the stack applies it to
every function's role. A grant without an entry here fails the synth, so a new grant in
`infra/wiring.py` cannot silently give nothing (or everything). Where a statement needs a
wildcard resource, the grant names it with the reason, which becomes its cdk-nag suppression.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from aws_cdk import ArnFormat, Aws, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_ssm as ssm

from infra.regions import SATELLITE_TAG, checkpoint_bucket_prefix, instance_role_name
from infra.wiring import Grant
from respot.core.lifecycle import MANAGED_TAG
from respot.storage import layout

# The table adapter's calls: compare-and-set writes, reads and the `live` index query; Scan:
# an admission pass with budgets counts the month's spend over every job (issue 26,
# `control.admission._spend`). (TransactWriteItems is authorized per item by these actions.)
TABLE_ACTIONS = (
    "dynamodb:BatchGetItem",
    "dynamodb:ConditionCheckItem",
    "dynamodb:DeleteItem",
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:Query",
    "dynamodb:Scan",
    "dynamodb:UpdateItem",
)
BUCKET_OBJECT_ACTIONS = ("s3:GetObject", "s3:PutObject")
# Resource types RunInstances touches when it launches from the template (spot included).
LAUNCHED_RESOURCE_TYPES = ("instance", "volume", "network-interface", "spot-instances-request")


@dataclass(frozen=True)
class GrantTargets:
    """The resources grants refer to."""

    stack: Stack
    table: dynamodb.ITable
    index_names: tuple[str, ...]
    bucket: s3.IBucket
    launch_template_arn: str
    instance_role: iam.IRole
    subnet_ids: tuple[str, ...]
    security_group_id: str
    image_id: str
    slack_token: ssm.IStringParameter  # a SecureString the platform team creates
    # Instance types RunInstances may launch (condition ec2:InstanceType); empty: any.
    allowed_instance_types: tuple[str, ...] = ()
    notify_queue: sqs.IQueue | None = None
    sweep_queue: sqs.IQueue | None = None
    launch_retry_queue: sqs.IQueue | None = None
    # function name -> the dead-letter queue of the queue that feeds it
    dead_letter_queues: Mapping[str, sqs.IQueue] = field(default_factory=dict)
    # Regions with a satellite stack (infra/satellite.py) and the parameter each holds.
    satellite_regions: tuple[str, ...] = ()
    satellite_parameter: str = ""

    def regional_arn(self, service: str, region: str, resource: str, name: str) -> str:
        """arn:<partition>:<service>:<region>:<account>:<resource>/<name> in another region."""
        return self.stack.format_arn(
            service=service,
            region=region,
            resource=resource,
            resource_name=name,
            arn_format=ArnFormat.SLASH_RESOURCE_NAME,
        )

    def ec2_arn(self, resource: str, name: str, *, account: str | None = None) -> str:
        """arn:<partition>:ec2:<region>:<account>:<resource>/<name>."""
        return self.stack.format_arn(
            service="ec2",
            resource=resource,
            resource_name=name,
            account=account,
            arn_format=ArnFormat.SLASH_RESOURCE_NAME,
        )


class GrantError(KeyError):
    """A function carries a grant the stack cannot express or satisfy."""


@dataclass(frozen=True)
class GrantPolicy:
    """The statements of one grant, and why each wildcard resource in them is right."""

    statements: list[iam.PolicyStatement]
    # (regex over cdk-nag's "Resource::..." finding, the reason written into the suppression)
    wildcards: tuple[tuple[str, str], ...] = ()
    # What the grant needs in satellite regions (extra_regions), kept in a policy of its own
    # so that the home-only policy stays as it is; with its wildcards' reasons.
    satellite: list[iam.PolicyStatement] = field(default_factory=list)
    satellite_wildcards: tuple[tuple[str, str], ...] = ()


_JOB_OBJECTS = (
    r"^Resource::<.*Bucket.*\.Arn>/jobs/\*$",
    "The control plane handles every job, so it reads and writes objects under jobs/ "
    "(submissions, handoff markers, manifests) and lists the bucket, which holds only jobs/; "
    "nothing else in the bucket.",
)
_LAUNCHED = (
    r"^Resource::arn:<AWS::Partition>:ec2:<AWS::Region>:<AWS::AccountId>:"
    r"(instance|volume|network-interface|spot-instances-request)/\*$",
    "Instances, volumes, network interfaces and spot requests do not exist before the "
    "launch, so their ids cannot be named: RunInstances is allowed only together with "
    "respot's launch template (condition ec2:LaunchTemplate), CreateTags only inside "
    "RunInstances (ec2:CreateAction), TerminateInstances only on instances tagged "
    "respot:managed=<this stack's name> (aws:ResourceTag).",
)
_SATELLITE = (
    r"^Resource::arn:<AWS::Partition>:(ec2:\*:<AWS::AccountId>:"
    r"(instance|volume|network-interface|spot-instances-request|launch-template|subnet|"
    r"security-group)/\*|ssm:\*:<AWS::AccountId>:parameter/.*)$",
    "Satellite regions (extra_regions): their stacks are deployed after this one and refer "
    "to it, so their resources' ids cannot be named here; one ARN for every region keeps "
    "the policy's size flat in the number of regions, and every such statement allows only "
    "requests to the satellite regions (aws:RequestedRegion). RunInstances there needs a launch "
    "template tagged respot:managed=<this stack> (aws:ResourceTag), subnets and security "
    "groups tagged respot:satellite-of=<this stack>, and every other resource to come with "
    "a launch template (ec2:LaunchTemplate); CreateTags only inside RunInstances; "
    "TerminateInstances only on instances tagged respot:managed=<this stack>.",
)
_SATELLITE_IMAGES = (
    r"^Resource::arn:<AWS::Partition>:ec2:\*::image/\*$",
    "A satellite region's launch template resolves its own image from the public AMI "
    "parameter at its deploy; RunInstances may use an image only together with a launch "
    "template (ec2:LaunchTemplate) tagged as this stack's, and only in the satellite regions "
    "(aws:RequestedRegion).",
)
_SATELLITE_OBJECTS = (
    r"^Resource::arn:<AWS::Partition>:s3:::.*-<AWS::AccountId>-[a-z]+(-[a-z]+)+-\d-\*"
    r"(/jobs/\*)?$",
    "The control plane copies a job's objects into the checkpoint bucket of the satellite "
    "region its next attempt runs in (and back), for every job: objects under jobs/ only. "
    "The bucket's name ends with a piece of the satellite stack's id (so that a retained "
    "bucket never blocks a new create), which this stack cannot know: the grant names the "
    "fixed prefix <home>-<account>-<region>-.",
)
_QUOTAS = (
    r"^Resource::arn:<AWS::Partition>:servicequotas:<AWS::Region>:<AWS::AccountId>:ec2/\*$",
    "servicequotas:GetServiceQuota on EC2's quotas only: which quota a refused launch hit "
    "(L-3819A6DF, L-DB2E81BA, ...) depends on the instance family; read-only.",
)
_KMS_KEYS = (
    r"^Resource::arn:<AWS::Partition>:kms:<AWS::Region>:<AWS::AccountId>:key/\*$",
    "The Slack token parameter is created by the platform team, under the account's aws/ssm "
    "key or a key of their choice, so the key id is not known to the stack. kms:Decrypt is "
    "allowed only through SSM (kms:ViaService) and only for this one parameter "
    "(kms:EncryptionContext:PARAMETER_ARN, the context SSM sends for a standard SecureString).",
)
_DESCRIBE = (
    r"^Resource::\*$",
    "ec2:DescribeInstances, ec2:DescribeSpotPriceHistory and ec2:DescribeInstanceTypes "
    "support no resource-level "
    "permissions: AWS accepts only Resource *. They are read-only.",
)


def _table(t: GrantTargets, function: str) -> GrantPolicy:
    return GrantPolicy(
        [
            iam.PolicyStatement(
                sid="JobsTableReadWrite",
                actions=list(TABLE_ACTIONS),
                resources=[
                    t.table.table_arn,
                    *(f"{t.table.table_arn}/index/{name}" for name in t.index_names),
                ],
            )
        ]
    )


def job_objects(bucket: s3.IBucket, sid: str, *actions: str) -> iam.PolicyStatement:
    """`actions` on the objects under jobs/ (every job's; see docs/security.md)."""
    return iam.PolicyStatement(
        sid=sid, actions=list(actions), resources=[bucket.arn_for_objects(f"{layout.JOBS_PREFIX}*")]
    )


def list_job_objects(bucket: s3.IBucket) -> iam.PolicyStatement:
    """s3:ListBucket on the jobs bucket, which holds nothing but jobs/.

    No s3:prefix condition: S3 answers HeadObject on a missing key with 404 only to callers
    allowed s3:ListBucket on the bucket, and respot asks "is it there yet?" often (checkpoint
    blobs stored once by content, handoff markers). With a prefix condition that answer
    becomes 403 AccessDenied.
    """
    return iam.PolicyStatement(
        sid="ListJobObjects", actions=["s3:ListBucket"], resources=[bucket.bucket_arn]
    )


def _bucket(t: GrantTargets, function: str) -> GrantPolicy:
    statements = [
        job_objects(t.bucket, "ReadWriteJobObjects", *BUCKET_OBJECT_ACTIONS),
        list_job_objects(t.bucket),
    ]
    if not t.satellite_regions:
        return GrantPolicy(statements, (_JOB_OBJECTS,))
    buckets = [_satellite_bucket_arn(t, region) for region in t.satellite_regions]
    satellite = [
        iam.PolicyStatement(
            sid="CopyJobObjectsToSatellites",
            actions=list(BUCKET_OBJECT_ACTIONS),
            resources=[f"{arn}/{layout.JOBS_PREFIX}*" for arn in buckets],
        ),
        iam.PolicyStatement(
            sid="ListSatelliteJobObjects", actions=["s3:ListBucket"], resources=buckets
        ),
    ]
    return GrantPolicy(statements, (_JOB_OBJECTS,), satellite, (_SATELLITE_OBJECTS,))


def _satellite_bucket_arn(t: GrantTargets, region: str) -> str:
    """The satellite's checkpoint bucket, by its prefix: the name ends with a piece of the
    satellite stack's id, which this stack cannot know (infra/regions.py)."""
    prefix = checkpoint_bucket_prefix(t.stack.stack_name, Aws.ACCOUNT_ID, region)
    return f"arn:{Aws.PARTITION}:s3:::{prefix}*"


Conditions = dict[str, dict[str, object]]


def in_satellite_regions(t: GrantTargets, *conditions: Conditions) -> Conditions:
    """`conditions` merged, plus aws:RequestedRegion in the satellite regions.

    Satellite statements name every region (`arn:...:ec2:*:...`) and limit the request's
    region instead of listing one ARN per region and kind: a role's policies then stay about
    the same size whatever the number of extra regions (IAM quotas: 10,240 characters of
    inline policies per role, 6,144 per managed policy; infra/stack.py)."""
    merged: Conditions = {}
    regions: Conditions = {"StringEquals": {"aws:RequestedRegion": list(t.satellite_regions)}}
    for condition in (*conditions, regions):
        for operator, keys in condition.items():
            merged.setdefault(operator, {}).update(keys)
    return merged


def _any_region_arn(t: GrantTargets, service: str, kind: str, name: str = "*") -> str:
    return t.regional_arn(service, "*", kind, name)


def _satellite_launch(t: GrantTargets) -> list[iam.PolicyStatement]:
    """RunInstances in satellite regions: only from launch templates tagged as this stack's."""

    def arn(kind: str) -> str:
        return _any_region_arn(t, "ec2", kind)

    from_template: Conditions = {"ArnLike": {"ec2:LaunchTemplate": arn("launch-template")}}
    mine: Conditions = {"StringEquals": {f"aws:ResourceTag/{MANAGED_TAG}": t.stack.stack_name}}
    satellite_of: Conditions = {
        "StringEquals": {f"aws:ResourceTag/{SATELLITE_TAG}": t.stack.stack_name}
    }
    instance_conditions: Conditions = dict(from_template)
    if t.allowed_instance_types:
        instance_conditions["StringEquals"] = {"ec2:InstanceType": list(t.allowed_instance_types)}
    return [
        iam.PolicyStatement(
            sid="RunFromSatelliteTemplates",
            actions=["ec2:RunInstances"],
            resources=[arn("launch-template")],
            conditions=in_satellite_regions(t, mine),
        ),
        iam.PolicyStatement(
            sid="RunInSatelliteNetworks",
            actions=["ec2:RunInstances"],
            resources=[arn("subnet"), arn("security-group")],
            conditions=in_satellite_regions(t, from_template, satellite_of),
        ),
        iam.PolicyStatement(
            sid="RunSatelliteResources",
            actions=["ec2:RunInstances"],
            resources=[
                *(arn(kind) for kind in LAUNCHED_RESOURCE_TYPES if kind != "instance"),
                f"arn:{Aws.PARTITION}:ec2:*::image/*",
            ],
            conditions=in_satellite_regions(t, from_template),
        ),
        iam.PolicyStatement(
            sid="RunSatelliteInstanceTypes",
            actions=["ec2:RunInstances"],
            resources=[arn("instance")],
            conditions=in_satellite_regions(t, instance_conditions),
        ),
        iam.PolicyStatement(
            sid="TagSatelliteLaunches",
            actions=["ec2:CreateTags"],
            resources=[arn(kind) for kind in LAUNCHED_RESOURCE_TYPES],
            conditions=in_satellite_regions(
                t, {"StringEquals": {"ec2:CreateAction": "RunInstances"}}
            ),
        ),
        iam.PolicyStatement(
            # IAM is global: one ARN per region's role (no region condition applies).
            sid="PassSatelliteRoles",
            actions=["iam:PassRole"],
            resources=[
                f"arn:{Aws.PARTITION}:iam::{Aws.ACCOUNT_ID}:role/"
                f"{instance_role_name(t.stack.stack_name, region)}"
                for region in t.satellite_regions
            ],
            conditions={"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
        ),
        iam.PolicyStatement(
            sid="ReadSatelliteParameters",
            actions=["ssm:GetParameter"],
            resources=[_any_region_arn(t, "ssm", "parameter", t.satellite_parameter.lstrip("/"))],
            conditions=in_satellite_regions(t),
        ),
    ]


def _launch(t: GrantTargets, function: str) -> GrantPolicy:
    launched = [t.ec2_arn(kind, "*") for kind in LAUNCHED_RESOURCE_TYPES]
    from_template: dict[str, dict[str, object]] = {
        "ArnLike": {"ec2:LaunchTemplate": t.launch_template_arn}
    }
    instance_conditions: dict[str, dict[str, object]] = dict(from_template)
    if t.allowed_instance_types:
        # ec2:InstanceType exists on the instance resource only: its own statement.
        instance_conditions["StringEquals"] = {"ec2:InstanceType": list(t.allowed_instance_types)}
    statements = [
        iam.PolicyStatement(
            sid="RunFromRespotLaunchTemplate",
            actions=["ec2:RunInstances"],
            resources=[
                t.launch_template_arn,
                *(arn for arn in launched if ":instance/" not in arn),
                *(t.ec2_arn("subnet", subnet) for subnet in t.subnet_ids),
                t.ec2_arn("security-group", t.security_group_id),
                t.ec2_arn("image", t.image_id, account=""),
            ],
            # Every resource of the call must come with respot's launch template.
            conditions=from_template,
        ),
        iam.PolicyStatement(
            sid="RunAllowedInstanceTypes",
            actions=["ec2:RunInstances"],
            resources=[t.ec2_arn("instance", "*")],
            conditions=instance_conditions,
        ),
        iam.PolicyStatement(
            sid="TagOnLaunchOnly",
            actions=["ec2:CreateTags"],
            resources=launched,
            conditions={"StringEquals": {"ec2:CreateAction": "RunInstances"}},
        ),
        iam.PolicyStatement(
            sid="PassInstanceRole",
            actions=["iam:PassRole"],
            resources=[t.instance_role.role_arn],
            conditions={"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
        ),
        iam.PolicyStatement(
            # The first spot launch of an account creates EC2's spot service-linked role.
            sid="CreateSpotServiceLinkedRole",
            actions=["iam:CreateServiceLinkedRole"],
            resources=[
                f"arn:{Aws.PARTITION}:iam::{Aws.ACCOUNT_ID}:role/aws-service-role/"
                "spot.amazonaws.com/AWSServiceRoleForEC2Spot"
            ],
            conditions={"StringEquals": {"iam:AWSServiceName": "spot.amazonaws.com"}},
        ),
    ]
    if t.satellite_regions:
        return GrantPolicy(
            statements, (_LAUNCHED,), _satellite_launch(t), (_SATELLITE, _SATELLITE_IMAGES)
        )
    return GrantPolicy(statements, (_LAUNCHED,))


def _terminate(t: GrantTargets, function: str) -> GrantPolicy:
    statements = [
        iam.PolicyStatement(
            sid="TerminateRespotInstances",
            actions=["ec2:TerminateInstances"],
            resources=[t.ec2_arn("instance", "*")],
            conditions={"StringEquals": {f"aws:ResourceTag/{MANAGED_TAG}": t.stack.stack_name}},
        )
    ]
    if not t.satellite_regions:
        return GrantPolicy(statements, (_LAUNCHED,))
    satellite = [
        iam.PolicyStatement(
            sid="TerminateSatelliteInstances",
            actions=["ec2:TerminateInstances"],
            resources=[_any_region_arn(t, "ec2", "instance")],
            conditions=in_satellite_regions(
                t, {"StringEquals": {f"aws:ResourceTag/{MANAGED_TAG}": t.stack.stack_name}}
            ),
        )
    ]
    return GrantPolicy(statements, (_LAUNCHED,), satellite, (_SATELLITE,))


def _describe(t: GrantTargets, function: str) -> GrantPolicy:
    statements = [
        iam.PolicyStatement(
            sid="DescribeInstancesAndSpotPrices",
            # DescribeInstanceTypes: the vCPUs of a type, named when a quota refuses a launch.
            actions=[
                "ec2:DescribeInstances",
                "ec2:DescribeSpotPriceHistory",
                "ec2:DescribeInstanceTypes",
            ],
            resources=["*"],  # these Describe calls support no resource-level permission
        ),
        iam.PolicyStatement(
            # After a quota error: the quota's current value, for the message that names it.
            sid="ReadEc2Quotas",
            actions=["servicequotas:GetServiceQuota"],
            resources=[
                t.stack.format_arn(
                    service="servicequotas",
                    resource="ec2",
                    resource_name="*",
                    arn_format=ArnFormat.SLASH_RESOURCE_NAME,
                )
            ],
        ),
    ]
    return GrantPolicy(statements, (_DESCRIBE, _QUOTAS))


_PRINCIPALS = (
    r"^Resource::arn:<AWS::Partition>:iam::<AWS::AccountId>:(role|user)/\*$",
    "The team's queue reads the respot:team tag of whoever submits a job (the researcher "
    "policy, not this stack, decides who may), so those roles and users cannot be named here: "
    "iam:ListRoleTags and iam:ListUserTags only, read-only, on this account's roles and users.",
)


def _principal_tags(t: GrantTargets, function: str) -> GrantPolicy:
    def arn(kind: str) -> str:
        return t.stack.format_arn(
            service="iam",
            region="",
            resource=kind,
            resource_name="*",
            arn_format=ArnFormat.SLASH_RESOURCE_NAME,
        )

    statements = [
        iam.PolicyStatement(
            sid="ReadSubmittersTeamTag",
            actions=["iam:ListRoleTags", "iam:ListUserTags"],
            resources=[arn("role"), arn("user")],
        )
    ]
    return GrantPolicy(statements, (_PRINCIPALS,))


def _send(sid: str, queue: sqs.IQueue) -> GrantPolicy:
    return GrantPolicy(
        [iam.PolicyStatement(sid=sid, actions=["sqs:SendMessage"], resources=[queue.queue_arn])]
    )


def _notify(t: GrantTargets, function: str) -> GrantPolicy:
    # A wiring without a notifications queue (as in some construct tests): nothing to send to.
    if t.notify_queue is None:
        return GrantPolicy([])
    return _send("SendNotifications", t.notify_queue)


def _sweep(t: GrantTargets, function: str) -> GrantPolicy:
    # A wiring without sweeps (as in some construct tests): nothing to send to.
    if t.sweep_queue is None:
        return GrantPolicy([])
    return _send("SendSweepNews", t.sweep_queue)


def _launch_retry(t: GrantTargets, function: str) -> GrantPolicy:
    # A wiring without the queue (as in some construct tests): nothing to send to.
    if t.launch_retry_queue is None:
        return GrantPolicy([])
    return _send("SendLaunchRetries", t.launch_retry_queue)


def _dead_letters(t: GrantTargets, function: str) -> GrantPolicy:
    queue = t.dead_letter_queues.get(function)
    if queue is None:
        raise GrantError(f"{function} has {Grant.DLQ_SEND} but no queue feeds it")
    return _send("SendPoisonToDeadLetters", queue)


def _slack(t: GrantTargets, function: str) -> GrantPolicy:
    parameter = t.slack_token.parameter_arn
    return GrantPolicy(
        [
            iam.PolicyStatement(
                sid="ReadSlackToken", actions=["ssm:GetParameter"], resources=[parameter]
            ),
            iam.PolicyStatement(
                sid="DecryptSlackToken",
                actions=["kms:Decrypt"],
                resources=[
                    t.stack.format_arn(
                        service="kms",
                        resource="key",
                        resource_name="*",
                        arn_format=ArnFormat.SLASH_RESOURCE_NAME,
                    )
                ],
                conditions={
                    "StringEquals": {
                        "kms:ViaService": f"ssm.{Aws.REGION}.amazonaws.com",
                        "kms:EncryptionContext:PARAMETER_ARN": parameter,
                    }
                },
            ),
        ],
        (_KMS_KEYS,),
    )


_BUILDERS: dict[str, Callable[[GrantTargets, str], GrantPolicy]] = {
    Grant.JOBS_TABLE_READ_WRITE: _table,
    Grant.BUCKET_JOBS_READ_WRITE: _bucket,
    Grant.EC2_LAUNCH: _launch,
    Grant.EC2_TERMINATE: _terminate,
    Grant.EC2_DESCRIBE: _describe,
    Grant.NOTIFY_SEND: _notify,
    Grant.DLQ_SEND: _dead_letters,
    Grant.SLACK_TOKEN_READ: _slack,
    Grant.SWEEP_SEND: _sweep,
    Grant.LAUNCH_RETRY_SEND: _launch_retry,
    Grant.PRINCIPAL_TAGS_READ: _principal_tags,
}


def policy_for(grant: str, *, function: str, targets: GrantTargets) -> GrantPolicy:
    """The IAM statements `grant` stands for, for the function called `function`."""
    try:
        builder = _BUILDERS[grant]
    except KeyError:
        raise GrantError(
            f"{function} carries grant {grant!r}, which infra/grants.py does not define"
        ) from None
    return builder(targets, function)


def known_grants() -> frozenset[str]:
    """Every grant value the stack can express."""
    return frozenset(_BUILDERS)
