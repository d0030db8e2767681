"""The AWS side of the local runtime: a moto server on 127.0.0.1 and respot's resources in it.

`provision` creates, from `infra.wiring.WIRING` (the same description the CDK stack reads),
the jobs topic, every queue with its dead-letter queue and topic subscription filter, the
job table with its `live` index, the bucket, the launch template, the Slack token secret
(empty, as the stack creates it) and one EventBridge rule per wiring rule. moto cannot
invoke Lambda targets, so each rule targets a queue of its own (`<prefix>-rule-<name>`)
that the dispatcher reads and hands to the rule's function: the rule's pattern is still
matched by the emulator, exactly as written in the wiring.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3

from infra.local.mappings import LocalEventSourceMappings
from infra.local.sandbox import FRAMEWORK_PYTHON, LocalImage
from infra.userdata import agent_environment, render_user_data
from infra.wiring import WIRING, Wiring
from respot.client.deployment import DEFAULT_PARAMETER, Deployment
from respot.control import config as cfg
from respot.core.placement import SubnetRef
from respot.identity.proofs import CANONICAL_DIGEST

REGION = "us-east-1"
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
LOCAL_AMI = "ami-12c6146b"  # an image moto knows


class MotoServer:
    """moto in server mode on 127.0.0.1 and a free port (never 0.0.0.0)."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        from infra.local.idempotency import honour_client_tokens

        honour_client_tokens()  # RunInstances answers a repeated ClientToken as AWS does
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.url = ""

    def start(self) -> str:
        """Start serving; returns the endpoint URL."""
        self._server.start()
        port = self._server._server.server_port  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    def stop(self) -> None:
        """Stop serving."""
        self._server.stop()


_SESSION: Any = None
_SESSION_LOCK = threading.Lock()


def session() -> Any:
    """The boto3 session with the emulator's fake credentials (one per process: clients made
    from one session share its loaded service models, which makes each new client cheap)."""
    global _SESSION  # noqa: PLW0603 - a process-wide cache
    with _SESSION_LOCK:
        if _SESSION is None:
            _SESSION = boto3.session.Session(region_name=REGION, **CREDENTIALS)
        return _SESSION


_SESSIONS: dict[str, Any] = {}


def session_for(credentials: dict[str, str]) -> Any:
    """A boto3 session signing with other credentials (an IAM role or user of the emulator)."""
    with _SESSION_LOCK:
        key = credentials["aws_access_key_id"]
        if key not in _SESSIONS:
            _SESSIONS[key] = boto3.session.Session(region_name=REGION, **credentials)
        return _SESSIONS[key]


def client_of(session_: Any, service: str, endpoint_url: str) -> Any:
    """A client of `session_` on the emulator (client creation from a shared session is locked)."""
    with _SESSION_LOCK:
        return session_.client(service, endpoint_url=endpoint_url)


def client(service: str, endpoint_url: str) -> Any:
    """A new client of the emulator (client creation from a shared session is locked)."""
    s = session()
    with _SESSION_LOCK:
        return s.client(service, endpoint_url=endpoint_url)


