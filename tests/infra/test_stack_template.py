"""The whole stack against the wiring: what reaches which handler, and with which rights."""

from __future__ import annotations

import dataclasses
import importlib
import json
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import assertions

from infra.constructs.session_manager import SESSION_MANAGER_ACTIONS
from infra.grants import GrantError, known_grants
from infra.nag import add_checks
from infra.settings import DeploySettings
from infra.stack import NOTIFY_QUEUE, RespotStack
from infra.wiring import WIRING, Function, Grant
from respot.control import config

# ---- helpers -------------------------------------------------------------------------------


def of_type(resources: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {name: r for name, r in resources.items() if r["Type"] == kind}


def logical_id(stack: cdk.Stack, construct: Any) -> str:
    return stack.resolve(construct.node.default_child.logical_id)


def functions_by_handler(resources: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    return {
        r["Properties"]["Handler"]: (name, r)
        for name, r in of_type(resources, "AWS::Lambda::Function").items()
    }


def statements(resources: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(resource name, statement) of every policy document in the template."""
    found = []
    for name, r in resources.items():
        props = r.get("Properties", {})
        documents = [props.get("PolicyDocument"), props.get("AssumeRolePolicyDocument")]
        documents += [p["PolicyDocument"] for p in props.get("Policies", [])]
        for document in documents:
            if document:
                found += [(name, s) for s in document["Statement"]]
    return found


def role_statements(resources: dict[str, Any], role: str) -> list[dict[str, Any]]:
    return [
        s
        for r in of_type(resources, "AWS::IAM::Policy").values()
        if {"Ref": role} in r["Properties"]["Roles"]
        for s in r["Properties"]["PolicyDocument"]["Statement"]
    ]


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


# ---- functions and their triggers ----------------------------------------------------------


def test_one_lambda_per_wiring_function_with_handler_runtime_and_architecture(resources):
    lambdas = of_type(resources, "AWS::Lambda::Function")
    assert len(lambdas) == len(WIRING.functions)
    by_handler = functions_by_handler(resources)
    assert set(by_handler) == {f.handler for f in WIRING.functions}
    for spec in WIRING.functions:
        props = by_handler[spec.handler][1]["Properties"]
        assert props["Runtime"] == "python3.12"
        assert props["Architectures"] == ["arm64"]
        assert props["MemorySize"] == spec.memory_mb
        assert props["Timeout"] == spec.timeout_seconds


def test_every_function_gets_the_configuration_respot_config_reads(resources):
    required = {
        config.ENV_TABLE,
        config.ENV_BUCKET,
        config.ENV_LAUNCH_TEMPLATE_ID,
        config.ENV_LAUNCH_TEMPLATE_VERSION,
        config.ENV_SUBNETS,
        config.ENV_INSTANCE_TYPES,
        config.ENV_AGENT_QUEUE_URL,
        config.ENV_SLACK_TOKEN_PARAMETER,
        "POWERTOOLS_SERVICE_NAME",
    }
    for spec in WIRING.functions:
        _, function = functions_by_handler(resources)[spec.handler]
        env = function["Properties"]["Environment"]["Variables"]
        assert required <= set(env), spec.name
        assert env["POWERTOOLS_SERVICE_NAME"] == "respot"
        assert env[config.ENV_INSTANCE_TYPES] == "g5.xlarge,g4dn.xlarge"
        assert (config.ENV_DLQ_URL in env) == (Grant.DLQ_SEND in spec.grants)
        assert config.ENV_NOTIFY_QUEUE_URL in env  # every commit may queue a notification


def test_every_wiring_function_has_its_handler_module():
    for spec in WIRING.functions:
        module = importlib.import_module(spec.module)
        assert callable(getattr(module, "handler", None)), spec.handler


def test_every_function_is_one_code_asset(resources):
    keys = {
        r["Properties"]["Code"]["S3Key"]
        for r in of_type(resources, "AWS::Lambda::Function").values()
    }
    assert len(keys) == 1


def test_rule_patterns_are_exactly_the_wiring_patterns(resources):
    rules = [
        r
        for r in of_type(resources, "AWS::Events::Rule").values()
        if "EventPattern" in r["Properties"]
    ]
    assert len(rules) == len(WIRING.rules)
    by_handler = functions_by_handler(resources)
    for spec in WIRING.rules:
        matching = [r for r in rules if r["Properties"]["EventPattern"] == spec.pattern]
        assert len(matching) == 1, spec.name
        (target,) = matching[0]["Properties"]["Targets"]
        function_name = by_handler[WIRING.function(spec.function).handler][0]
        assert target["Arn"] == {"Fn::GetAtt": [function_name, "Arn"]}


def test_schedules_run_their_functions(resources):
    schedules = [
        r
        for r in of_type(resources, "AWS::Events::Rule").values()
        if "ScheduleExpression" in r["Properties"]
    ]
    assert len(schedules) == len(WIRING.schedules)
    by_handler = functions_by_handler(resources)
    for spec, rule in zip(WIRING.schedules, schedules, strict=True):
        assert (
            rule["Properties"]["ScheduleExpression"] == f"rate({spec.every_seconds // 60} minute)"
        )
        function_name = by_handler[WIRING.function(spec.function).handler][0]
        assert rule["Properties"]["Targets"][0]["Arn"] == {"Fn::GetAtt": [function_name, "Arn"]}


def test_subscription_filters_are_the_wiring_filters(respot, resources):
    stack, _ = respot
    subscriptions = of_type(resources, "AWS::SNS::Subscription").values()
    by_queue = {
        s["Properties"]["Endpoint"]["Fn::GetAtt"][0]: s["Properties"] for s in subscriptions
    }
    fed_by_topic = [q for q in WIRING.queues if q.topic_filter is not None]
    assert len(by_queue) == len(fed_by_topic)
    for spec in fed_by_topic:
        props = by_queue[logical_id(stack, stack.messaging.queues[spec.name])]
        assert props["FilterPolicy"] == spec.topic_filter
        assert props["RawMessageDelivery"] is False
        assert props["Protocol"] == "sqs"


def test_queues_redrive_visibility_and_mappings_follow_the_wiring(respot, resources):
    stack, _ = respot
    mappings = of_type(resources, "AWS::Lambda::EventSourceMapping").values()
    by_handler = functions_by_handler(resources)
    for spec in WIRING.queues:
        queue_id = logical_id(stack, stack.messaging.queues[spec.name])
        props = resources[queue_id]["Properties"]
        assert props["RedrivePolicy"]["maxReceiveCount"] == spec.max_receive_count
        assert props["VisibilityTimeout"] == spec.visibility_timeout_seconds
        assert props["MessageRetentionPeriod"] == spec.retention_days * 86400
        dlq_id = logical_id(stack, stack.messaging.dead_letter_queues[spec.name])
        assert props["RedrivePolicy"]["deadLetterTargetArn"] == {"Fn::GetAtt": [dlq_id, "Arn"]}
        (mapping,) = [
            m
            for m in mappings
            if m["Properties"]["EventSourceArn"] == {"Fn::GetAtt": [queue_id, "Arn"]}
        ]
        assert mapping["Properties"]["FunctionName"] == {
            "Ref": by_handler[WIRING.function(spec.function).handler][0]
        }
        assert mapping["Properties"]["BatchSize"] == spec.batch_size
        assert mapping["Properties"]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
        assert (
            mapping["Properties"].get("MaximumBatchingWindowInSeconds", 0)
            == spec.max_batching_window_seconds
        )


def test_a_dead_letter_alarm_per_dead_letter_queue(resources):
    alarms = of_type(resources, "AWS::CloudWatch::Alarm")
    assert len(alarms) == len(WIRING.queues) + 1


# ---- instances -----------------------------------------------------------------------------


def test_launch_template_imdsv2_tags_no_key_and_a_closed_security_group(resources):
    (template,) = of_type(resources, "AWS::EC2::LaunchTemplate").values()
    data = template["Properties"]["LaunchTemplateData"]
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert data["MetadataOptions"]["InstanceMetadataTags"] == "enabled"
    assert "KeyName" not in data
    (group,) = of_type(resources, "AWS::EC2::SecurityGroup").values()
    assert "SecurityGroupIngress" not in group["Properties"]
    assert not of_type(resources, "AWS::EC2::SecurityGroupIngress")
    assert data["SecurityGroupIds"] == [
        {"Fn::GetAtt": [next(iter(of_type(resources, "AWS::EC2::SecurityGroup"))), "GroupId"]}
    ]


def test_user_data_has_no_deployment_choice_in_it():
    # GIVEN context values an operator chose, including ones a shell would act on
    stack, _ = _stack_with(
        slack_channel="#ml-$(reboot)",
        instance_types=("g5.xlarge",),
        on_demand_prices={"g5.xlarge": 1.0},
    )
    rendered = stack.fleet.user_data.render()
    # THEN none of them reaches the instance's script
    assert "$(reboot)" not in rendered and "g5.xlarge" not in rendered


# ---- IAM -----------------------------------------------------------------------------------


def test_no_allow_statement_has_a_wildcard_action(resources):
    for name, statement in statements(resources):
        if statement["Effect"] != "Allow":
            continue
        for action in as_list(statement["Action"]):
            assert "*" not in action, (name, action)


def test_every_wiring_grant_has_iam():
    assert {g.value for g in Grant} <= known_grants()


def test_control_plane_launches_only_from_the_launch_template(respot, resources):
    stack, _ = respot
    template_id = logical_id(stack, stack.fleet.launch_template)
    by_handler = functions_by_handler(resources)
    for spec in WIRING.functions:
        role = by_handler[spec.handler][1]["Properties"]["Role"]["Fn::GetAtt"][0]
        found = {s.get("Sid"): s for s in role_statements(resources, role)}
        if Grant.EC2_LAUNCH not in spec.grants:
            assert "RunFromRespotLaunchTemplate" not in found
            continue
        run = found["RunFromRespotLaunchTemplate"]
        assert run["Action"] == "ec2:RunInstances"
        assert template_id in json.dumps(run["Condition"]["ArnLike"]["ec2:LaunchTemplate"])
        tag = found["TagOnLaunchOnly"]
        assert tag["Condition"] == {"StringEquals": {"ec2:CreateAction": "RunInstances"}}
        pass_role = found["PassInstanceRole"]
        assert pass_role["Resource"] == {"Fn::GetAtt": [logical_id(stack, stack.fleet.role), "Arn"]}
        assert pass_role["Condition"] == {
            "StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}
        }
        terminate = found["TerminateRespotInstances"]
        assert terminate["Condition"] == {
            "StringEquals": {"aws:ResourceTag/respot:managed": stack.stack_name}
        }
        assert json.dumps(terminate["Resource"]).endswith(':instance/*"]]}')


def test_control_plane_data_access_is_its_table_and_jobs_prefix(respot, resources):
    stack, _ = respot
    table = logical_id(stack, stack.store.table)
    bucket = logical_id(stack, stack.store.bucket)
    for name, statement in statements(resources):
        if statement["Effect"] != "Allow":
            continue
        actions = as_list(statement["Action"])
        resources_text = json.dumps(statement.get("Resource"))
        if any(a.startswith("dynamodb:") for a in actions):
            for resource in as_list(statement["Resource"]):
                assert table in json.dumps(resource), name
            assert resources_text.count("/index/") <= len(WIRING.table_indexes)
        if any(a in ("s3:GetObject", "s3:PutObject") for a in actions) and bucket in resources_text:
            if statement.get("Sid") == "JobWheelhouse":
                # The cache of job environments (docs/environments.md): the job role's only,
                # which each job's session policy narrows to its researcher's prefix.
                assert name.startswith("CredentialsJobPolicy"), name
                assert resources_text.endswith('"/wheelhouse/*"]]}'), resources_text
                continue
            assert "/jobs/" in resources_text, (name, resources_text)
        if "s3:ListBucket" in actions and bucket in resources_text:
            # Only the bucket, and no prefix condition: HeadObject of a missing key must
            # answer 404 (the checkpoint store and handoff checks rely on it), not 403.
            assert statement["Resource"] == {"Fn::GetAtt": [bucket, "Arn"]}, name
            assert "Condition" not in statement, name


def test_sends_go_only_to_named_queues(resources):
    for name, statement in statements(resources):
        if statement["Effect"] == "Allow" and "sqs:SendMessage" in as_list(statement["Action"]):
            for resource in as_list(statement["Resource"]):
                assert "Fn::GetAtt" in resource or "aws:SourceArn" in json.dumps(statement), name


def test_describe_is_the_only_star_resource(resources):
    """Besides Describe*: the SSM Agent's session permissions (workspaces, on by default; the
    ssmmessages channels have no resource type) and the researcher's data channel of the
    sessions their tunnels start (infra/constructs/workspaces.py)."""
    for name, statement in statements(resources):
        if statement["Effect"] == "Allow" and "*" in as_list(statement.get("Resource", [])):
            actions = set(as_list(statement["Action"]))
            if name.startswith("SessionManagerPolicy"):
                assert actions == set(SESSION_MANAGER_ACTIONS), name
                continue
            if name.startswith("ResearchersResearcherPolicy") and actions == {
                "ssmmessages:OpenDataChannel"
            }:
                continue
            # (the selftest's FIS role holds DescribeInstances alone; the instances' ECR login
            # for image jobs has no resource type, AWS requires '*')
            assert actions <= {
                "ec2:DescribeInstances",
                "ec2:DescribeSpotPriceHistory",
                "ecr:GetAuthorizationToken",
                "ec2:DescribeInstanceTypes",  # the vCPUs named when a quota refuses a launch
            }, name
            if "ecr:GetAuthorizationToken" in actions:
                assert name.startswith("FleetInstancePolicy"), name


# ---- storage, discovery, secrets -----------------------------------------------------------


def test_bucket_encryption_versioning_public_access_block_and_tls(respot, resources):
    stack, _ = respot
    bucket = resources[logical_id(stack, stack.store.bucket)]["Properties"]
    assert bucket["VersioningConfiguration"] == {"Status": "Enabled"}
    assert bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
    assert all(bucket["PublicAccessBlockConfiguration"].values())
    (policy,) = [
        p
        for p in of_type(resources, "AWS::S3::BucketPolicy").values()
        if p["Properties"]["Bucket"] == {"Ref": logical_id(stack, stack.store.bucket)}
    ]
    assert any(
        s["Effect"] == "Deny" and s.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
    )


def test_deployment_parameter_exists_and_the_slack_token_is_only_named(resources):
    (parameter,) = of_type(resources, "AWS::SSM::Parameter").values()
    assert parameter["Properties"]["Name"] == "/respot/deployment"
    # The token is a SecureString the platform team creates (CloudFormation cannot): the
    # template holds no secret, no Secrets Manager secret (billed $0.40 a month at rest).
    assert not of_type(resources, "AWS::SecretsManager::Secret")
    for function in of_type(resources, "AWS::Lambda::Function").values():
        variables = function["Properties"]["Environment"]["Variables"]
        assert variables[config.ENV_SLACK_TOKEN_PARAMETER] == "/respot/slack-token"


def test_nothing_retained_or_recoverable_has_a_fixed_name(resources, template):
    outputs = template.to_json()["Outputs"]
    # A failed first deploy (or a destroyed stage) leaves retained resources behind; a fixed
    # name would block the retry with "already exists".
    for group in of_type(resources, "AWS::Logs::LogGroup").values():
        assert "LogGroupName" not in group["Properties"]
    name_keys = ("TableName", "BucketName", "LogGroupName", "Name")
    for logical, resource in resources.items():
        if resource.get("DeletionPolicy") == "Retain":
            fixed = [k for k in name_keys if k in resource.get("Properties", {})]
            assert not fixed, f"{logical} is retained and has a fixed {fixed}"
    # ... and both stay discoverable: stack outputs (and the deployment parameter)
    assert {"SlackTokenParameter", "LogGroup"} <= set(outputs)


# ---- deployment choices --------------------------------------------------------------------


def _stack_with(**settings: Any) -> tuple[RespotStack, dict[str, Any]]:
    wiring = settings.pop("wiring", WIRING)
    app = cdk.App(context={"aws:cdk:bundling-stacks": []})
    stack = RespotStack(app, "Respot", settings=DeploySettings(**settings), wiring=wiring)
    return stack, assertions.Template.from_stack(stack).to_json()["Resources"]


@pytest.fixture(scope="module")
def existing_network() -> tuple[RespotStack, dict[str, Any]]:
    return _stack_with(
        vpc_id="vpc-0123456789abcdef0",
        subnets={
            "subnet-0aaaaaaaaaaaaaaaa": "eu-west-1a",
            "subnet-0bbbbbbbbbbbbbbbb": "eu-west-1b",
        },
        ami_id="ami-0123456789abcdef0",
        allowed_publisher_role_arns=("arn:aws:iam::123456789012:role/researcher",),
        stage="prod",
    )


def test_existing_vpc_and_ami_are_used_not_created(existing_network):
    _stack, resources = existing_network
    assert not of_type(resources, "AWS::EC2::VPC")
    assert not of_type(resources, "AWS::EC2::Subnet")
    (template,) = of_type(resources, "AWS::EC2::LaunchTemplate").values()
    assert template["Properties"]["LaunchTemplateData"]["ImageId"] == "ami-0123456789abcdef0"
    _, function = next(iter(functions_by_handler(resources).values()))
    subnets = function["Properties"]["Environment"]["Variables"][config.ENV_SUBNETS]
    assert json.loads(subnets) == [
        {"subnet_id": "subnet-0aaaaaaaaaaaaaaaa", "availability_zone": "eu-west-1a"},
        {"subnet_id": "subnet-0bbbbbbbbbbbbbbbb", "availability_zone": "eu-west-1b"},
    ]
    run = json.dumps(
        [s for _, s in statements(resources) if s.get("Sid") == "RunFromRespotLaunchTemplate"]
    )
    assert ":subnet/subnet-0aaaaaaaaaaaaaaaa" in run and "::image/ami-0123456789abcdef0" in run


def test_stage_names_the_fixed_names(existing_network):
    _stack, resources = existing_network
    (parameter,) = of_type(resources, "AWS::SSM::Parameter").values()
    assert parameter["Properties"]["Name"] == "/respot/prod/deployment"
    managed = of_type(resources, "AWS::IAM::ManagedPolicy").values()
    (policy,) = [p for p in managed if "ManagedPolicyName" in p["Properties"]]
    assert policy["Properties"]["ManagedPolicyName"] == "RespotResearcherPolicy-prod"
    # the others (the self-test's) have generated names: a redeploy never collides
    assert len(managed) >= 2


def test_publishers_are_restricted_on_the_topic(existing_network):
    _, resources = existing_network
    (policy,) = of_type(resources, "AWS::SNS::TopicPolicy").values()
    sids = {s.get("Sid") for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    assert {"ResearchersPublish", "OnlyResearchersPublish"} <= sids


def test_notifications_flow_through_a_fifo_queue_to_the_notify_function(respot, resources):
    # GIVEN the default stack, built from WIRING with its notifications queue
    stack, _ = respot
    queue_id = logical_id(stack, stack.messaging.queues[NOTIFY_QUEUE])
    dlq_id = logical_id(stack, stack.messaging.dead_letter_queues[NOTIFY_QUEUE])
    queue_arn = {"Fn::GetAtt": [queue_id, "Arn"]}
    # THEN the queue and its dead-letter queue are FIFO, deduplicated by the senders' ids
    for name in (queue_id, dlq_id):
        props = resources[name]["Properties"]
        assert props["FifoQueue"] is True
        assert props.get("ContentBasedDeduplication", False) is False
    # AND the notify function reads it one message at a time, reporting failures per message
    by_handler = functions_by_handler(resources)
    notify_name, notify = by_handler["lambdas.notify.handler"]
    (mapping,) = [
        m
        for m in of_type(resources, "AWS::Lambda::EventSourceMapping").values()
        if m["Properties"]["EventSourceArn"] == queue_arn
    ]
    assert mapping["Properties"]["FunctionName"] == {"Ref": notify_name}
    assert mapping["Properties"]["BatchSize"] == 1
    assert "MaximumBatchingWindowInSeconds" not in mapping["Properties"]  # not for FIFO
    # AND every function may send to it exactly when its wiring says NOTIFY_SEND
    for spec in WIRING.functions:
        _name, function = by_handler[spec.handler]
        variables = function["Properties"]["Environment"]["Variables"]
        assert config.ENV_NOTIFY_QUEUE_URL in variables
        role = function["Properties"]["Role"]["Fn::GetAtt"][0]
        sends = [
            s
            for s in role_statements(resources, role)
            if s["Action"] == "sqs:SendMessage" and s["Resource"] == queue_arn
        ]
        assert bool(sends) == (Grant.NOTIFY_SEND in spec.grants), spec.name
    # AND notify gets the Slack token's parameter name, the channel and its own dead letters
    variables = notify["Properties"]["Environment"]["Variables"]
    assert config.ENV_SLACK_TOKEN_PARAMETER in variables
    assert variables[config.ENV_DLQ_URL] == {"Ref": dlq_id}


def _parameter_arn(resource: Any) -> str:
    """The parameter ARN in a statement, as text (it is an Fn::Join of pseudo parameters)."""
    return json.dumps(resource, sort_keys=True)


def test_only_the_slack_posting_functions_read_the_token_and_only_that_parameter(resources):
    # notify posts job threads; sweep posts sweep threads. No other function reads it.
    readers = [
        (name, s)
        for name, s in statements(resources)
        if "slack-token" in _parameter_arn(s.get("Resource"))
    ]
    decrypters = [
        (name, s) for name, s in statements(resources) if "kms:Decrypt" in as_list(s.get("Action"))
    ]
    assert len(readers) == len(decrypters) == 2
    by_handler = functions_by_handler(resources)
    for handler in ("lambdas.notify.handler", "lambdas.sweep.handler"):
        role = by_handler[handler][1]["Properties"]["Role"]["Fn::GetAtt"][0]
        mine = role_statements(resources, role)
        (read,) = [s for s in mine if "slack-token" in _parameter_arn(s.get("Resource"))]
        assert as_list(read["Action"]) == ["ssm:GetParameter"]
        arn = _parameter_arn(read["Resource"])
        assert ":parameter/respot/slack-token" in arn
        # Decrypt only through SSM, only for this parameter (SSM's encryption context)
        (decrypt,) = [s for s in mine if "kms:Decrypt" in as_list(s.get("Action"))]
        assert as_list(decrypt["Action"]) == ["kms:Decrypt"]
        equals = decrypt["Condition"]["StringEquals"]
        assert _parameter_arn(equals["kms:EncryptionContext:PARAMETER_ARN"]) == arn
        assert "ssm." in json.dumps(equals["kms:ViaService"])


def test_a_grant_without_iam_fails_the_synth():
    odd = Function("odd", "lambdas.odd", frozenset({"launch-anything"}))  # type: ignore[arg-type]
    with pytest.raises(GrantError, match="launch-anything"):
        _stack_with(wiring=dataclasses.replace(WIRING, functions=(*WIRING.functions, odd)))


# ---- cdk-nag -------------------------------------------------------------------------------


def test_cdk_nag_finds_nothing_unsuppressed():
    app = cdk.App(context={"aws:cdk:bundling-stacks": []})
    stack = RespotStack(app, "Respot", settings=DeploySettings())
    add_checks(app)
    errors = assertions.Annotations.from_stack(stack).find_error("*", assertions.Match.any_value())
    warnings = assertions.Annotations.from_stack(stack).find_warning(
        "*", assertions.Match.string_like_regexp("AwsSolutions-.*")
    )
    assert [e.entry.data for e in errors] == []
    assert [w.entry.data for w in warnings] == []


def test_only_the_agent_events_function_knows_the_instance_role_id(respot, resources):
    stack, _ = respot
    by_handler = functions_by_handler(resources)
    for spec in WIRING.functions:
        env = by_handler[spec.handler][1]["Properties"]["Environment"]["Variables"]
        fed_by_agents = any(q.function == spec.name and q.fed_by_agents for q in WIRING.queues)
        assert ("RESPOT_AGENT_ROLE_ID" in env) is fed_by_agents, spec.name
        if fed_by_agents:
            assert env["RESPOT_AGENT_ROLE_ID"] == {
                "Fn::GetAtt": [logical_id(stack, stack.fleet.role), "RoleId"]
            }
