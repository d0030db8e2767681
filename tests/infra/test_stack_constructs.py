"""Each construct alone in a bare Stack(): what it creates and how it is configured."""

from __future__ import annotations

import dataclasses
import json

import pytest
from aws_cdk import Duration, Stack, assertions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk.assertions import Match

from infra.constructs import (
    ControlFunctions,
    FixedImage,
    Fleet,
    JobStore,
    Messaging,
    Network,
    ResearcherAccess,
)
from infra.constructs.functions import WiringError
from infra.constructs.naming import pascal_id
from infra.iam_eval import allowed
from infra.wiring import WIRING, Queue, Schedule

# ---- JobStore ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def store_template(new_stack) -> assertions.Template:
    stack = new_stack()
    JobStore(stack, "Store")
    return assertions.Template.from_stack(stack)


def test_table_keys_billing_recovery_encryption_and_live_index(store_template):
    store_template.resource_count_is("AWS::DynamoDB::Table", 1)
    store_template.has_resource_properties(
        "AWS::DynamoDB::Table",
        {
            "KeySchema": [
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            "BillingMode": "PAY_PER_REQUEST",
            "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
            "SSESpecification": {"SSEEnabled": True},
            "DeletionProtectionEnabled": True,
            "GlobalSecondaryIndexes": [
                {
                    "IndexName": "live",
                    "KeySchema": [
                        {"AttributeName": "live", "KeyType": "HASH"},
                        {"AttributeName": "updated_at", "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "KEYS_ONLY"},
                }
            ],
        },
    )


def test_table_is_kept_when_the_stack_goes(store_template):
    store_template.has_resource(
        "AWS::DynamoDB::Table", {"DeletionPolicy": "Retain", "UpdateReplacePolicy": "Retain"}
    )


def test_jobs_bucket_is_private_versioned_encrypted_logged_and_expires_old_versions(
    store_template,
):
    store_template.resource_count_is("AWS::S3::Bucket", 2)  # jobs + access logs
    store_template.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "VersioningConfiguration": {"Status": "Enabled"},
            "BucketEncryption": {
                "ServerSideEncryptionConfiguration": [
                    {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}
                ]
            },
            "PublicAccessBlockConfiguration": {
                "BlockPublicAcls": True,
                "BlockPublicPolicy": True,
                "IgnorePublicAcls": True,
                "RestrictPublicBuckets": True,
            },
            "LoggingConfiguration": {"DestinationBucketName": Match.any_value()},
            "LifecycleConfiguration": {
                "Rules": [
                    Match.object_like(
                        {"NoncurrentVersionExpiration": {"NoncurrentDays": 30}, "Status": "Enabled"}
                    )
                ]
            },
        },
    )


def test_both_buckets_refuse_plain_http(store_template):
    policies = store_template.find_resources("AWS::S3::BucketPolicy")
    assert len(policies) == 2
    for policy in policies.values():
        denies = [
            s
            for s in policy["Properties"]["PolicyDocument"]["Statement"]
            if s["Effect"] == "Deny" and s["Action"] == "s3:*"
        ]
        conditions = [s["Condition"] for s in denies]
        assert {"Bool": {"aws:SecureTransport": "false"}} in conditions
        assert {"NumericLessThan": {"s3:TlsVersion": 1.2}} in conditions


def test_an_index_without_known_keys_is_refused(new_stack):
    with pytest.raises(ValueError, match="byowner"):
        JobStore(
            new_stack(), "Store", wiring=dataclasses.replace(WIRING, table_indexes=("byowner",))
        )


# ---- Messaging -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def messaging_template(new_stack) -> assertions.Template:
    stack = new_stack()
    Messaging(stack, "Messaging")
    return assertions.Template.from_stack(stack)


def test_topic_is_encrypted_and_tls_only(messaging_template):
    messaging_template.resource_count_is("AWS::SNS::Topic", 1)
    topic = next(iter(messaging_template.find_resources("AWS::SNS::Topic").values()))
    assert "alias/aws/sns" in json.dumps(topic["Properties"]["KmsMasterKeyId"])
    messaging_template.has_resource_properties(
        "AWS::SNS::TopicPolicy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Effect": "Deny",
                                "Action": "sns:Publish",
                                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                            }
                        )
                    ]
                )
            }
        },
    )