@dataclass
class LocalDeployment:
    """Names and URLs of everything `provision` created."""

    endpoint_url: str
    region: str
    topic_arn: str
    table_name: str
    bucket: str
    launch_template_id: str
    subnets: tuple[SubnetRef, ...]
    instance_types: tuple[str, ...]
    queue_urls: dict[str, str] = field(default_factory=dict)
    dlq_urls: dict[str, str] = field(default_factory=dict)
    rule_queue_urls: dict[str, str] = field(default_factory=dict)
    rule_names: dict[str, str] = field(default_factory=dict)
    # Each schedule's EventBridge rule (moto never fires it: the dispatcher ticks while the
    # rule is ENABLED) and each queue's event source mapping (infra/local/mappings.py).
    schedule_rule_names: dict[str, str] = field(default_factory=dict)
    mappings: LocalEventSourceMappings = field(default_factory=LocalEventSourceMappings)
    parameter_name: str = DEFAULT_PARAMETER
    # As on AWS, the stack only names the Slack token's SecureString parameter: it exists once
    # someone puts a token in (`LocalRuntime` does with `slack=True`, as docs/deploy.md says).
    slack_token_parameter: str = ""
    name: str = "respot"  # the deployment's name: the value of its instances' respot:managed tag
    log_group: str | None = None  # CloudWatch Logs group the agents ship training output to
    image: LocalImage | None = None  # the AMI stand-in instances boot from (None: no instances)
    allowed_instance_types: tuple[str, ...] = ()  # the stack's allowed_instance_types
    vpc_id: str | None = None  # the VPC of `subnets`
    ami_id: str = LOCAL_AMI
    fis_template_id: str | None = None  # the self-test's experiment (infra/local/fis.py acts)
    queue: dict[str, Any] = field(default_factory=dict)  # the stack's `queue` setting

    def doctor_facts(self) -> dict[str, Any]:
        """What `respot doctor --local` checks the emulator for (the deploy settings' part)."""
        return {
            "instance_types": list(self.instance_types),
            "ami_id": self.ami_id,
            "vpc_id": self.vpc_id,
            "subnets": {s.subnet_id: s.availability_zone for s in self.subnets},
            "slack_token_parameter": self.slack_token_parameter,
        }

    def client(self, service: str) -> Any:
        """A new boto3 client for the emulator."""
        return client(service, self.endpoint_url)

    def deployment(self) -> Deployment:
        """What the SDK needs, as the stack would publish it."""
        return Deployment(
            topic_arn=self.topic_arn,
            table_name=self.table_name,
            bucket=self.bucket,
            region=self.region,
            stack="local",
            agent_queue_url=self.queue_urls["agent-events"],
            endpoint_url=self.endpoint_url,
            log_group=self.log_group,
            instance_types=self.allowed_instance_types or None,
            fis_template_id=self.fis_template_id,
            proof_digest=CANONICAL_DIGEST,
        )

    def function_env(self, function: str, wiring: Wiring = WIRING) -> dict[str, str]:
        """The environment the stack gives `function` (see respot.control.config)."""
        dlq = next((self.dlq_urls[q.name] for q in wiring.queues if q.function == function), "")
        return {
            cfg.ENV_TABLE: self.table_name,
            cfg.ENV_BUCKET: self.bucket,
            cfg.ENV_LAUNCH_TEMPLATE_ID: self.launch_template_id,
            cfg.ENV_LAUNCH_TEMPLATE_VERSION: "$Latest",
            cfg.ENV_SUBNETS: json.dumps(
                [
                    {"subnet_id": s.subnet_id, "availability_zone": s.availability_zone}
                    for s in self.subnets
                ]
            ),
            cfg.ENV_INSTANCE_TYPES: ",".join(self.instance_types),
            cfg.ENV_AGENT_QUEUE_URL: self.queue_urls["agent-events"],
            cfg.ENV_NOTIFY_QUEUE_URL: self.queue_urls.get("notifications", ""),
            cfg.ENV_SWEEP_QUEUE_URL: self.queue_urls.get("sweep-events", ""),
            cfg.ENV_LAUNCH_RETRY_QUEUE_URL: self.queue_urls.get("launch-retries", ""),
            cfg.ENV_DLQ_URL: dlq,
            cfg.ENV_SLACK_TOKEN_PARAMETER: self.slack_token_parameter,
            cfg.ENV_DEPLOYMENT_NAME: self.name,
            cfg.ENV_ALLOWED_INSTANCE_TYPES: ",".join(self.allowed_instance_types),
            **({cfg.ENV_QUEUE: json.dumps(self.queue)} if self.queue else {}),
        }


def _queue_arn(sqs: Any, url: str) -> str:
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]
    return str(attrs["QueueArn"])


def _prepare_account(ec2: Any, iam: Any, subnets: tuple[SubnetRef, ...]) -> str:
    """Make the emulated account what docs/deploy.md asks of a real one; returns the VPC id.

    moto's default VPC has no internet gateway, and its account no EC2 Spot service-linked
    role. A real account has the role after its first spot launch, and the stack's own VPC
    routes its public subnets through an internet gateway: the emulator gets both, so that
    `respot doctor --local` checks what it would check on AWS. (moto keeps one state per
    process, so both may already exist.)
    """
    described = ec2.describe_subnets(SubnetIds=[s.subnet_id for s in subnets])["Subnets"]
    vpc_id = str(described[0]["VpcId"])
    attached = ec2.describe_internet_gateways(
        Filters=[{"Name": "attachment.vpc-id", "Values": [vpc_id]}]
    )["InternetGateways"]
    if attached:
        igw = attached[0]["InternetGatewayId"]
    else:
        igw = ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
        ec2.attach_internet_gateway(InternetGatewayId=igw, VpcId=vpc_id)
    for table in ec2.describe_route_tables(Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])[
        "RouteTables"
    ]:
        if not any(r.get("DestinationCidrBlock") == "0.0.0.0/0" for r in table["Routes"]):
            ec2.create_route(
                RouteTableId=table["RouteTableId"], DestinationCidrBlock="0.0.0.0/0", GatewayId=igw
            )
    with contextlib.suppress(iam.exceptions.EntityAlreadyExistsException):
        iam.create_role(
            RoleName="AWSServiceRoleForEC2Spot",
            Path="/aws-service-role/spot.amazonaws.com/",
            AssumeRolePolicyDocument=service_trust("spot.amazonaws.com"),
        )
    return vpc_id


