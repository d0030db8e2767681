"""Satellite stacks (`-c extra_regions=...`): synthesized, checked by cdk-nag and cfn-lint, and
their IAM evaluated with conditions (`infra.iam_eval`).

Without `extra_regions` the home template is what it was: no satellite statement, variable or
cross-region export. With it, the home stack gains only a satellite policy per function, two
variables and CDK's cross-region export writer.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import assertions

from infra.constructs.functions import RULE_MAX_EVENT_AGE, RULE_RETRY_ATTEMPTS
from infra.iam_eval import allowed
from infra.local.iam import Resolver, _logical_id
from infra.nag import add_checks, errors
from infra.regions import (
    checkpoint_bucket_name,
    checkpoint_bucket_prefix,
    instance_role_name,
    satellite_stack_name,
)
from infra.satellite import SatelliteStack
from infra.settings import DeploySettings, DeploySettingsError
from infra.stack import RespotStack
from infra.userdata import BOOTSTRAP_SCRIPT
from infra.wiring import WIRING
from tests.infra.conftest import NO_BUNDLING

HOME, ACCOUNT = "us-east-1", "123456789012"
EXTRA = ("us-west-2", "eu-west-1")
BIN = Path(sys.executable).parent
# Two creates of the same satellite stack (a retry after a failed create, or after destroy)
STACK_IDS = (
    f"arn:aws:cloudformation:us-west-2:{ACCOUNT}:stack/Respot-us-west-2/"
    "1e2f3a40-da77-11e4-872e-1234567db123",
    f"arn:aws:cloudformation:us-west-2:{ACCOUNT}:stack/Respot-us-west-2/"
    "9b0c7d15-0000-11f0-8000-abcdefabcdef",
)


def _resolver(attrs: dict[str, dict[str, str]], region: str, stack_id: str = STACK_IDS[0]) -> Any:
    resolve = Resolver(attrs, region)
    resolve.pseudo["AWS::StackId"] = stack_id.replace("us-west-2", region)
    return resolve


def _app(settings: DeploySettings, outdir: str | None = None) -> tuple[Any, Any, dict[str, Any]]:
    app = cdk.App(context=NO_BUNDLING, outdir=outdir)
    home = RespotStack(
        app,
        settings.stack_name,
        settings=settings,
        env=cdk.Environment(account=ACCOUNT, region=HOME),
    )
    satellites = {
        region: SatelliteStack(
            app,
            satellite_stack_name(settings.stack_name, region),
            home=home,
            region=region,
            settings=settings,
        )
        for region in settings.extra_regions
    }
    return app, home, satellites


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("cdk.out")
    app, home, satellites = _app(DeploySettings(extra_regions=EXTRA), str(out))
    add_checks(app)
    assembly = app.synth()
    return {
        "out": out,
        "errors": errors(assembly),
        "home": assertions.Template.from_stack(home).to_json(),
        "satellites": {
            r: assertions.Template.from_stack(s).to_json() for r, s in satellites.items()
        },
    }


def _resources(template: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [r for r in template["Resources"].values() if r["Type"] == kind]


def test_without_extra_regions_the_home_template_is_unchanged(template: assertions.Template):
    plain = template.to_json()
    _, empty = _as_settings(extra_regions=())
    assert empty == plain
    text = json.dumps(plain)
    for marker in (
        "SatellitePolicy",
        "RESPOT_SATELLITE",
        "satellite-of",
        "ExportsWriter",
        "-us-west-2",
    ):
        assert marker not in text


def _as_settings(**values: Any) -> tuple[Any, dict[str, Any]]:
    from tests.infra.conftest import respot_template

    stack, tmpl = respot_template(**values)
    return stack, tmpl.to_json()


def test_with_extra_regions_the_home_stack_only_gains_satellite_pieces(synthesized):
    app = cdk.App(context=NO_BUNDLING)
    alone = RespotStack(
        app, "Respot", settings=DeploySettings(), env=cdk.Environment(account=ACCOUNT, region=HOME)
    )
    before = assertions.Template.from_stack(alone).to_json()["Resources"]
    after = synthesized["home"]["Resources"]
    added = set(after) - set(before)
    assert set(before) <= set(after)
    kinds = {after[lid]["Type"] for lid in added}
    assert kinds <= {
        "AWS::IAM::ManagedPolicy",
        "Custom::CrossRegionExportWriter",
        "AWS::IAM::Role",
        "AWS::Lambda::Function",
    }
    # one managed policy per grant with satellite statements, attached to the roles with it
    satellite_policies = [lid for lid in added if "Satellite" in lid and "Policy" in lid]
    assert len(satellite_policies) == 3
    launching = sum(1 for f in WIRING.functions if "ec2-launch" in f.grants)
    (launch,) = [lid for lid in satellite_policies if "Ec2Launch" in lid]
    assert len(after[launch]["Properties"]["Roles"]) == launching
    # Variables of the functions: only the two satellite ones are new
    for lid, resource in before.items():
        if resource["Type"] != "AWS::Lambda::Function":
            continue
        old = resource["Properties"]["Environment"]["Variables"]
        new = after[lid]["Properties"]["Environment"]["Variables"]
        added = {"RESPOT_SATELLITE_REGIONS", "RESPOT_SATELLITE_PARAMETER"}
        if "RESPOT_JOB_ROLE_ARN" in new:  # the credentials function: satellite buckets too
            added.add("RESPOT_SATELLITE_BUCKETS")
        assert set(new) - set(old) == added
        assert new["RESPOT_SATELLITE_REGIONS"] == ",".join(EXTRA)


def test_cdk_nag_finds_nothing_unsuppressed(synthesized):
    assert synthesized["errors"] == []


def test_templates_pass_cfn_lint(synthesized):
    files = [
        synthesized["out"] / f"{satellite_stack_name('Respot', r)}.template.json" for r in EXTRA
    ]
    files.append(synthesized["out"] / "Respot.template.json")
    # Two warnings come with any stack of a concrete account and region, not with respot's
    # resources: W3010 (CDK names the zones of the VPC it makes: with an explicit env it looks
    # them up, here the placeholders dummy1a..c) and W3005 (a DependsOn inside CDK's own
    # cross-region export reader/writer). Everything else must pass.
    result = subprocess.run(
        [str(BIN / "cfn-lint"), "--ignore-checks", "W3010", "W3005", "--", *map(str, files)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_launch_template_is_the_home_one(synthesized):
    for region, template in synthesized["satellites"].items():
        (lt,) = _resources(template, "AWS::EC2::LaunchTemplate")
        data = lt["Properties"]["LaunchTemplateData"]
        assert data["MetadataOptions"]["HttpTokens"] == "required"
        assert data["MetadataOptions"]["InstanceMetadataTags"] == "enabled"
        (device,) = data["BlockDeviceMappings"]
        assert device["Ebs"]["Encrypted"] is True
        assert "KeyName" not in data
        tags = {
            t["Key"]: t["Value"]
            for spec in lt["Properties"]["TagSpecifications"]
            for t in spec["Tags"]
        }
        assert tags["respot:managed"] == "Respot"  # the home control plane's tag
        (sg,) = _resources(template, "AWS::EC2::SecurityGroup")
        assert "SecurityGroupIngress" not in sg["Properties"]
        assert not _resources(template, "AWS::EC2::SecurityGroupIngress")
        # the same user data builder: the env file, then the bootstrap script
        parts = data["UserData"]["Fn::Base64"]["Fn::Join"][1]
        text = "".join(p if isinstance(p, str) else json.dumps(p) for p in parts)
        script = BOOTSTRAP_SCRIPT.read_text()
        assert script.strip().splitlines()[-1] in text
        assert 'AWS_REGION={"Ref": "AWS::Region"}' in text  # this (the satellite's) region
        # the agent reports to the home queue (CDK's cross-region reference), writes here
        assert "RESPOT_AGENT_QUEUE_URL=" in text and "MessagingAgentEventsQueue" in text
        assert 'RESPOT_BUCKET={"Ref": "CheckpointBucket' in text
        role = _resources(template, "AWS::IAM::Role")
        assert instance_role_name("Respot", region) in [
            r["Properties"].get("RoleName") for r in role
        ]


def _checkpoint_bucket(template: dict[str, Any]) -> dict[str, Any]:
    (bucket,) = [
        r
        for lid, r in template["Resources"].items()
        if r["Type"] == "AWS::S3::Bucket" and lid.startswith("CheckpointBucket")
    ]
    return bucket


def test_a_new_create_of_a_satellite_stack_gets_a_new_bucket_name(synthesized):
    # The bucket is retained: a retry after a failed create, or a deploy after destroy, must
    # not ask S3 for the name the kept bucket has ("already exists").
    for region, template in synthesized["satellites"].items():
        given = _checkpoint_bucket(template)["Properties"]["BucketName"]
        first, second = (_resolver({}, region, stack_id)(given) for stack_id in STACK_IDS)
        assert first != second
        for stack_id, name in zip(STACK_IDS, (first, second), strict=True):
            assert name == checkpoint_bucket_name(
                "Respot", ACCOUNT, region, stack_id.replace("us-west-2", region)
            )
            assert name.startswith(checkpoint_bucket_prefix("Respot", ACCOUNT, region))
            assert re.fullmatch(r"[a-z0-9][a-z0-9-]{1,61}[a-z0-9]", name), name
        # The home control plane may copy into either (it grants by the fixed prefix).
        docs = _home_policies(synthesized["home"], "reconcile")
        for name in (first, second):
            assert allowed(docs, "s3:PutObject", f"arn:aws:s3:::{name}/jobs/j-1/submission.json")


def test_the_bucket_name_fits_s3s_limit_for_the_longest_stage_and_region():
    stack_id = f"arn:aws:cloudformation:x:{ACCOUNT}:stack/s/1e2f3a40-da77-11e4-872e-1234567db123"
    longest = DeploySettings(stage="S" * 25).stack_name
    for region in ("ap-southeast-2", "us-gov-west-1", "eu-west-1"):
        name = checkpoint_bucket_name(longest, ACCOUNT, region, stack_id)
        assert len(name) <= 63 and name.endswith(f"-{ACCOUNT}-{region}-1e2f3a40"), name
        assert name.startswith("respot-s")


def test_the_checkpoint_bucket_is_private_encrypted_and_tls_only(synthesized):
    for template in synthesized["satellites"].values():
        bucket = _checkpoint_bucket(template)
        props = bucket["Properties"]
        assert props["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True,
            "BlockPublicPolicy": True,
            "IgnorePublicAcls": True,
            "RestrictPublicBuckets": True,
        }
        rule = props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
        assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
        denies = [
            s
            for p in _resources(template, "AWS::S3::BucketPolicy")
            for s in p["Properties"]["PolicyDocument"]["Statement"]
            if s["Effect"] == "Deny"
        ]
        assert any(s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in denies)


def test_rules_forward_the_home_patterns_to_the_home_bus(synthesized):
    for template in synthesized["satellites"].values():
        rules = _resources(template, "AWS::Events::Rule")
        patterns = sorted(
            json.dumps(r["Properties"]["EventPattern"], sort_keys=True) for r in rules
        )
        assert patterns == sorted(json.dumps(r.pattern, sort_keys=True) for r in WIRING.rules)
        for rule in rules:
            (target,) = rule["Properties"]["Targets"]
            arn = json.dumps(target["Arn"])
            assert f"events:{HOME}:" in arn and "event-bus/default" in arn
            assert "RoleArn" in target
        # the forwarding role may put events on the home bus, and do nothing else
        resolve = Resolver({}, "us-west-2")
        forward = _logical_id(template, "ForwardingRole")
        docs = [
            resolve(p["Properties"]["PolicyDocument"])
            for p in _resources(template, "AWS::IAM::Policy")
            if {"Ref": forward} in p["Properties"]["Roles"]
        ]
        bus = f"arn:aws:events:{HOME}:{ACCOUNT}:event-bus/default"
        assert allowed(docs, "events:PutEvents", bus)
        assert not allowed(docs, "events:PutEvents", bus.replace(HOME, "us-west-2"))
        assert not allowed(docs, "sqs:SendMessage", "arn:aws:sqs:us-east-1:123456789012:x")


def _forward_dead_letters(template: dict[str, Any]) -> str:
    lid = _logical_id(template, "ForwardDeadLetters")
    assert lid is not None, "the satellite has no ForwardDeadLetters queue"
    return lid


def test_each_forwarding_target_retries_then_dead_letters_in_its_region(synthesized):
    for template in synthesized["satellites"].values():
        queue = _forward_dead_letters(template)
        rules = _resources(template, "AWS::Events::Rule")
        assert len(rules) == len(WIRING.rules)
        for rule in rules:
            (target,) = rule["Properties"]["Targets"]
            # the queue of this stack, so of the rule's region (EventBridge requires it)
            assert target["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": [queue, "Arn"]}}
            policy = target["RetryPolicy"]
            assert policy == {
                "MaximumRetryAttempts": RULE_RETRY_ATTEMPTS,
                "MaximumEventAgeInSeconds": RULE_MAX_EVENT_AGE.to_seconds(),
            }
            # EventBridge's bounds (API RetryPolicy): 0-185 attempts, 60-86400 seconds
            assert 0 <= policy["MaximumRetryAttempts"] <= 185
            assert 60 <= policy["MaximumEventAgeInSeconds"] <= 86400


def test_the_forward_dead_letter_queue_is_encrypted_tls_only_and_kept_14_days(synthesized):
    for template in synthesized["satellites"].values():
        queue = _forward_dead_letters(template)
        props = template["Resources"][queue]["Properties"]
        assert props["SqsManagedSseEnabled"] is True
        assert props["MessageRetentionPeriod"] == 14 * 24 * 3600
        (policy,) = [
            p
            for p in _resources(template, "AWS::SQS::QueuePolicy")
            if p["Properties"]["Queues"] == [{"Ref": queue}]
        ]
        statements = policy["Properties"]["PolicyDocument"]["Statement"]
        assert any(
            s["Effect"] == "Deny"
            and s["Principal"] == {"AWS": "*"}
            and s["Action"] == "sqs:*"
            and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
            for s in statements
        )


def test_only_the_forwarding_rules_may_send_to_their_dead_letter_queue(synthesized):
    for region, template in synthesized["satellites"].items():
        queue = _forward_dead_letters(template)
        arn = f"arn:aws:sqs:{region}:{ACCOUNT}:forward-dead-letters"
        rule_arns = {
            lid: f"arn:aws:events:{region}:{ACCOUNT}:rule/{lid}"
            for lid, r in template["Resources"].items()
            if r["Type"] == "AWS::Events::Rule"
        }
        attrs = {queue: {"Ref": arn, "Arn": arn}} | {
            lid: {"Ref": lid, "Arn": a} for lid, a in rule_arns.items()
        }
        (policy,) = [
            p
            for p in _resources(template, "AWS::SQS::QueuePolicy")
            if p["Properties"]["Queues"] == [{"Ref": queue}]
        ]
        doc = Resolver(attrs, region)(policy["Properties"]["PolicyDocument"])
        # every Allow is for EventBridge itself (the evaluator below does not look at principals)
        allows = [s for s in doc["Statement"] if s["Effect"] == "Allow"]
        assert allows and all(s["Principal"] == {"Service": "events.amazonaws.com"} for s in allows)
        tls = {"aws:SecureTransport": "true"}
        for rule_arn in rule_arns.values():
            context = {**tls, "aws:SourceArn": rule_arn}
            assert allowed([doc], "sqs:SendMessage", arn, context)
            assert not allowed([doc], "sqs:ReceiveMessage", arn, context)
            assert not allowed(
                [doc], "sqs:SendMessage", arn, {**context, "aws:SecureTransport": "false"}
            )
        # not another rule (the home region's, another satellite's), not without a source
        other = f"arn:aws:events:{HOME}:{ACCOUNT}:rule/Respot-SpotInterruption"
        assert not allowed([doc], "sqs:SendMessage", arn, {**tls, "aws:SourceArn": other})
        assert not allowed([doc], "sqs:SendMessage", arn, tls)


def _alarm_actions(settings: DeploySettings) -> dict[str, list[Any]]:
    _, _, satellites = _app(settings)
    actions: dict[str, list[Any]] = {}
    for region, stack in satellites.items():
        template = assertions.Template.from_stack(stack).to_json()
        queue = _forward_dead_letters(template)
        (alarm,) = _resources(template, "AWS::CloudWatch::Alarm")
        props = alarm["Properties"]
        assert props["Namespace"] == "AWS/SQS"
        assert props["MetricName"] == "ApproximateNumberOfMessagesVisible"
        assert props["Dimensions"] == [
            {"Name": "QueueName", "Value": {"Fn::GetAtt": [queue, "QueueName"]}}
        ]
        assert props["Threshold"] == 0
        assert props["ComparisonOperator"] == "GreaterThanThreshold"
        actions[region] = props.get("AlarmActions", [])
    return actions


def test_the_dead_letter_alarm_notifies_the_alarm_topic_only_in_its_region():
    topic = f"arn:aws:sns:us-west-2:{ACCOUNT}:ops"
    actions = _alarm_actions(DeploySettings(extra_regions=EXTRA, alarm_topic_arn=topic))
    # an alarm may only act on a topic of its own region: eu-west-1's alarm has no action
    assert actions == {"us-west-2": [topic], "eu-west-1": []}
    home_topic = f"arn:aws:sns:{HOME}:{ACCOUNT}:ops"
    actions = _alarm_actions(DeploySettings(extra_regions=EXTRA, alarm_topic_arn=home_topic))
    assert actions == {"us-west-2": [], "eu-west-1": []}


def _bucket_name(region: str) -> str:
    stack_id = STACK_IDS[0].replace("us-west-2", region)
    return checkpoint_bucket_name("Respot", ACCOUNT, region, stack_id)


def _instance_policies(template: dict[str, Any], region: str) -> list[dict[str, Any]]:
    role = _logical_id(template, "FleetInstanceRole")
    attrs: dict[str, dict[str, str]] = {}
    for lid, resource in template["Resources"].items():
        if resource["Type"] == "AWS::S3::Bucket":
            name = _bucket_name(region)
            if "CheckpointBucket" in lid:
                attrs[lid] = {"Ref": name, "Arn": f"arn:aws:s3:::{name}"}
    resolve = Resolver(attrs, region)
    return [
        resolve(p["Properties"]["PolicyDocument"])
        for p in _resources(template, "AWS::IAM::Policy")
        if {"Ref": role} in p["Properties"]["Roles"]
    ]


SATELLITE_JOB_KEYS = (
    "submission.json",
    f"code/{'ab' * 32}.zip",
    "checkpoints/manifests/000000000040-0001.json",
    f"checkpoints/blobs/{'cd' * 32}",
    "handoff/0001.json",
    "outputs/model.pt",
    "outputs.json",
)
WHEELS = f"wheelhouse/{'ab' * 8}/{'cd' * 32}/wheels.zip"


def test_the_satellite_instance_role_reaches_no_jobs_objects_only_the_home_function(synthesized):
    region = "us-west-2"
    docs = _instance_policies(synthesized["satellites"][region], region)
    bucket = f"arn:aws:s3:::{_bucket_name(region)}"
    for key in (*(f"jobs/j-1/{k}" for k in SATELLITE_JOB_KEYS), WHEELS):
        for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"):
            assert not allowed(docs, action, f"{bucket}/{key}"), (action, key)
    # its job's credentials come from the home region's credentials function
    vendor = f"arn:aws:lambda:{HOME}:{ACCOUNT}:function:Respot-credentials"
    assert allowed(docs, "lambda:InvokeFunction", vendor)
    assert not allowed(docs, "lambda:InvokeFunction", vendor.replace(HOME, region))
    assert not allowed(docs, "lambda:InvokeFunction", vendor.replace("credentials", "commands"))
    user_data = json.dumps(_resources(synthesized["satellites"][region],
                                      "AWS::EC2::LaunchTemplate"))  # fmt: skip
    assert "RESPOT_CREDENTIALS_FUNCTION=Respot-credentials" in user_data
    assert not allowed(docs, "ec2:RunInstances", f"arn:aws:ec2:{region}:{ACCOUNT}:instance/*")
    assert not allowed(docs, "dynamodb:PutItem", f"arn:aws:dynamodb:{HOME}:{ACCOUNT}:table/x")


def _credentials_env(template: dict[str, Any]) -> dict[str, Any]:
    (function,) = [
        f for f in _resources(template, "AWS::Lambda::Function")
        if "RESPOT_JOB_ROLE_ARN" in f["Properties"].get("Environment", {}).get("Variables", {})
    ]  # fmt: skip
    return Resolver({}, HOME)(function["Properties"]["Environment"]["Variables"])


def test_a_satellite_attempts_credentials_reach_its_job_there_and_nothing_else(synthesized):
    """The home job role (its policy as synthesized) AND the session policy the credentials
    function builds for an attempt in us-west-2, with the satellite bucket the function's
    environment names: that job's prefix and its researcher's wheelhouse in that region's
    bucket; no other job's, no other region's, no other bucket with the same prefix."""
    from respot.credentials.policy import session_policy
    from respot.storage import layout

    home = synthesized["home"]
    env = _credentials_env(home)
    satellites = json.loads(env["RESPOT_SATELLITE_BUCKETS"])
    assert set(satellites) == set(EXTRA)
    roles = set(env["RESPOT_INSTANCE_ROLE_NAMES"].split(","))
    assert {instance_role_name("Respot", r) for r in EXTRA} <= roles
    role = _logical_id(home, "CredentialsJobRole")
    job = [
        Resolver({}, HOME)(p["Properties"]["PolicyDocument"])
        for p in _resources(home, "AWS::IAM::Policy")
        if {"Ref": role} in p["Properties"]["Roles"]
    ]
    researcher = f"arn:aws:iam::{ACCOUNT}:user/alice"
    session = session_policy(
        "home-bucket", "j-1", submitted_by=researcher, satellite_bucket=satellites["us-west-2"]
    )
    wheels = layout.wheelhouse_prefix(layout.wheelhouse_scope(researcher, "j-1"))

    def can(action: str, bucket: str, key: str) -> bool:
        resource = f"arn:aws:s3:::{bucket}/{key}"
        return allowed(job, action, resource) and allowed([session], action, resource)

    there, elsewhere = _bucket_name("us-west-2"), _bucket_name("eu-west-1")
    for key in SATELLITE_JOB_KEYS:
        assert can("s3:GetObject", there, f"jobs/j-1/{key}"), key
        assert not can("s3:GetObject", elsewhere, f"jobs/j-1/{key}"), key
        for other in ("j-2", "j-10"):
            for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"):
                assert not can(action, there, f"jobs/{other}/{key}"), (action, other, key)
    assert can("s3:PutObject", there, "jobs/j-1/checkpoints/blobs/ab12")
    assert not can("s3:PutObject", there, "jobs/j-1/submission.json")
    assert can("s3:DeleteObject", there, "jobs/j-1/checkpoints/blobs/ab12")
    for action in ("s3:GetObject", "s3:PutObject"):
        assert can(action, there, f"{wheels}{'cd' * 32}/wheels.zip")
        assert not can(action, there, f"{WHEELS}")  # another researcher's
    # another job's object whose key repeats this job's prefix (its outputs may hold any
    # path): the bucket name's `?` match one character each, where `*` would match
    # "<suffix>/jobs/j-2/outputs"
    for action in ("s3:GetObject", "s3:PutObject"):
        assert not can(action, there, "jobs/j-2/outputs/jobs/j-1/outputs.json"), action
    assert not can("s3:GetObject", f"{there}x", "jobs/j-1/outputs.json")
    bucket_arn = f"arn:aws:s3:::{there}"
    assert allowed(job, "s3:ListBucket", bucket_arn) and allowed(
        [session], "s3:ListBucket", bucket_arn
    )


def _home_policies(template: dict[str, Any], function: str) -> list[dict[str, Any]]:
    """The function role's inline and managed policies, intrinsics resolved."""
    from infra.constructs.naming import pascal_id

    role = _logical_id(template, f"Functions{pascal_id(function)}Role")
    resolve = Resolver({}, HOME)
    return [
        resolve(p["Properties"]["PolicyDocument"])
        for kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy")
        for p in _resources(template, kind)
        if {"Ref": role} in p["Properties"].get("Roles", [])
    ]