def test_a_queue_and_a_dead_letter_queue_per_wiring_queue_plus_event_dead_letters(
    messaging_template,
):
    messaging_template.resource_count_is("AWS::SQS::Queue", 2 * len(WIRING.queues) + 1)
    for queue in messaging_template.find_resources("AWS::SQS::Queue").values():
        assert queue["Properties"]["SqsManagedSseEnabled"] is True
    # every queue has a TLS-only policy
    policies = messaging_template.find_resources("AWS::SQS::QueuePolicy")
    covered = sum(len(p["Properties"]["Queues"]) for p in policies.values())
    assert covered == 2 * len(WIRING.queues) + 1
    for policy in policies.values():
        assert any(
            s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
            for s in policy["Properties"]["PolicyDocument"]["Statement"]
        )


def test_subscriptions_deliver_the_envelope(messaging_template):
    fed_by_topic = [q for q in WIRING.queues if q.topic_filter is not None]
    messaging_template.resource_count_is("AWS::SNS::Subscription", len(fed_by_topic))
    for subscription in messaging_template.find_resources("AWS::SNS::Subscription").values():
        assert subscription["Properties"]["RawMessageDelivery"] is False


def test_only_the_topic_sends_to_a_queue_it_feeds(messaging_template):
    """The commands function trusts the SNS envelope (MessageId, Timestamp): in one account an
    identity policy's sqs:SendMessage would reach the queue without its policy's Allow, so the
    queue policy denies every sender but the topic."""
    queue_arn = "arn:aws:sqs:us-east-1:111122223333:commands"
    topic_arn = "arn:aws:sns:us-east-1:111122223333:jobs"

    def resolved(value):
        if isinstance(value, dict):
            if "Ref" in value and str(value["Ref"]).startswith("MessagingTopic"):
                return topic_arn
            if "Fn::GetAtt" in value:
                return queue_arn
            return {k: resolved(v) for k, v in value.items()}
        if isinstance(value, list):
            return [resolved(v) for v in value]
        return value

    fed = [pascal_id(q.name) for q in WIRING.queues if q.topic_filter is not None]
    assert fed
    policies = messaging_template.find_resources("AWS::SQS::QueuePolicy")
    for name in fed:
        (policy,) = [
            p
            for p in policies.values()
            if p["Properties"]["Queues"][0]["Ref"].startswith(f"Messaging{name}Queue")
        ]
        queue_policy = resolved(policy["Properties"]["PolicyDocument"])
        anyone = {"Statement": [{"Effect": "Allow", "Action": "sqs:*", "Resource": "*"}]}
        assert not allowed([anyone, queue_policy], "sqs:SendMessage", queue_arn)
        assert allowed(
            [queue_policy], "sqs:SendMessage", queue_arn, {"aws:SourceArn": topic_arn}
        )  # the topic's delivery
        other_topic = topic_arn + "-other"
        assert not allowed(
            [anyone, queue_policy], "sqs:SendMessage", queue_arn, {"aws:SourceArn": other_topic}
        )


def test_one_alarm_per_dead_letter_queue(messaging_template):
    messaging_template.resource_count_is("AWS::CloudWatch::Alarm", len(WIRING.queues) + 1)
    messaging_template.all_resources_properties(
        "AWS::CloudWatch::Alarm",
        {
            "MetricName": "ApproximateNumberOfMessagesVisible",
            "Namespace": "AWS/SQS",
            "Threshold": 0,
            "ComparisonOperator": "GreaterThanThreshold",
            "TreatMissingData": "notBreaching",
        },
    )


def test_alarms_notify_the_alarm_topic_when_given(new_stack):
    stack = new_stack()
    alarm_topic = sns.Topic.from_topic_arn(
        stack, "Alarms", "arn:aws:sns:us-east-1:123456789012:ops"
    )
    Messaging(stack, "Messaging", alarm_topic=alarm_topic)
    assertions.Template.from_stack(stack).all_resources_properties(
        "AWS::CloudWatch::Alarm", {"AlarmActions": ["arn:aws:sns:us-east-1:123456789012:ops"]}
    )


