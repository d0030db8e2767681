"""The commands function refuses, before anything is spent, a job (or a sweep's job) naming a
secret or an ECR image the deployment's instances may not read, by the rule `run()` applies
(`respot.spec.reach.refused_reads`): a job that never went through `run()` (another client, an
older SDK, a hand-written message) is recorded FAILED with the field and the fix, and nothing
is launched (its submitter's view: tests/handlers/test_refused_submissions.py); a sweep so
refused is dead-lettered with them. The home region and account come from the function's own
ARN (the Lambda context), never from the message."""

from __future__ import annotations

import json
from typing import Any

import pytest

from infra.local.dispatcher import LambdaContext
from lambdas import commands
from lambdas._commands import Home
from respot.core.states import JobState
from respot.spec.training import DataSourceEnvVar
from respot.sweep.model import SweepSubmission
from tests.handlers.test_handlers import CONTEXT, Env, env, submission
from tests.sweep.conftest import submission as sweep_submission

__all__ = ["env"]  # the fixture, shared with the other handler tests

# The local dispatcher's context: arn:aws:lambda:us-east-1:123456789012:function:test
SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:respot/jobs/wandb-AbCdEf"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/team/train:1.4"


def dead_letters(env: Env) -> list[str]:
    messages = env.clients["sqs"].receive_message(
        QueueUrl=env.local.dlq_urls["commands"],
        MessageAttributeNames=["All"],
        MaxNumberOfMessages=10,
    )
    return [m["MessageAttributes"]["reason"]["StringValue"] for m in messages.get("Messages", [])]


def send(env: Env, message: str, command: str, context: Any = CONTEXT) -> dict[str, Any]:
    return commands.handler(env.sqs_event(env.sns_envelope(message, command)), context)


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        (
            {"secrets": {"WANDB": SECRET.replace("us-east-1", "us-west-2")}},
            "secrets.WANDB: arn:aws:secretsmanager:us-west-2:123456789012:secret:respot/jobs/"
            "wandb-AbCdEf is in us-west-2; respot's instances (in every region they run in) "
            "read secrets in us-east-1: create it there, or replicate it",
        ),
        (
            {"secrets": {"WANDB": SECRET.replace("123456789012", "210987654321")}},
            "secrets.WANDB: arn:aws:secretsmanager:us-east-1:210987654321:secret:respot/jobs/"
            "wandb-AbCdEf is in account 210987654321; respot's instances read secrets of "
            "account 123456789012 only",
        ),
        (
            {"secrets": {"WANDB": SECRET.replace("respot/jobs/", "prod/")}},
            "secrets.WANDB: respot's instances read only secrets named respot/jobs/...",
        ),
        (
            {"image": IMAGE.replace("us-east-1", "eu-west-1")},
            "image: 123456789012.dkr.ecr.eu-west-1.amazonaws.com/team/train:1.4 is in the ECR "
            "registry of 123456789012 in eu-west-1; respot's instances pull only from "
            "123456789012.dkr.ecr.us-east-1.amazonaws.com: push it there",
        ),
        (
            {"image": IMAGE.replace("123456789012", "210987654321")},
            "image: 210987654321.dkr.ecr.us-east-1.amazonaws.com/team/train:1.4 is in the ECR "
            "registry of 210987654321",
        ),
    ],
)
def test_a_submission_past_run_naming_what_instances_cannot_read_is_refused_before_launch(
    env: Env, spec: dict[str, Any], said: str
) -> None:
    # GIVEN a submission published by hand (no run(), so no SDK check) on the commands path
    sub = submission(**spec)
    response = send(env, sub.model_dump_json(), "submit")
    # THEN it is a FAILED job whose reason names the field and the fix; nothing is launched
    assert response == {"batchItemFailures": []}
    assert dead_letters(env) == []
    record = env.control.jobs.get(sub.job_id)
    assert record is not None and record.state is JobState.FAILED
    assert record.reason is not None and said in record.reason
    assert env.instances(sub.job_id) == []


@pytest.mark.parametrize(
    "spec",
    [
        {"secrets": {"WANDB": SECRET}, "image": IMAGE},
        {"image": "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime"},
        {"image": "public.ecr.aws/docker/library/python:3.12"},
        {},
    ],
)
def test_a_submission_the_instances_can_read_is_launched(env: Env, spec: dict[str, Any]) -> None:
    sub = submission(**spec)
    assert send(env, sub.model_dump_json(), "submit") == {"batchItemFailures": []}
    assert dead_letters(env) == []
    assert len(env.live_instances(sub.job_id)) == 1


def test_the_home_is_the_function_s_own_region_and_account_not_the_message_s(env: Env) -> None:
    # GIVEN the same function deployed in eu-west-1 of another account: the us-east-1 secret
    # of 123456789012 is out of its instances' reach, whatever the message says
    context = LambdaContext("test", 256, 60)
    context.invoked_function_arn = "arn:aws:lambda:eu-west-1:210987654321:function:commands"
    sub = submission(secrets={"WANDB": SECRET})
    send(env, sub.model_dump_json(), "submit", context)
    record = env.control.jobs.get(sub.job_id)
    assert record is not None and record.state is JobState.FAILED
    reason = record.reason or ""
    assert "is in us-east-1; respot's instances (in every region they run in) read " in reason
    assert "secrets in eu-west-1" in reason
    assert env.instances(sub.job_id) == []