def test_the_home_control_plane_launches_there_only_from_its_tagged_template(synthesized):
    docs = _home_policies(synthesized["home"], "reconcile")
    ec2 = f"arn:aws:ec2:us-west-2:{ACCOUNT}"
    there = {"aws:RequestedRegion": "us-west-2"}
    template = f"{ec2}:launch-template/lt-0123456789abcdef0"
    ours = {"aws:ResourceTag/respot:managed": "Respot", **there}
    assert allowed(docs, "ec2:RunInstances", template, ours)
    assert not allowed(
        docs, "ec2:RunInstances", template, {**ours, "aws:ResourceTag/respot:managed": "X"}
    )
    assert not allowed(docs, "ec2:RunInstances", template, there)
    ctx = {"ec2:LaunchTemplate": template, "ec2:InstanceType": "g5.xlarge", **there}
    assert allowed(docs, "ec2:RunInstances", f"{ec2}:instance/*", ctx)
    assert not allowed(
        docs, "ec2:RunInstances", f"{ec2}:instance/*", {**ctx, "ec2:InstanceType": "p5.48xlarge"}
    )
    net = {
        "ec2:LaunchTemplate": template,
        "aws:ResourceTag/respot:satellite-of": "Respot",
        **there,
    }
    assert allowed(docs, "ec2:RunInstances", f"{ec2}:subnet/subnet-0abc12345", net)
    assert not allowed(
        docs,
        "ec2:RunInstances",
        f"{ec2}:security-group/sg-0abc12345",
        {**net, "aws:ResourceTag/respot:satellite-of": "Other"},
    )
    image = "arn:aws:ec2:us-west-2::image/ami-0123456789abcdef0"
    assert allowed(docs, "ec2:RunInstances", image, {"ec2:LaunchTemplate": template, **there})
    # a region without a satellite: nothing (the ARNs name every region, the request's
    # region must be a satellite's)
    ap = {"aws:RequestedRegion": "ap-south-1"}
    ap_template = template.replace("us-west-2", "ap-south-1")
    assert not allowed(docs, "ec2:RunInstances", ap_template, {**ours, **ap})
    assert not allowed(
        docs,
        "ec2:RunInstances",
        image.replace("us-west-2", "ap-south-1"),
        {"ec2:LaunchTemplate": ap_template, **ap},
    )
    # terminating there: only instances tagged as this deployment's
    instance = f"{ec2}:instance/i-0123456789abcdef0"
    assert allowed(docs, "ec2:TerminateInstances", instance, ours)
    assert not allowed(docs, "ec2:TerminateInstances", instance, there)
    assert not allowed(
        docs,
        "ec2:TerminateInstances",
        instance.replace("us-west-2", "ap-south-1"),
        {**ours, **ap},
    )
    # passing the satellite's instance role, and no other
    role = f"arn:aws:iam::{ACCOUNT}:role/{instance_role_name('Respot', 'us-west-2')}"
    to_ec2 = {"iam:PassedToService": "ec2.amazonaws.com"}
    assert allowed(docs, "iam:PassRole", role, to_ec2)
    assert not allowed(docs, "iam:PassRole", f"arn:aws:iam::{ACCOUNT}:role/admin", to_ec2)
    assert not allowed(docs, "iam:PassRole", role.replace("us-west-2", "ap-south-1"), to_ec2)
    # copying a job's objects into the satellite's bucket, nothing outside jobs/
    bucket = f"arn:aws:s3:::{_bucket_name('us-west-2')}"
    assert allowed(docs, "s3:PutObject", f"{bucket}/jobs/j-1/checkpoints/0040.json")
    assert not allowed(docs, "s3:PutObject", f"{bucket}/other/x")
    assert not allowed(docs, "s3:DeleteObject", f"{bucket}/jobs/j-1/checkpoints/0040.json")
    assert not allowed(
        docs, "s3:PutObject", f"arn:aws:s3:::{_bucket_name('ap-south-1')}/jobs/j-1/x"
    )
    parameter = f"arn:aws:ssm:us-west-2:{ACCOUNT}:parameter/respot/satellite"
    assert allowed(docs, "ssm:GetParameter", parameter, there)
    assert not allowed(
        docs, "ssm:GetParameter", parameter.replace("satellite", "slack-token"), there
    )
    assert not allowed(docs, "ssm:GetParameter", parameter.replace("us-west-2", "ap-south-1"), ap)