def test_a_queue_added_to_the_wiring_gets_its_dead_letters_and_alarm(new_stack):
    # GIVEN a queue the wiring does not have yet
    wiring = dataclasses.replace(
        WIRING, queues=(*WIRING.queues, Queue("audit", "notify", max_receive_count=3))
    )
    stack = new_stack()
    messaging = Messaging(stack, "Messaging", wiring=wiring)
    template = assertions.Template.from_stack(stack)
    # THEN it is built like the others
    assert "notifications" in messaging.queues
    template.resource_count_is("AWS::SQS::Queue", 2 * len(wiring.queues) + 1)
    template.resource_count_is("AWS::CloudWatch::Alarm", len(wiring.queues) + 1)
    template.has_resource_properties(
        "AWS::SQS::Queue", {"RedrivePolicy": Match.object_like({"maxReceiveCount": 3})}
    )


def test_a_fifo_queue_gets_a_fifo_dead_letter_queue(new_stack):
    # GIVEN a wiring whose FIFO queues are the notifications and the sweep-events queues
    stack = new_stack()
    messaging = Messaging(stack, "Messaging", wiring=WIRING)
    template = assertions.Template.from_stack(stack)
    fifo = [q.name for q in WIRING.queues if q.fifo]
    assert fifo == ["notifications", "sweep-events"]
    assert all(name in messaging.queues for name in fifo)
    # THEN they and their dead-letter queues are FIFO, without content-based deduplication
    queues = template.find_resources("AWS::SQS::Queue", {"Properties": {"FifoQueue": True}})
    assert len(queues) == 4
    for queue in queues.values():
        assert queue["Properties"]["ContentBasedDeduplication"] is False


def test_a_fifo_queue_cannot_be_fed_by_the_standard_topic(new_stack):
    bad = Queue("fifo-jobs", "commands", topic_filter={"command": ["submit"]}, fifo=True)
    wiring = dataclasses.replace(WIRING, queues=(*WIRING.queues, bad))
    with pytest.raises(ValueError, match="not FIFO"):
        Messaging(new_stack(), "Messaging", wiring=wiring)


def test_the_wiring_needs_exactly_one_agent_queue(new_stack):
    wiring = dataclasses.replace(
        WIRING, queues=tuple(q for q in WIRING.queues if not q.fed_by_agents)
    )
    with pytest.raises(ValueError, match="exactly one queue fed by agents"):
        Messaging(new_stack(), "Messaging", wiring=wiring)


# ---- Network -------------------------------------------------------------------------------


def test_own_vpc_has_public_subnets_no_nat_an_s3_endpoint_and_flow_logs(new_stack):
    stack = new_stack()
    log_bucket = s3.Bucket(stack, "Logs")
    network = Network(stack, "Network", flow_log_bucket=log_bucket)
    template = assertions.Template.from_stack(stack)
    template.resource_count_is("AWS::EC2::NatGateway", 0)
    template.all_resources_properties("AWS::EC2::Subnet", {"MapPublicIpOnLaunch": True})
    template.has_resource_properties(
        "AWS::EC2::VPCEndpoint",
        {"VpcEndpointType": "Gateway", "ServiceName": Match.any_value()},
    )
    endpoint = next(iter(template.find_resources("AWS::EC2::VPCEndpoint").values()))
    assert ".s3" in json.dumps(endpoint["Properties"]["ServiceName"])
    template.has_resource_properties(
        "AWS::EC2::FlowLog", {"LogDestinationType": "s3", "TrafficType": "ALL"}
    )
    template.resource_count_is("AWS::EC2::Subnet", len(network.placements))


def test_existing_subnets_are_used_as_given(new_stack):
    stack = new_stack()
    network = Network(
        stack,
        "Network",
        vpc_id="vpc-0123456789abcdef0",
        subnets={
            "subnet-0bbbbbbbbbbbbbbbb": "us-east-1b",
            "subnet-0aaaaaaaaaaaaaaaa": "us-east-1a",
        },
    )
    template = assertions.Template.from_stack(stack)
    assert template.to_json().get("Resources", {}) == {}
    assert [(p.subnet_id, p.availability_zone) for p in network.placements] == [
        ("subnet-0aaaaaaaaaaaaaaaa", "us-east-1a"),
        ("subnet-0bbbbbbbbbbbbbbbb", "us-east-1b"),
    ]


