"""IAM enforced: the system runs under the stack's own policies, and no role does another's work.

The local runtime (`RuntimeOptions(iam=True)`) makes moto authenticate every request and
evaluate the synthesized template's policies: each handler with its function role, each
instance with the instance role, `run()` with the researcher policy. A permission missing
from the template makes this job fail. moto cannot evaluate conditions;
`tests/infra/test_iam_policies.py` evaluates those.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from infra.local import cloud
from infra.local.market import ChaosSchedule
from infra.local.runtime import CREDENTIALS_FUNCTION_NAME, LocalRuntime, RuntimeOptions
from respot.core.states import JobState
from respot.credentials.vending import (
    CredentialsSource,
    JobCredentialsError,
    job_session,
    lambda_invoker,
)
from respot.identity.proofs import sts_url
from respot.storage import layout
from tests.e2e.helpers import counting_spec, expected_total, output, wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def rt() -> Iterator[LocalRuntime]:
    chaos = ChaosSchedule(after_boot={1: 90.0})  # the first instance is interrupted (3 s real)
    with LocalRuntime(RuntimeOptions(iam=True, chaos=chaos, log_level="ERROR")) as runtime:
        yield runtime


def _denied(call: Any) -> str:
    with pytest.raises(ClientError) as exc:
        call()
    error = exc.value.response
    code = str(error["Error"]["Code"])
    status = error.get("ResponseMetadata", {}).get("HTTPStatusCode")
    # moto's SQS answers a denial with HTTP 403 and no AWS error code
    assert code in ("AccessDenied", "AccessDeniedException", "UnauthorizedOperation") or (
        status == 403 and code == "403"
    ), error
    return code


FIRST: dict[str, str] = {}  # the job of the first test, which later tests probe


def test_a_job_survives_an_interruption_under_the_stacks_policies(rt: LocalRuntime) -> None:
    # Only what has no local counterpart may stay unresolved (a deny, never a grant):
    # EventBridge's dead letters, the security group's id, Lambda's event source mappings.
    assert rt.iam is not None
    local_less = ("MessagingEventDeadLetters", "FleetSecurityGroup", "Functions")
    assert all(u.startswith(local_less) for u in rt.iam.unresolved), rt.iam.unresolved
    assert all("SqsEventSource" in u for u in rt.iam.unresolved if u.startswith("Functions")), (
        rt.iam.unresolved
    )
    # The first attempt trains at most 4 s (3 s to its notice, then at most 1 s of hold: the
    # notice lasts 4 s, 3 s of which are kept to save), 200 steps of 0.02 s: it cannot finish
    # 800, so the interruption always lands, even many seconds late; the resumed attempt runs
    # fast.
    steps = 800
    job = rt.run(
        counting_spec("iam", hyperparameters={"steps": steps, "resumed_step_seconds": 0.005})
    )
    job.wait(timeout=480)
    record = rt.job_record(job.job_id)
    assert record is not None
    assert record.state is JobState.COMPLETED, (record.reason, record.timeline[-3:])
    assert record.interruptions == 1
    assert int(output(rt, job.job_id, "weights.sha256")) == expected_total(steps, 2)
    assert rt.dispatcher is not None and rt.dispatcher.failures == []
    # Every attempt reached the job's objects with the job's own credentials only: the
    # instance role has none (the e2e below proves it), and the replacement restored the
    # interrupted attempt's checkpoint and wrote its own
    assert record.attempts[1].restored_step is not None, record.timeline[-5:]
    # (Whether the replacement overlapped the interrupted instance, warm, depends on how
    # fast it booted: each instance asks for its own credentials either way.)
    FIRST["job_id"] = job.job_id


def test_one_role_cannot_do_another_roles_work(rt: LocalRuntime) -> None:
    assert rt.iam is not None and rt.deployment is not None
    local = rt.deployment
    endpoint = local.endpoint_url
    instance = cloud.session_for(
        {k.lower(): v for k, v in rt.iam.instance_credentials("i-0123456789abcdef0").items()}
    )
    researcher = rt.researcher_session()
    submit = rt.function_session("commands")
    notify = rt.function_session("notify")

    def client(session: Any, service: str) -> Any:
        return cloud.client_of(session, service, endpoint)

    table_item = {"pk": {"S": "JOB#x"}, "sk": {"S": "JOB"}}
    launch = {
        "LaunchTemplate": {"LaunchTemplateId": local.launch_template_id},
        "MinCount": 1,
        "MaxCount": 1,
    }
    # An instance: no launching, no table writes, no commands on the commands queue ...
    _denied(lambda: client(instance, "ec2").run_instances(**launch))
    _denied(
        lambda: client(instance, "dynamodb").put_item(TableName=local.table_name, Item=table_item)
    )
    commands_queue = local.queue_urls["commands"]
    _denied(lambda: client(instance, "sqs").send_message(QueueUrl=commands_queue, MessageBody="{}"))
    # ... but its own channel works (the denials above are the policy's, not a broken key)
    agent_queue = local.queue_urls["agent-events"]
    client(instance, "sqs").send_message(QueueUrl=agent_queue, MessageBody="not an agent message")
    # A researcher: no terminating, no table writes; reading records works
    some_instance = next(iter(rt.fleet.instances), "i-0123456789abcdef0") if rt.fleet else ""
    _denied(lambda: client(researcher, "ec2").terminate_instances(InstanceIds=[some_instance]))
    _denied(
        lambda: client(researcher, "dynamodb").put_item(TableName=local.table_name, Item=table_item)
    )
    client(researcher, "dynamodb").get_item(TableName=local.table_name, Key=table_item)
    # Functions: submit cannot read the Slack token (only notify can); notify launches nothing
    token = local.slack_token_parameter
    local.client("ssm").put_parameter(
        Name=token, Type="SecureString", Value="xoxb-e2e", Overwrite=True
    )
    _denied(lambda: client(submit, "ssm").get_parameter(Name=token, WithDecryption=True))
    client(notify, "ssm").get_parameter(Name=token, WithDecryption=True)
    _denied(lambda: client(notify, "ec2").run_instances(**launch))


def test_a_researcher_cannot_replace_another_researchers_code(rt: LocalRuntime) -> None:
    # GIVEN code a first researcher uploaded, create-only, as run() does
    assert rt.iam is not None and rt.deployment is not None
    local = rt.deployment
    first = cloud.client_of(rt.researcher_session(), "s3", local.endpoint_url)
    second = cloud.client_of(
        cloud.session_for(rt.iam.add_researcher("second-researcher")), "s3", local.endpoint_url
    )
    code = b"PK first researcher's code"
    key = layout.code_key("iam-code-owner", hashlib.sha256(code).hexdigest())
    first.put_object(Bucket=local.bucket, Key=key, Body=code, IfNoneMatch="*")
    # WHEN a second researcher writes the same key without `If-None-Match: *` THEN the
    # researcher policy refuses it (its Deny CodeIsCreateOnly, evaluated with the request's
    # s3:if-none-match); with the header S3 refuses it (412); the first code is unchanged
    _denied(lambda: second.put_object(Bucket=local.bucket, Key=key, Body=b"PK broken"))
    with pytest.raises(ClientError) as exc:
        second.put_object(Bucket=local.bucket, Key=key, Body=b"PK broken", IfNoneMatch="*")
    assert exc.value.response["Error"]["Code"] in ("PreconditionFailed", "412")
    assert first.get_object(Bucket=local.bucket, Key=key)["Body"].read() == code
    # AND new code still goes up create-only (the Deny is about the header, not the key)
    other = layout.code_key("iam-code-second", hashlib.sha256(b"PK second").hexdigest())
    second.put_object(Bucket=local.bucket, Key=other, Body=b"PK second", IfNoneMatch="*")


def _isolation_probe_spec(secret: str) -> Any:
    # Trains until cancelled (at most 10 000 steps of 0.05 s): the probe needs it live. Its
    # agent reads its secret with the job's credentials before the session starts.
    return counting_spec(
        "iam-second",
        hyperparameters={"steps": 10_000, "step_seconds": 0.05},
        warm_start=False,
        secrets={"PROBE_TOKEN": secret},
    )


def test_a_second_jobs_credentials_reach_none_of_the_first_jobs_objects(rt: LocalRuntime) -> None:
    # GIVEN the first job's objects (the test above ran it to completion) ...
    assert rt.iam is not None and rt.deployment is not None and "job_id" in FIRST
    local = rt.deployment
    first = FIRST["job_id"]
    admin = rt.client("s3")
    keys = [o["Key"] for o in admin.list_objects_v2(Bucket=local.bucket, Prefix=f"jobs/{first}/")
            .get("Contents", [])]  # fmt: skip
    record = rt.job_record(first)
    assert record is not None and record.submission.code is not None
    code = layout.code_key(first, record.submission.code.sha256)
    manifests = [k for k in keys if k.startswith(layout.manifests_prefix(first))]
    blobs = [k for k in keys if k.startswith(f"{layout.checkpoints_prefix(first)}blobs/")]
    outputs = [k for k in keys if k.startswith(layout.outputs_prefix(first))]
    assert manifests and blobs and outputs and code in keys, keys
    targets = [layout.submission_key(first), code, manifests[-1], blobs[0], outputs[0],
               layout.outputs_manifest_key(first)]  # fmt: skip
    # ... AND a secret another job names (respot/jobs/..., readable by the role, not by them)
    secrets = rt.client("secretsmanager")
    theirs = secrets.create_secret(Name="respot/jobs/iam-first-token", SecretString="first")["ARN"]
    ours = secrets.create_secret(Name="respot/jobs/iam-second-token", SecretString="second")["ARN"]
    # ... AND the first job's researcher's wheelhouse holds wheels (what a rerun installs)
    wheels = f"{'ab' * 32}/wheels.zip"
    scope_a = layout.wheelhouse_scope(record.submission.submitted_by, first)
    theirs_wheels = layout.wheelhouse_key(scope_a, "ab" * 32)
    admin.put_object(Bucket=local.bucket, Key=theirs_wheels, Body=b"PK first's wheels")
    # ... AND a second researcher's job, training (its agent read its own secret with the
    # job's credentials), whose instance asks for its credentials as its agent does (an
    # identity proof signed with the instance role's credentials)
    researcher_b = cloud.session_for(rt.iam.add_researcher("wheel-researcher"))
    second = rt.run(_isolation_probe_spec(ours), session=researcher_b)

    def training() -> bool:
        now = rt.job_record(second.job_id)
        return bool(now and now.state is JobState.RUNNING and now.progress.step)

    wait_for(training, 240, "the second job training")
    now = rt.job_record(second.job_id)
    assert now is not None
    scope_b = layout.wheelhouse_scope(now.submission.submitted_by, second.job_id)
    assert scope_a != scope_b, (record.submission.submitted_by, now.submission.submitted_by)
    instance = now.attempts[-1].instance_id
    assert instance is not None
    raw = {k.lower(): v for k, v in rt.iam.instance_credentials(instance).items()}
    instance_session = cloud.session_for(raw)

    def source(job_id: str) -> CredentialsSource:
        return CredentialsSource(
            function=CREDENTIALS_FUNCTION_NAME,
            job_id=job_id,
            instance_id=instance,
            region=local.region,
            sts_url=sts_url(local.region, local.endpoint_url),
            instance_credentials=instance_session.get_credentials(),
            invoke=lambda_invoker(cloud.client_of(instance_session, "lambda", local.endpoint_url)),
            bind_wait_seconds=0,
        )

    vended = job_session(source(second.job_id), local.region)
    job_s3 = cloud.client_of(vended, "s3", local.endpoint_url)
    instance_s3 = cloud.client_of(instance_session, "s3", local.endpoint_url)
    try:
        # WHEN its code uses either THEN nothing of the first job can be read, replaced or
        # deleted: not its submission (environment values), code, checkpoints or outputs
        for s3 in (job_s3, instance_s3):
            for key in targets:
                _denied(lambda s3=s3, key=key: s3.get_object(Bucket=local.bucket, Key=key))
                _denied(lambda s3=s3, key=key: s3.put_object(Bucket=local.bucket, Key=key,
                                                            Body=b"planted"))  # fmt: skip
                _denied(lambda s3=s3, key=key: s3.delete_object(Bucket=local.bucket, Key=key))
        # AND neither can read or replace the first researcher's wheels (a planted wheel
        # would run in that researcher's next job with the same requirements)
        for s3 in (job_s3, instance_s3):
            _denied(lambda s3=s3: s3.get_object(Bucket=local.bucket, Key=theirs_wheels))
            _denied(lambda s3=s3: s3.put_object(Bucket=local.bucket, Key=theirs_wheels,
                                                Body=b"PK planted"))  # fmt: skip
        assert admin.get_object(Bucket=local.bucket, Key=theirs_wheels)["Body"].read() == (
            b"PK first's wheels"
        )
        # AND its own researcher's wheelhouse is the job credentials' (not the instance role's)
        ours_wheels = f"{layout.wheelhouse_prefix(scope_b)}{wheels}"
        job_s3.put_object(Bucket=local.bucket, Key=ours_wheels, Body=b"PK second's wheels")
        assert job_s3.get_object(Bucket=local.bucket, Key=ours_wheels)["Body"].read() == (
            b"PK second's wheels"
        )
        _denied(lambda: instance_s3.get_object(Bucket=local.bucket, Key=ours_wheels))
        # AND its instance cannot get the first job's credentials (nor any job's, once its own
        # attempt is over)
        with pytest.raises(JobCredentialsError, match="was not launched for job"):
            source(first).fetch()
        # AND the first job's objects are as they were
        assert admin.get_object(Bucket=local.bucket, Key=layout.outputs_manifest_key(first))[
            "Body"].read() != b"planted"  # fmt: skip
        # AND the second job's own credentials work on its own objects (the denials above are
        # the scoping's, not broken keys); its instance role's reach none of them
        own = layout.submission_key(second.job_id)
        stored = json.loads(job_s3.get_object(Bucket=local.bucket, Key=own)["Body"].read())
        # (the agent keys the wheelhouse by the stored submitter, the broker by the record's)
        assert stored["submitted_by"] == now.submission.submitted_by
        _denied(lambda: instance_s3.get_object(Bucket=local.bucket, Key=own))
        # AND secrets: the job's credentials read its own secret, not another's; the
        # instance role reads none
        job_secrets = cloud.client_of(vended, "secretsmanager", local.endpoint_url)
        assert job_secrets.get_secret_value(SecretId=ours)["SecretString"] == "second"
        _denied(lambda: job_secrets.get_secret_value(SecretId=theirs))
        plain = cloud.client_of(instance_session, "secretsmanager", local.endpoint_url)
        for arn in (ours, theirs):
            _denied(lambda arn=arn: plain.get_secret_value(SecretId=arn))
    finally:
        second.cancel("isolation probe done")
    second.wait(timeout=240)