def launch_template_data(user_data: dict[str, Any]) -> dict[str, Any]:
    """What the stack's launch template carries (IMDSv2 only, tags in IMDS), home or satellite."""
    return {
        **user_data,
        "ImageId": LOCAL_AMI,
        "MetadataOptions": {
            "HttpTokens": "required",
            "HttpPutResponseHopLimit": 2,
            "InstanceMetadataTags": "enabled",
        },
        "InstanceInitiatedShutdownBehavior": "terminate",
    }


def service_trust(service: str, *, aws: str | None = None) -> str:
    """A role trust policy letting an AWS service (and, if given, an AWS principal) assume it."""
    principal: dict[str, str] = {"Service": service}
    if aws is not None:
        principal["AWS"] = aws
    statement = {"Effect": "Allow", "Principal": principal, "Action": "sts:AssumeRole"}
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]})


def _selftest_template(iam: Any, fis: Any, prefix: str) -> str:
    """The self-test's FIS role and experiment template, as the stack creates them."""
    from respot.selftest.experiment import experiment_template

    role_arn = iam.create_role(
        RoleName=f"{prefix}-fis", AssumeRolePolicyDocument=service_trust("fis.amazonaws.com")
    )["Role"]["Arn"]
    template = fis.create_experiment_template(
        clientToken=f"{prefix}-selftest", **experiment_template(role_arn, prefix)
    )
    return str(template["experimentTemplate"]["id"])