# ---- Fleet ---------------------------------------------------------------------------------


def _fleet(stack, **kwargs: object) -> tuple[Fleet, assertions.Template]:
    vpc = ec2.Vpc(stack, "Vpc", nat_gateways=0, max_azs=1)
    fleet = Fleet(
        stack,
        "Fleet",
        vpc=vpc,
        bucket=s3.Bucket(stack, "Bucket"),
        agent_queue=sqs.Queue(stack, "AgentEvents"),
        machine_image=kwargs.pop("machine_image", FixedImage("ami-0123456789abcdef0")),  # type: ignore[arg-type]
        **kwargs,  # type: ignore[arg-type]
    )
    return fleet, assertions.Template.from_stack(stack)


@pytest.fixture(scope="module")
def fleet(new_stack) -> tuple[Fleet, assertions.Template]:
    return _fleet(new_stack(), data_buckets=("arn:aws:s3:::datasets/imagenet", "raw-data"))


def test_launch_template_requires_imdsv2_exposes_tags_has_no_key_and_terminates_on_shutdown(fleet):
    _, template = fleet
    template.resource_count_is("AWS::EC2::LaunchTemplate", 1)
    template.has_resource_properties(
        "AWS::EC2::LaunchTemplate",
        {
            "LaunchTemplateData": Match.object_like(
                {
                    "ImageId": "ami-0123456789abcdef0",
                    "MetadataOptions": {
                        "HttpEndpoint": "enabled",
                        "HttpTokens": "required",
                        "HttpPutResponseHopLimit": 2,
                        "InstanceMetadataTags": "enabled",
                    },
                    "InstanceInitiatedShutdownBehavior": "terminate",
                    "Monitoring": {"Enabled": False},
                    "BlockDeviceMappings": [
                        {
                            "DeviceName": "/dev/sda1",
                            "Ebs": {
                                "VolumeSize": 200,
                                "VolumeType": "gp3",
                                "Encrypted": True,
                                "DeleteOnTermination": True,
                            },
                        }
                    ],
                }
            )
        },
    )
    data = next(iter(template.find_resources("AWS::EC2::LaunchTemplate").values()))["Properties"][
        "LaunchTemplateData"
    ]
    assert "KeyName" not in data
    assert "NetworkInterfaces" not in data  # the subnet is chosen per launch


def test_launched_instances_carry_the_managed_tag(fleet):
    built, template = fleet
    data = next(iter(template.find_resources("AWS::EC2::LaunchTemplate").values()))["Properties"][
        "LaunchTemplateData"
    ]
    tagged = {
        spec["ResourceType"]: {t["Key"]: t["Value"] for t in spec["Tags"]}
        for spec in data["TagSpecifications"]
    }
    # The tag's value is the stack's name: cleanup and terminate rights are per deployment.
    stack_name = Stack.of(built).stack_name
    assert tagged["instance"]["respot:managed"] == stack_name
    assert tagged["volume"]["respot:managed"] == stack_name


def test_security_group_admits_nothing_and_sends_only_web_traffic(fleet):
    _, template = fleet
    group = next(iter(template.find_resources("AWS::EC2::SecurityGroup").values()))
    assert "SecurityGroupIngress" not in group["Properties"]
    template.resource_count_is("AWS::EC2::SecurityGroupIngress", 0)
    ports = {(r["FromPort"], r["ToPort"]) for r in group["Properties"]["SecurityGroupEgress"]}
    assert ports == {(443, 443), (80, 80)}


def _instance_statements(template: assertions.Template) -> list[dict]:
    policies = template.find_resources("AWS::IAM::Policy")
    (policy,) = [p for name, p in policies.items() if "InstancePolicy" in name]
    return policy["Properties"]["PolicyDocument"]["Statement"]