def test_home_falls_back_to_the_region_lambda_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_REGION", "ap-south-1")
    assert Home.of(CONTEXT) == Home("us-east-1", "123456789012")
    assert Home.of(object()) == Home("ap-south-1", None)


def test_a_sweep_whose_job_names_a_foreign_secret_is_refused_before_any_trial(env: Env) -> None:
    base = sweep_submission()
    job = base.spec.job.model_copy(
        update={"secrets": {"WANDB": SECRET.replace("us-east-1", "us-west-2")}}
    )
    sub = SweepSubmission.model_validate(
        {**json.loads(base.model_dump_json()), "submitted_by": None}
        | {
            "spec": {
                **json.loads(base.spec.model_dump_json()),
                "job": json.loads(job.model_dump_json()),
            }
        }
    )
    assert send(env, sub.model_dump_json(), "sweep") == {"batchItemFailures": []}
    (reason,) = dead_letters(env)
    assert reason.startswith(f"sweep {sub.sweep_id} refused before launch: job.secrets.WANDB: ")
    assert "read secrets in us-east-1" in reason


# The stack tells the function what its instances read data from (RESPOT_DATA_BUCKETS: its
# data_bucket_arns; RESPOT_BUCKET: its own bucket, whose jobs/ they read).
GRANTS = "arn:aws:s3:::datasets,arn:aws:s3:::shared/imagenet"


def test_a_submission_past_run_naming_ungranted_data_is_a_failed_job(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RESPOT_DATA_BUCKETS", GRANTS)
    # GIVEN a hand-published job reading a bucket beside a granted one, and a prefix beside one
    sub = submission(
        data=[
            {"s3_uri": "s3://datasets/mnist/", "local_path": "a"},
            {"s3_uri": "s3://datasets-other/x", "local_path": "b"},
            {"s3_uri": "s3://shared/imagenet-21k/", "local_path": "c"},
        ]
    )
    assert send(env, sub.model_dump_json(), "submit") == {"batchItemFailures": []}
    # THEN it is FAILED with run()'s wording for each, and nothing is launched
    assert dead_letters(env) == []
    record = env.control.jobs.get(sub.job_id)
    assert record is not None and record.state is JobState.FAILED
    reason = record.reason or ""
    assert "data[0]" not in reason
    assert (
        "data[1].s3_uri: s3://datasets-other/x is in bucket datasets-other, which respot's "
        "instances may not read: add arn:aws:s3:::datasets-other to the stack's "
        f"data_bucket_arns (now: {GRANTS.replace(',', ', ')}; docs/deploy.md) and redeploy, "
        "or copy the data to a granted bucket"
    ) in reason
    assert "data[2].s3_uri: s3://shared/imagenet-21k/ is outside the prefixes" in reason
    assert env.instances(sub.job_id) == []


def test_granted_data_and_the_deployment_s_own_jobs_are_launched(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RESPOT_DATA_BUCKETS", GRANTS)
    monkeypatch.setenv("RESPOT_BUCKET", "respot-jobs")
    sub = submission(
        data=[
            {"s3_uri": "s3://datasets/mnist/", "local_path": "a"},
            {"s3_uri": "s3://shared/imagenet/train/", "local_path": "b"},
            {"s3_uri": "s3://respot-jobs/jobs/job-1/outputs/", "local_path": "c"},
        ]
    )
    assert send(env, sub.model_dump_json(), "submit") == {"batchItemFailures": []}
    assert dead_letters(env) == []
    assert len(env.live_instances(sub.job_id)) == 1


def test_without_the_stack_s_data_setting_data_is_not_checked(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RESPOT_DATA_BUCKETS", raising=False)
    sub = submission(data=[{"s3_uri": "s3://anything/x/", "local_path": "a"}])
    assert send(env, sub.model_dump_json(), "submit") == {"batchItemFailures": []}
    assert len(env.live_instances(sub.job_id)) == 1


def test_a_sweep_whose_job_names_ungranted_data_is_refused_before_any_trial(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RESPOT_DATA_BUCKETS", "")  # the stack grants no data bucket
    base = sweep_submission()
    job = base.spec.job.model_copy(
        update={"data": [DataSourceEnvVar(s3_uri="s3://datasets/x/", local_path="a")]}
    )
    sub = SweepSubmission.model_validate(
        {**json.loads(base.model_dump_json()), "submitted_by": None}
        | {
            "spec": {
                **json.loads(base.spec.model_dump_json()),
                "job": json.loads(job.model_dump_json()),
            }
        }
    )
    assert send(env, sub.model_dump_json(), "sweep") == {"batchItemFailures": []}
    (reason,) = dead_letters(env)
    assert reason.startswith(
        f"sweep {sub.sweep_id} refused before launch: job.data[0].s3_uri: s3://datasets/x/ is in "
        "bucket datasets, which respot's instances may not read"
    )
    assert "(now: none; docs/deploy.md)" in reason