def test_notify_gets_no_satellite_reach(synthesized):
    docs = _home_policies(synthesized["home"], "notify")
    ec2 = f"arn:aws:ec2:us-west-2:{ACCOUNT}"
    ours = {"aws:ResourceTag/respot:managed": "Respot", "aws:RequestedRegion": "us-west-2"}
    assert not allowed(docs, "ec2:TerminateInstances", f"{ec2}:instance/i-0", ours)


def test_the_parameter_names_what_the_control_plane_needs(synthesized):
    for region, template in synthesized["satellites"].items():
        (parameter,) = _resources(template, "AWS::SSM::Parameter")
        assert parameter["Properties"]["Name"] == "/respot/satellite"
        text = json.dumps(parameter["Properties"]["Value"])
        for key in ("launch_template_id", "subnets", "bucket", "instance_role_id", "region"):
            assert key in text
        assert region in text


def test_bad_extra_regions_are_refused_with_the_fix():
    with pytest.raises(DeploySettingsError, match="extra_regions: 'us-west2'"):
        DeploySettings(extra_regions=("us-west2",))
    with pytest.raises(DeploySettingsError, match="twice"):
        DeploySettings(extra_regions=("us-west-2", "us-west-2"))
    with pytest.raises(DeploySettingsError, match="ami_parameter"):
        DeploySettings(extra_regions=("us-west-2",), ami_id="ami-0123456789abcdef0")
    settings = DeploySettings.from_context({"extra_regions": "us-west-2, eu-west-1"}.get)
    assert settings.extra_regions == EXTRA
    with pytest.raises(ValueError, match="home region"):
        _app(DeploySettings(extra_regions=(HOME,)))


def test_forwarding_rules_carry_the_deployment_tag_the_doctor_selects_them_by(synthesized):
    # respot.doctor.satellites tells this deployment's rules from another stage's by it
    for template in synthesized["satellites"].values():
        for rule in _resources(template, "AWS::Events::Rule"):
            assert {"Key": "respot:satellite-of", "Value": "Respot"} in rule["Properties"]["Tags"]


def test_only_eventbridge_of_this_account_and_region_assumes_the_forwarding_role(synthesized):
    for region, template in synthesized["satellites"].items():
        (role,) = [
            r
            for lid, r in template["Resources"].items()
            if r["Type"] == "AWS::IAM::Role" and lid.startswith("ForwardingRole")
        ]
        (statement,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        assert statement["Principal"] == {"Service": "events.amazonaws.com"}
        resolve = Resolver({}, region)
        conditions = resolve(statement["Condition"])
        assert conditions["StringEquals"] == {"aws:SourceAccount": "123456789012"}
        rule = f"arn:aws:events:{region}:123456789012:rule/*"
        assert conditions["ArnLike"] == {"aws:SourceArn": rule}