def test_instance_role_writes_only_the_agents_prefixes(fleet):
    _, template = fleet
    by_sid = {s.get("Sid"): s for s in _instance_statements(template)}
    writes = json.dumps(by_sid["WriteJobResults"]["Resource"])
    for kind in ("checkpoints", "handoff", "outputs", "logs", "tensorboard"):
        assert f"/jobs/*/{kind}/*" in writes
    assert '/jobs/*/outputs.json"' in writes  # the outputs' manifest, one object
    assert writes.count("/jobs/*/") == 6
    assert by_sid["ReadJobObjects"]["Action"] == "s3:GetObject"
    assert by_sid["SendAgentEvents"]["Action"] == "sqs:SendMessage"
    # unconditioned, so that HeadObject on a blob not stored yet answers 404, not 403
    assert "Condition" not in by_sid["ListJobObjects"]
    assert by_sid["ListJobObjects"]["Resource"]["Fn::GetAtt"][1] == "Arn"  # the bucket itself
    assert set(by_sid["WriteJobLogs"]["Action"]) == {"logs:CreateLogStream", "logs:PutLogEvents"}


def test_instance_role_reads_the_named_data_buckets(fleet):
    _, template = fleet
    statements = json.dumps(_instance_statements(template))
    assert "arn:aws:s3:::datasets/imagenet/*" in statements
    assert '{"s3:prefix": ["imagenet/*"]}' in statements
    assert ":s3:::raw-data/*" in statements


def test_instance_profile_holds_the_instance_role(fleet):
    _, template = fleet
    template.resource_count_is("AWS::IAM::InstanceProfile", 1)
    template.has_resource_properties(
        "AWS::IAM::Role",
        {
            "AssumeRolePolicyDocument": {
                "Statement": [Match.object_like({"Principal": {"Service": "ec2.amazonaws.com"}})]
            }
        },
    )


def test_user_data_writes_the_environment_then_the_fixed_script(fleet):
    instance_fleet, _ = fleet
    rendered = instance_fleet.user_data.render()
    assert "<<'RESPOT_ENV'" in rendered  # a quoted heredoc: nothing is expanded
    for name in ("RESPOT_BUCKET", "RESPOT_AGENT_QUEUE_URL", "AWS_REGION", "RESPOT_SHUTDOWN"):
        assert f"\n{name}=" in rendered
    assert "RESPOT_SHUTDOWN=poweroff" in rendered
    assert "-m respot.agent" in rendered
    script = rendered.split("\nRESPOT_ENV\n", 1)[1]
    assert "${Token[" not in script  # no deployment value inside the script itself


def test_ssm_parameter_image_is_the_default_ami(new_stack):
    _, template = _fleet(
        new_stack(),
        machine_image=ec2.MachineImage.from_ssm_parameter(
            "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-24.04/latest/ami-id"
        ),
    )
    parameters = template.to_json()["Parameters"]
    assert any(
        p.get("Default", "").startswith("/aws/service/deeplearning/") for p in parameters.values()
    )


# ---- ControlFunctions ----------------------------------------------------------------------


def _functions(stack, wiring=WIRING) -> tuple[ControlFunctions, assertions.Template]:
    queues = {q.name: sqs.Queue(stack, f"Q{i}") for i, q in enumerate(wiring.queues)}
    functions = ControlFunctions(
        stack,
        "Functions",
        wiring=wiring,
        code=lambda_.Code.from_inline("def handler(event, context):\n    return None\n"),
        environment={"RESPOT_TABLE": "jobs"},
        queues=queues,
        event_dead_letters=sqs.Queue(stack, "EventDeadLetters"),
    )
    return functions, assertions.Template.from_stack(stack)


@pytest.fixture(scope="module")
def functions(new_stack) -> tuple[ControlFunctions, assertions.Template]:
    return _functions(new_stack())


def test_one_function_per_wiring_entry_with_its_handler_and_limits(functions):
    _, template = functions
    template.resource_count_is("AWS::Lambda::Function", len(WIRING.functions))
    for spec in WIRING.functions:
        template.has_resource_properties(
            "AWS::Lambda::Function",
            {
                "Handler": spec.handler,
                "Runtime": "python3.12",
                "Architectures": ["arm64"],
                "MemorySize": spec.memory_mb,
                "Timeout": spec.timeout_seconds,
                "LoggingConfig": {"LogGroup": Match.any_value()},
            },
        )
    template.resource_count_is("AWS::Logs::LogGroup", len(WIRING.functions))
    template.all_resources_properties("AWS::Logs::LogGroup", {"RetentionInDays": 30})


