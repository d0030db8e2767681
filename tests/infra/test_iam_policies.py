"""The synthesized policies, evaluated with their conditions (which moto cannot evaluate).

`infra.iam_eval` evaluates the template's own documents, intrinsics resolved to stand-in
ARNs: conditions such as `ec2:InstanceType` and `ec2:LaunchTemplate` are checked here; the
e2e test `tests/e2e/test_iam_e2e.py` runs the system under the same policies in moto.
"""

from __future__ import annotations

from typing import Any

import pytest

from infra.iam_eval import allowed
from infra.local.iam import (
    Resolver,
    _logical_id,
    _servicequotas,
    action_count,
    principal_policies,
)
from respot.credentials.policy import MAX_SESSION_POLICY_CHARS, packed_size, session_policy
from respot.storage import layout

REGION, ACCOUNT = "us-east-1", "123456789012"


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    from infra.local.iam import synthesized_template

    return synthesized_template()


def _attrs(template: dict[str, Any]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for lid, resource in template["Resources"].items():
        kind = resource["Type"]
        if kind == "AWS::S3::Bucket":
            arn = f"arn:aws:s3:::{lid.lower()}"
        elif kind == "AWS::DynamoDB::Table":
            arn = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{lid}"
        elif kind == "AWS::SQS::Queue":
            arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{lid}"
        else:
            arn = f"arn:aws:test:{REGION}:{ACCOUNT}:{lid}"
        out[lid] = {"Ref": lid, "Arn": arn, "GroupId": f"sg-{lid.lower()}"}
    for name in template.get("Parameters", {}):
        out[name] = {"Ref": "ami-0123456789abcdef0"}
    return out


@pytest.fixture(scope="module")
def policies(template: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    resolve = Resolver(_attrs(template), REGION)
    return {p: [resolve(d) for d in docs] for p, docs in principal_policies(template).items()}


@pytest.fixture(scope="module")
def arns(template: dict[str, Any]) -> dict[str, str]:
    def lid(prefix: str) -> str:
        found = _logical_id(template, prefix)
        assert found is not None, prefix
        return found

    ec2 = f"arn:aws:ec2:{REGION}:{ACCOUNT}"
    return {
        "bucket": f"arn:aws:s3:::{lid('StoreBucket').lower()}",
        "table": f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{lid('StoreTable')}",
        "commands_queue": f"arn:aws:sqs:{REGION}:{ACCOUNT}:{lid('MessagingCommandsQueue')}",
        "agent_queue": f"arn:aws:sqs:{REGION}:{ACCOUNT}:{lid('MessagingAgentEventsQueue')}",
        "slack_token": f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/respot/slack-token",
        "kms_key": f"arn:aws:kms:{REGION}:{ACCOUNT}:key/0123abcd-0000-4000-8000-0123456789ab",
        "template": f"{ec2}:launch-template/{lid('FleetLaunchTemplate')}",
        "instance": f"{ec2}:instance/i-0123456789abcdef0",
        "volume": f"{ec2}:volume/vol-0123456789abcdef0",
        "job_role": f"arn:aws:test:{REGION}:{ACCOUNT}:{lid('CredentialsJobRole')}",
    }


def test_the_job_role_may_prune_checkpoints_and_delete_nothing_else(policies, arns):
    job = policies["job"]
    bucket = arns["bucket"]
    assert allowed(job, "s3:DeleteObject", f"{bucket}/jobs/j-1/checkpoints/blobs/ab12")
    assert allowed(job, "s3:DeleteObject", f"{bucket}/jobs/j-1/checkpoints/0040.json")
    for key in ("jobs/j-1/outputs/model.pt", "jobs/j-1/submission.json", "other/x"):
        assert not allowed(job, "s3:DeleteObject", f"{bucket}/{key}")


JOB_KEYS = (
    "submission.json",
    f"code/{'ab' * 32}.zip",
    "checkpoints/manifests/000000000040-0001.json",
    f"checkpoints/blobs/{'cd' * 32}",
    "handoff/0001.json",
    "outputs/model.pt",
    "outputs.json",
    "logs/0001/session.log",
)


def test_the_instance_role_reaches_no_jobs_objects_only_the_credentials_function(policies, arns):
    instance = policies["instance"]
    bucket = arns["bucket"]
    for key in JOB_KEYS:
        for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"):
            assert not allowed(instance, action, f"{bucket}/jobs/j-1/{key}"), (action, key)
    vendor = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:Respot-credentials"
    assert allowed(instance, "lambda:InvokeFunction", vendor)
    assert not allowed(instance, "lambda:InvokeFunction", vendor.replace("credentials", "commands"))
    assert not allowed(instance, "sts:AssumeRole", arns["job_role"])
    secret = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:respot/jobs/token-AbCdEf"
    assert not allowed(instance, "secretsmanager:GetSecretValue", secret)


def test_a_jobs_credentials_read_its_own_secrets_and_no_other_jobs(policies):
    job = policies["job"]
    secret = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:respot/jobs/"
    mine, partial = f"{secret}mine-AbCdEf", f"{secret}partial"
    session = session_policy("b", "j-1", secrets=[mine, partial])

    def can(arn: str) -> bool:
        action = "secretsmanager:GetSecretValue"
        return allowed(job, action, arn) and allowed([session], action, arn)

    assert can(mine) and can(f"{partial}-Zz9Yy8")
    assert not can(f"{secret}theirs-AbCdEf") and not can(f"{secret}partial-longer-Zz9Yy8")
    # the role itself never reaches secrets outside respot/jobs/
    assert not allowed(job, "secretsmanager:GetSecretValue", secret.replace("respot/jobs/", "x/"))


def test_a_jobs_credentials_reach_its_own_objects_and_no_other_jobs(policies, arns):
    """A session's rights are its role's policy AND its session policy (both must allow)."""
    job, bucket = policies["job"], arns["bucket"]
    name = bucket.removeprefix("arn:aws:s3:::")
    session = session_policy(name, "j-1")

    def can(action: str, key: str) -> bool:
        resource = f"{bucket}/{key}"
        return allowed(job, action, resource) and allowed([session], action, resource)

    # Its own: read everything, write what the agent writes, prune checkpoints
    for key in JOB_KEYS:
        assert can("s3:GetObject", f"jobs/j-1/{key}"), key
    for key in JOB_KEYS[2:]:
        assert can("s3:PutObject", f"jobs/j-1/{key}"), key
    assert not can("s3:PutObject", "jobs/j-1/submission.json")
    assert not can("s3:PutObject", f"jobs/j-1/code/{'ab' * 32}.zip")
    assert can("s3:DeleteObject", "jobs/j-1/checkpoints/manifests/000000000040-0001.json")
    # Another job's (even one whose id starts like it): nothing at all
    for other in ("j-2", "j-10", "j-1x"):
        for key in JOB_KEYS:
            for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"):
                assert not can(action, f"jobs/{other}/{key}"), (action, other, key)
    assert allowed(job, "s3:ListBucket", bucket) and allowed([session], "s3:ListBucket", bucket)


RESEARCHER_A = f"arn:aws:iam::{ACCOUNT}:user/alice"
RESEARCHER_B = f"arn:aws:sts::{ACCOUNT}:assumed-role/AWSReservedSSO_Research_0a1b/bob@example.com"


def test_a_jobs_credentials_reach_its_own_researchers_wheelhouse_and_no_other(policies, arns):
    """A wheel one job stores is installed only by its own researcher's jobs."""
    job, bucket = policies["job"], arns["bucket"]
    name = bucket.removeprefix("arn:aws:s3:::")
    wheels = f"{'ab' * 32}/wheels.zip"
    a = layout.wheelhouse_prefix(layout.wheelhouse_scope(RESEARCHER_A, "j-1"))
    b = layout.wheelhouse_prefix(layout.wheelhouse_scope(RESEARCHER_B, "j-2"))
    assert a != b and a == layout.wheelhouse_prefix(layout.wheelhouse_scope(RESEARCHER_A, "j-9"))

    def can(session: dict[str, Any], action: str, key: str) -> bool:
        resource = f"{bucket}/{key}"
        return allowed(job, action, resource) and allowed([session], action, resource)

    of_a = session_policy(name, "j-1", submitted_by=RESEARCHER_A)
    rerun_of_a = session_policy(name, "j-9", submitted_by=RESEARCHER_A)
    of_b = session_policy(name, "j-2", submitted_by=RESEARCHER_B)
    for action in ("s3:GetObject", "s3:PutObject"):
        # its own researcher's: read and write (a rerun finds the wheels cached) ...
        assert can(of_a, action, f"{a}{wheels}") and can(rerun_of_a, action, f"{a}{wheels}")
        assert can(of_b, action, f"{b}{wheels}")
        # ... another researcher's, or the wheelhouse outside any researcher's: nothing
        for key in (f"{b}{wheels}", f"wheelhouse/{wheels}", f"{a.rstrip('/')}0/{wheels}"):
            assert not can(of_a, action, key), (action, key)
        assert not can(of_b, action, f"{a}{wheels}"), action
    for action in ("s3:DeleteObject", "s3:PutObjectAcl"):
        assert not can(of_a, action, f"{a}{wheels}"), action
    # a job with no verified submitter shares its wheelhouse with no other job
    alone = layout.wheelhouse_prefix(layout.wheelhouse_scope(None, "j-3"))
    assert alone not in (a, b, layout.wheelhouse_prefix(layout.wheelhouse_scope(None, "j-4")))
    assert can(session_policy(name, "j-3"), "s3:GetObject", f"{alone}{wheels}")
    assert not can(session_policy(name, "j-4"), "s3:GetObject", f"{alone}{wheels}")


def test_the_instance_role_has_no_wheelhouse_grant(policies, arns):
    instance, bucket = policies["instance"], arns["bucket"]
    scope = layout.wheelhouse_scope(RESEARCHER_A, "j-1")
    for key in (f"{layout.wheelhouse_prefix(scope)}{'ab' * 32}/wheels.zip", "wheelhouse/x"):
        for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"):
            assert not allowed(instance, action, f"{bucket}/{key}"), (action, key)


def test_wheelhouse_keys_take_only_a_scope_and_a_hash():
    for scope in ("*", "../x", "ab" * 8 + "/", "AB" * 8, "ab" * 9):  # hostile-path
        with pytest.raises(ValueError, match="wheelhouse scope"):
            layout.wheelhouse_key(scope, "ab" * 32)
    with pytest.raises(ValueError, match="requirements hash"):
        layout.wheelhouse_key("ab" * 8, "*")


def test_earlier_jobs_outputs_named_as_data_are_readable_and_nothing_else_of_them(arns):
    name = arns["bucket"].removeprefix("arn:aws:s3:::")
    session = session_policy(name, "j-2", reads=["jobs/j-1/outputs/", "jobs/j-0/outputs/w.pt"])

    def read(key: str) -> bool:
        return allowed([session], "s3:GetObject", f"{arns['bucket']}/{key}")

    assert read("jobs/j-1/outputs/model.pt") and read("jobs/j-0/outputs/w.pt")
    assert not read("jobs/j-1/submission.json") and not read("jobs/j-1/checkpoints/blobs/x")
    assert not read("jobs/j-0/outputs/other.pt")
    # a wildcard or a key outside jobs/ grants nothing
    wide = session_policy(name, "j-2", reads=["jobs/*/outputs/", "wheelhouse/x"])
    assert not allowed([wide], "s3:GetObject", f"{arns['bucket']}/jobs/j-1/outputs/a")
    # Twenty long keys (the spec's most) still fit STS's 2,048 characters, each still
    # readable, no submission ever, and the job's own prefix as before
    many = [f"jobs/earlier-{i:02d}-{'x' * 60}/outputs/{'y' * 60}.pt" for i in range(20)]
    big = session_policy(name, "j-2", reads=many)
    assert packed_size(big) <= MAX_SESSION_POLICY_CHARS
    for key in many:
        assert allowed([big], "s3:GetObject", f"{arns['bucket']}/{key}")
    assert not allowed(
        [big], "s3:GetObject", f"{arns['bucket']}/{many[0].split('/o')[0]}/submission.json"
    )
    assert allowed([big], "s3:PutObject", f"{arns['bucket']}/jobs/j-2/outputs/a")
    assert not allowed([big], "s3:PutObject", f"{arns['bucket']}/{many[0]}")


def test_only_the_credentials_function_may_assume_the_job_role(policies, arns, template):
    role = arns["job_role"]
    for principal, docs in policies.items():
        may = allowed(docs, "sts:AssumeRole", role)
        assert may == (principal == "function:credentials"), principal
    trust = template["Resources"][_logical_id(template, "CredentialsJobRole")]
    statements = trust["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert [s["Principal"]["AWS"]["Fn::GetAtt"][0] for s in statements] == [
        _logical_id(template, "FunctionsCredentialsRole")
    ]


def test_run_instances_only_from_the_template_and_only_allowed_types(policies, arns):
    submit = policies["function:commands"]
    ctx = {"ec2:LaunchTemplate": arns["template"], "ec2:InstanceType": "g5.xlarge"}
    assert allowed(submit, "ec2:RunInstances", arns["instance"], ctx)
    assert allowed(
        submit, "ec2:RunInstances", arns["instance"], {**ctx, "ec2:InstanceType": "g4dn.xlarge"}
    )
    # a type the platform team did not list, even from respot's template
    for other in ("p4d.24xlarge", "g5.48xlarge", "g5.xlarg"):
        assert not allowed(
            submit, "ec2:RunInstances", arns["instance"], {**ctx, "ec2:InstanceType": other}
        )
    # any type, but not from respot's launch template
    assert not allowed(
        submit,
        "ec2:RunInstances",
        arns["instance"],
        {"ec2:LaunchTemplate": arns["template"] + "x", "ec2:InstanceType": "g5.xlarge"},
    )
    # the other resources of the call carry no instance type: the template suffices
    assert allowed(
        submit, "ec2:RunInstances", arns["volume"], {"ec2:LaunchTemplate": arns["template"]}
    )


def test_one_role_cannot_do_another_roles_work(policies, arns):
    instance, researcher = policies["instance"], policies["researcher"]
    reconcile, notify = policies["function:reconcile"], policies["function:notify"]
    ctx = {"ec2:LaunchTemplate": arns["template"], "ec2:InstanceType": "g5.xlarge"}
    # The instances: no launching, no table writes, no terminating, no commands to the queue
    assert not allowed(instance, "ec2:RunInstances", arns["instance"], ctx)
    assert not allowed(instance, "dynamodb:PutItem", arns["table"])
    tagged = {"aws:ResourceTag/respot:managed": "Respot"}
    assert not allowed(instance, "ec2:TerminateInstances", arns["instance"], tagged)
    assert not allowed(instance, "sqs:SendMessage", arns["commands_queue"])
    assert allowed(instance, "sqs:SendMessage", arns["agent_queue"])  # its own channel
    # Researchers: no terminating instances, no table writes, no speaking for agents
    assert not allowed(researcher, "ec2:TerminateInstances", arns["instance"], tagged)
    assert not allowed(researcher, "dynamodb:PutItem", arns["table"])
    assert not allowed(researcher, "sqs:SendMessage", arns["agent_queue"])
    assert allowed(researcher, "dynamodb:GetItem", arns["table"])  # following jobs
    # Functions: only notify reads the Slack token; notify launches nothing
    assert not allowed(reconcile, "ssm:GetParameter", arns["slack_token"])
    assert allowed(notify, "ssm:GetParameter", arns["slack_token"])
    assert not allowed(notify, "ssm:GetParameter", arns["slack_token"] + "-other")
    assert not allowed(notify, "ec2:RunInstances", arns["instance"], ctx)
    # Terminating: only this deployment's instances
    assert allowed(reconcile, "ec2:TerminateInstances", arns["instance"], tagged)
    other = {"aws:ResourceTag/respot:managed": "Respot-other"}
    assert not allowed(reconcile, "ec2:TerminateInstances", arns["instance"], other)


def test_every_principal_has_policies_and_counts_are_small(policies):
    # Numbers for docs/security.md: distinct actions per role (printed with -s).
    counts = {p: action_count(docs) for p, docs in policies.items()}
    print(counts)
    assert set(counts) >= {"instance", "researcher", "function:commands", "function:notify"}
    # commands and reconcile read the switched pollers' state (events:DescribeRule,
    # lambda:GetEventSourceMapping: a deploy can disable them under live jobs), and scan the
    # table (an admission pass counts budgets' spend over every job): 33; commands also reads
    # a submitter's respot:team tag (iam:ListRoleTags, iam:ListUserTags): 35
    assert all(0 < n <= 35 for n in counts.values())
    assert all(n <= 33 for p, n in counts.items() if p != "function:commands")


def test_the_slack_token_is_decrypted_only_through_ssm_and_only_for_that_parameter(policies, arns):
    notify, sweep, submit = (policies[f"function:{f}"] for f in ("notify", "sweep", "commands"))
    through_ssm = {
        "kms:ViaService": f"ssm.{REGION}.amazonaws.com",
        "kms:EncryptionContext:PARAMETER_ARN": arns["slack_token"],
    }
    for reader in (notify, sweep):
        assert allowed(reader, "kms:Decrypt", arns["kms_key"], through_ssm)
        # directly (not through SSM), or another parameter's value: no
        direct = {k: v for k, v in through_ssm.items() if k != "kms:ViaService"}
        assert not allowed(reader, "kms:Decrypt", arns["kms_key"], direct)
        other = {**through_ssm, "kms:EncryptionContext:PARAMETER_ARN": arns["slack_token"] + "x"}
        assert not allowed(reader, "kms:Decrypt", arns["kms_key"], other)
    assert not allowed(submit, "kms:Decrypt", arns["kms_key"], through_ssm)


def test_researchers_may_create_code_but_never_replace_it(policies, arns):
    researcher = policies["researcher"]
    code = f"{arns['bucket']}/jobs/j-1/code/{'ab' * 32}.zip"
    create_only = {"s3:if-none-match": "*"}
    assert allowed(researcher, "s3:PutObject", code, create_only)
    # Without `If-None-Match: *` the write could replace another researcher's zip: denied
    assert not allowed(researcher, "s3:PutObject", code)
    # And nothing else of a job is theirs to write, with the header or without
    for key in ("jobs/j-1/submission.json", "jobs/j-1/outputs/model.pt", "jobs/j-1/outputs.json"):
        assert not allowed(researcher, "s3:PutObject", f"{arns['bucket']}/{key}", create_only)


def test_the_functions_that_admit_jobs_may_read_ec2_quotas_as_the_local_iam_names_them(policies):
    # The local IAM stand-in names the quota a GetServiceQuota request reads; moto's default
    # names none ("*"), which the grant scoped to EC2's quotas never matched: admission under
    # enforced IAM could not read the account's vCPU quota (the team queue's e2e logged it).
    class Request:
        region = REGION

        def _get_param(self, name: str) -> str | None:
            return {"ServiceCode": "ec2", "QuotaCode": "L-34B43A08"}.get(name)

    arn = _servicequotas(Request())
    assert arn.endswith(":ec2/L-34B43A08") and arn.startswith("arn:aws:servicequotas:")
    for function in ("commands", "reconcile"):
        name = next(p for p in policies if function in p.lower())
        assert allowed(policies[name], "servicequotas:GetServiceQuota", arn), name


def test_only_the_control_functions_send_to_the_launch_retries_queue(template, policies):
    retries = (
        f"arn:aws:sqs:{REGION}:{ACCOUNT}:{_logical_id(template, 'MessagingLaunchRetriesQueue')}"
    )
    # every function that launches (a paced launch's look when its token is due) may send
    for function in ("commands", "agent_events", "reconcile", "launch_retries", "sweep"):
        assert allowed(policies[f"function:{function}"], "sqs:SendMessage", retries), function
    # neither the instances nor the researchers may (no one else makes a job look again)
    assert not allowed(policies["instance"], "sqs:SendMessage", retries)
    assert not allowed(policies["researcher"], "sqs:SendMessage", retries)
    assert not allowed(policies["function:notify"], "sqs:SendMessage", retries)