def provision(
    endpoint_url: str,
    *,
    wiring: Wiring = WIRING,
    prefix: str = "respot",
    instance_types: tuple[str, ...] = ("g5.xlarge", "g4dn.xlarge"),
    availability_zones: int = 2,
    visibility_timeout_seconds: int | None = None,
    image_dir: Path | None = None,
    agent_asset: tuple[str, str] | None = None,
    allowed_instance_types: tuple[str, ...] | None = None,
    slack_token_parameter: str | None = None,
) -> LocalDeployment:
    """Create respot's resources in the emulator from the wiring.

    `slack_token_parameter` is the name the functions read the Slack token from (default
    `/<prefix>/slack-token`, so that deployments sharing one emulator do not share a token).

    With `image_dir`, the launch template carries the stack's user data, rendered by the same
    function (`infra.userdata`) for the AMI stand-in built there (`infra.local.sandbox`).
    """
    sqs, sns, events, ddb = (client(n, endpoint_url) for n in ("sqs", "sns", "events", "dynamodb"))
    s3, ec2, ssm, logs = (client(n, endpoint_url) for n in ("s3", "ec2", "ssm", "logs"))

    topic_arn = sns.create_topic(Name=f"{prefix}-{wiring.topic_name}")["TopicArn"]
    queue_urls: dict[str, str] = {}
    dlq_urls: dict[str, str] = {}
    for q in wiring.queues:
        # A FIFO queue's name ends in .fifo and its dead-letter queue must be FIFO too. The
        # senders give deduplication ids, so content-based deduplication stays off.
        suffix = ".fifo" if q.fifo else ""
        fifo = {"FifoQueue": "true", "ContentBasedDeduplication": "false"} if q.fifo else {}
        dlq_url = sqs.create_queue(QueueName=f"{prefix}-{q.name}-dlq{suffix}", Attributes=fifo)[
            "QueueUrl"
        ]
        visibility = visibility_timeout_seconds or q.visibility_timeout_seconds
        url = sqs.create_queue(
            QueueName=f"{prefix}-{q.name}{suffix}",
            Attributes={
                **fifo,
                "VisibilityTimeout": str(visibility),
                "RedrivePolicy": json.dumps(
                    {
                        "deadLetterTargetArn": _queue_arn(sqs, dlq_url),
                        "maxReceiveCount": str(q.max_receive_count),
                    }
                ),
            },
        )["QueueUrl"]
        queue_urls[q.name], dlq_urls[q.name] = url, dlq_url
        if q.topic_filter is not None:
            sns.subscribe(
                TopicArn=topic_arn,
                Protocol="sqs",
                Endpoint=_queue_arn(sqs, url),
                Attributes={"FilterPolicy": json.dumps(q.topic_filter)},
            )

    rule_queue_urls: dict[str, str] = {}
    rule_names: dict[str, str] = {}
    for rule in wiring.rules:
        name = f"{prefix}-{rule.name}"
        url = sqs.create_queue(QueueName=f"{prefix}-rule-{rule.name}")["QueueUrl"]
        events.put_rule(Name=name, EventPattern=json.dumps(rule.pattern), State="ENABLED")
        events.put_targets(Rule=name, Targets=[{"Id": "handler", "Arn": _queue_arn(sqs, url)}])
        rule_queue_urls[rule.name] = url
        rule_names[rule.name] = name

    # As the stack does: a schedule rule per schedule, a mapping per queue; those that only
    # live jobs need (idle_off) are created disabled, for the activity switch to turn on.
    schedule_rule_names: dict[str, str] = {}
    for schedule in wiring.schedules:
        name = f"{prefix}-schedule-{schedule.name}"
        events.put_rule(
            Name=name,
            ScheduleExpression=f"rate({schedule.every_seconds // 60} minute"
            f"{'s' if schedule.every_seconds >= 120 else ''})",
            State="DISABLED" if schedule.idle_off else "ENABLED",
        )
        schedule_rule_names[schedule.name] = name
    mappings = LocalEventSourceMappings()
    for q in wiring.queues:
        mappings.create(q.name, q.function, enabled=not q.idle_off)

    table = f"{prefix}-jobs"
    ddb.create_table(
        TableName=table,
        KeySchema=[
            {"AttributeName": wiring.table_partition_key, "KeyType": "HASH"},
            {"AttributeName": wiring.table_sort_key, "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": n, "AttributeType": "S"}
            for n in (wiring.table_partition_key, wiring.table_sort_key, "live", "updated_at")
        ],
        BillingMode="PAY_PER_REQUEST",
        GlobalSecondaryIndexes=[
            {
                "IndexName": "live",
                "KeySchema": [
                    {"AttributeName": "live", "KeyType": "HASH"},
                    {"AttributeName": "updated_at", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }
        ],
    )
    # The stack's group is /respot/jobs; moto keeps one state per process, so prefix it here.
    log_group = f"/{prefix}/jobs"
    logs.create_log_group(logGroupName=log_group)
    bucket = f"{prefix}-artifacts"
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})

    image: LocalImage | None = None
    user_data: dict[str, str] = {}
    if image_dir is not None:
        image = LocalImage.build(image_dir, s3, *(agent_asset or (bucket, None)))
        text = render_user_data(
            agent_environment(
                bucket=bucket,
                agent_queue_url=queue_urls["agent-events"],
                region=REGION,
                log_group=log_group,
                asset_bucket=image.asset_bucket,
                asset_key=image.asset_key,
                framework_python=FRAMEWORK_PYTHON,
            )
        )
        user_data = {"UserData": base64.b64encode(text.encode()).decode()}
    template_id = ec2.create_launch_template(
        LaunchTemplateName=f"{prefix}-instances",
        LaunchTemplateData=launch_template_data(user_data),
    )["LaunchTemplate"]["LaunchTemplateId"]
    subnets_seen: dict[str, SubnetRef] = {}
    for subnet in sorted(ec2.describe_subnets()["Subnets"], key=lambda x: x["AvailabilityZone"]):
        subnets_seen.setdefault(
            subnet["AvailabilityZone"], SubnetRef(subnet["SubnetId"], subnet["AvailabilityZone"])
        )
    subnets = tuple(list(subnets_seen.values())[:availability_zones])
    vpc_id = _prepare_account(ec2, client("iam", endpoint_url), subnets)

    local = LocalDeployment(
        endpoint_url=endpoint_url,
        region=REGION,
        topic_arn=topic_arn,
        table_name=table,
        bucket=bucket,
        launch_template_id=template_id,
        subnets=subnets,
        instance_types=instance_types,
        queue_urls=queue_urls,
        dlq_urls=dlq_urls,
        rule_queue_urls=rule_queue_urls,
        rule_names=rule_names,
        schedule_rule_names=schedule_rule_names,
        mappings=mappings,
        slack_token_parameter=slack_token_parameter or f"/{prefix}/slack-token",
        name=prefix,
        log_group=log_group,
        image=image,
        allowed_instance_types=(
            instance_types if allowed_instance_types is None else allowed_instance_types
        ),
        vpc_id=vpc_id,
        fis_template_id=_selftest_template(
            client("iam", endpoint_url), client("fis", endpoint_url), prefix
        ),
    )
    ssm.put_parameter(
        Name=local.parameter_name,
        Value=local.deployment().to_json(),
        Type="String",
        Overwrite=True,
    )
    return local