def test_functions_have_their_own_roles_without_managed_policies(functions):
    _, template = functions
    for role in template.find_resources("AWS::IAM::Role").values():
        assert "ManagedPolicyArns" not in role["Properties"]


def test_queues_feed_functions_with_partial_batch_failures(functions):
    _, template = functions
    template.resource_count_is("AWS::Lambda::EventSourceMapping", len(WIRING.queues))
    template.all_resources_properties(
        "AWS::Lambda::EventSourceMapping", {"FunctionResponseTypes": ["ReportBatchItemFailures"]}
    )
    template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping", {"MaximumBatchingWindowInSeconds": 1}
    )


def test_rules_and_schedules_retry_then_dead_letter(functions):
    _, template = functions
    rules = template.find_resources("AWS::Events::Rule")
    assert len(rules) == len(WIRING.rules) + len(WIRING.schedules)
    for rule in rules.values():
        (target,) = rule["Properties"]["Targets"]
        assert target["DeadLetterConfig"]["Arn"]
        assert target["RetryPolicy"] == {
            "MaximumRetryAttempts": 10,
            "MaximumEventAgeInSeconds": 3600,
        }
    template.has_resource_properties("AWS::Events::Rule", {"ScheduleExpression": "rate(1 minute)"})
    invoked_async = {r.function for r in WIRING.rules} | {s.function for s in WIRING.schedules}
    template.resource_count_is("AWS::Lambda::EventInvokeConfig", len(invoked_async))
    template.all_resources_properties(
        "AWS::Lambda::EventInvokeConfig",
        {"DestinationConfig": {"OnFailure": {"Destination": Match.any_value()}}},
    )


def test_a_visibility_timeout_shorter_than_the_function_is_refused(new_stack):
    wiring = dataclasses.replace(
        WIRING,
        queues=tuple(
            dataclasses.replace(q, visibility_timeout_seconds=30) if q.name == "commands" else q
            for q in WIRING.queues
        ),
    )
    with pytest.raises(WiringError, match="visibility timeout"):
        _functions(new_stack(), wiring)


def test_a_schedule_that_is_not_whole_minutes_is_refused(new_stack):
    wiring = dataclasses.replace(WIRING, schedules=(Schedule("reconcile", "reconcile", 90),))
    with pytest.raises(WiringError, match="whole minutes"):
        _functions(new_stack(), wiring)


def test_a_queue_for_a_missing_function_is_refused(new_stack):
    wiring = dataclasses.replace(WIRING, queues=(*WIRING.queues, Queue("audit", "auditor")))
    with pytest.raises(WiringError, match="'auditor'"):
        _functions(new_stack(), wiring)


# ---- ResearcherAccess ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def researchers(new_stack) -> assertions.Template:
    stack = new_stack()
    table = dynamodb.Table(
        stack,
        "Table",
        partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
    )
    ResearcherAccess(
        stack,
        "Researchers",
        topic=sns.Topic(stack, "Topic"),
        table=table,
        index_names=("live",),
        bucket=s3.Bucket(stack, "Bucket"),
        agent_queue=sqs.Queue(stack, "AgentEvents", visibility_timeout=Duration.minutes(6)),
        parameter_name="/respot/deployment",
        job_logs=logs.LogGroup(stack, "JobLogs", log_group_name="/respot/jobs"),
        publisher_role_arns=("arn:aws:iam::123456789012:role/researcher",),
    )
    return assertions.Template.from_stack(stack)


def test_deployment_parameter_holds_the_discovery_json(researchers):
    (parameter,) = researchers.find_resources("AWS::SSM::Parameter").values()
    assert parameter["Properties"]["Name"] == "/respot/deployment"
    assert parameter["Properties"]["Type"] == "String"
    text = json.dumps(parameter["Properties"]["Value"])
    keys = ("stack", "region", "topic_arn", "table_name", "bucket", "agent_queue_url", "log_group")
    for key in keys:
        assert f'\\"{key}\\":' in text
    # the SDK signs the digest the commands function checks (respot.identity.proofs)
    assert '\\"proof_digest\\":\\"canonical\\"' in text
    outputs = researchers.to_json()["Outputs"]
    assert {"TopicArn", "TableName", "Bucket", "AgentQueueUrl", "ResearcherPolicyArn"} <= set(
        outputs
    )


def test_researcher_policy_is_what_the_sdk_needs_and_no_more(researchers):
    researchers.has_resource_properties(
        "AWS::IAM::ManagedPolicy", {"ManagedPolicyName": "RespotResearcherPolicy"}
    )
    (policy,) = researchers.find_resources("AWS::IAM::ManagedPolicy").values()
    actions = {s["Sid"]: s["Action"] for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    assert actions == {
        "PublishJobCommands": "sns:Publish",
        "FindDeployment": "ssm:GetParameter",
        "ReadJobRecords": ["dynamodb:GetItem", "dynamodb:Query", "dynamodb:Scan"],
        "UploadJobCode": "s3:PutObject",
        "CodeIsCreateOnly": "s3:PutObject",  # a Deny without If-None-Match: * (create-only)
        "ReadJobObjects": "s3:GetObject",
        "ListJobObjects": "s3:ListBucket",
        "ReadJobLogs": ["logs:DescribeLogStreams", "logs:GetLogEvents"],
        "ReadSpotPrices": "ec2:DescribeSpotPriceHistory",  # `run --check`: read-only, Resource *
        "NoSubmissions": "s3:GetObject",  # a Deny: others' environment values (docs/security.md)
        "NoWorkspaceTokens": "s3:GetObject",  # a Deny: a workspace's Jupyter token, everyone's
    }
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    assert next(s for s in statements if s["Sid"] == "NoSubmissions")["Effect"] == "Deny"
    assert next(s for s in statements if s["Sid"] == "NoWorkspaceTokens")["Effect"] == "Deny"
    upload = next(
        s
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
        if s["Sid"] == "UploadJobCode"
    )
    assert json.dumps(upload["Resource"]).endswith('"/jobs/*/code/*"]]}')


def test_only_the_listed_roles_may_publish(researchers):
    (policy,) = researchers.find_resources("AWS::SNS::TopicPolicy").values()
    statements = {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    allow = statements["ResearchersPublish"]
    assert allow["Effect"] == "Allow"
    assert allow["Principal"] == {"AWS": "arn:aws:iam::123456789012:role/researcher"}
    deny = statements["OnlyResearchersPublish"]
    assert deny["Effect"] == "Deny" and deny["Principal"] == {"AWS": "*"}
    assert deny["Condition"] == {
        "ArnNotLike": {"aws:PrincipalArn": ["arn:aws:iam::123456789012:role/researcher"]}
    }


def test_the_live_index_projects_keys_and_its_reader_needs_nothing_more(store_template):
    # KEYS_ONLY holds the table's keys (pk, sk) and the index's (live, updated_at); the one
    # reader of the index, JobTable.live_job_ids, may ask for nothing else.
    from respot.aws.jobs import LIVE_INDEX, JobTable

    (table,) = store_template.find_resources("AWS::DynamoDB::Table").values()
    (index,) = table["Properties"]["GlobalSecondaryIndexes"]
    assert index["IndexName"] == LIVE_INDEX
    assert index["Projection"] == {"ProjectionType": "KEYS_ONLY"}
    projected = {"pk", "sk", *(k["AttributeName"] for k in index["KeySchema"])}

    class Recorder:
        calls: list[dict[str, object]] = []

        def query(self, **kwargs: object) -> dict[str, object]:
            self.calls.append(kwargs)
            return {"Items": [{"pk": {"S": "JOB#j-1"}, "sk": {"S": "JOB"}}]}

    recorder = Recorder()
    assert list(JobTable("t", recorder).live_job_ids()) == ["j-1"]
    (call,) = recorder.calls
    assert call["IndexName"] == LIVE_INDEX
    asked = {name.strip() for name in str(call["ProjectionExpression"]).split(",")}
    assert asked <= projected
