"""Bounded failures through the handlers on moto: foreign instances, refused launches, quotas."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError
from botocore.stub import Stubber

from lambdas import agent_events, commands, instance_state
from respot.control.config import ENV_DLQ_URL
from respot.core.states import JobState
from respot.wire.messages import AgentBootFailed, AgentMessage
from tests.handlers.test_handlers import CONTEXT, Env, submission, submit_job


@pytest.fixture
def env(
    moto_endpoint: str, aws_credentials: None, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Env]:
    import lambdas._runtime as runtime

    deployment = Env(moto_endpoint)
    monkeypatch.setenv(ENV_DLQ_URL, deployment.local.dlq_urls["commands"])
    yield deployment
    runtime.install(None)


def _count_ec2_calls(env: Env) -> list[str]:
    calls: list[str] = []
    env.control.capacity.client.meta.events.register(
        "before-call.ec2.*", lambda model, **_: calls.append(model.name)
    )
    return calls


def _refuse_runinstances(env: Env, code: str, message: str) -> None:
    """EC2's answer to every RunInstances from now on (as the local market answers refusals)."""
    from infra.local.market import _error

    env.control.capacity.client.meta.events.register(
        "before-call.ec2.RunInstances", lambda **_: _error(code, message)
    )


def test_events_of_foreign_instances_cost_no_ec2_call(env: Env) -> None:
    # GIVEN an instance respot did not launch, and a respot job's own instance
    ec2 = env.clients["ec2"]
    foreign = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1)["Instances"][0]
    job_id, ours = submit_job(env)
    calls = _count_ec2_calls(env)
    # WHEN state changes of the foreign instance arrive
    for state in ("running", "stopping", "terminated"):
        event = env.ec2_event("instance-state-change", foreign["InstanceId"], state=state)
        result = instance_state.handler(event, CONTEXT)
        assert result["outcome"] == "ignored: not a respot instance"
    # THEN no EC2 API call was made for them (the owner comes from the table)
    assert calls == []
    # AND the job's own instance is still recognised, from the same table, without EC2
    result = instance_state.handler(
        env.ec2_event("instance-state-change", ours, state="running"), CONTEXT
    )
    assert result["job_id"] == job_id and result["state"] == "STARTING"
    assert calls == []


def test_a_mistyped_instance_type_fails_at_submit_without_a_launch(env: Env) -> None:
    # GIVEN the deployment's allowed types (the local deployment allows its instance_types)
    calls = _count_ec2_calls(env)
    sub = submission(instance_types=["g5.xlarg"])
    response = commands.handler(
        env.sqs_event(env.sns_envelope(sub.model_dump_json(), "submit")), CONTEXT
    )
    # THEN the job is FAILED at once, naming the allowed types, and EC2 was never called
    assert response == {"batchItemFailures": []}
    record = env.control.jobs.get(sub.job_id)
    assert record is not None and record.state is JobState.FAILED
    assert record.reason is not None and "choose from g5.xlarge, g4dn.xlarge" in record.reason
    assert "RunInstances" not in calls


def test_a_launch_ec2_refuses_for_good_fails_the_job_at_once(env: Env) -> None:
    # GIVEN EC2 refuses every launch for a reason no retry fixes
    message = "The image id '[ami-0000]' does not exist"
    _refuse_runinstances(env, "InvalidAMIID.NotFound", message)
    sub = submission()
    # WHEN the job is submitted
    response = commands.handler(
        env.sqs_event(env.sns_envelope(sub.model_dump_json(), "submit")), CONTEXT
    )
    # THEN the submission is handled (not retried) and the job is FAILED with AWS's text
    assert response == {"batchItemFailures": []}
    record = env.control.jobs.get(sub.job_id)
    assert record is not None and record.state is JobState.FAILED
    assert record.reason is not None and message in record.reason
    assert "InvalidAMIID.NotFound" in record.reason


def test_an_unauthorized_launch_is_retried_later_in_the_same_pool(env: Env) -> None:
    # GIVEN IAM refuses the launch (a deploy that picked a new AMI: the role names the new
    # image while this function still launches the previous template version)
    message = "You are not authorized to perform this operation. Encoded message: abc"
    _refuse_runinstances(env, "UnauthorizedOperation", message)
    sub = submission()
    response = commands.handler(
        env.sqs_event(env.sns_envelope(sub.model_dump_json(), "submit")), CONTEXT
    )
    # THEN the job is not failed: it waits for the tick to launch the same pool again
    assert response == {"batchItemFailures": []}
    record = env.control.jobs.get(sub.job_id)
    assert record is not None and record.state is JobState.REQUESTED
    assert record.current is not None and record.current.tried == []
    (note,) = [e for e in record.timeline if e.kind == "launch-refused"]
    assert "UnauthorizedOperation" in note.text and "1 of 4" in note.text


def test_an_aws_internal_error_is_retried_not_fatal(env: Env) -> None:
    _refuse_runinstances(env, "InternalError", "An internal error has occurred")
    sub = submission()
    # The record fails (a batch of one failed record raises; SQS redelivers it) ...
    with pytest.raises(BatchProcessingError):
        commands.handler(env.sqs_event(env.sns_envelope(sub.model_dump_json(), "submit")), CONTEXT)
    # ... and the job waits for its launch: it is not failed.
    record = env.control.jobs.get(sub.job_id)
    assert record is not None and record.state is JobState.REQUESTED


def test_a_spot_quota_error_names_the_quota_its_value_and_the_fix(env: Env) -> None:
    # GIVEN a new account: spot G quota 0 (Service Quotas says so), EC2 refuses spot launches
    import boto3

    quotas = boto3.client("service-quotas", region_name="us-east-1")
    stub = Stubber(quotas)
    stub.add_response(
        "get_service_quota",
        {"Quota": {"QuotaCode": "L-3819A6DF", "Value": 0.0}},
        {"ServiceCode": "ec2", "QuotaCode": "L-3819A6DF"},
    )
    stub.activate()
    env.control.capacity.quotas_client = quotas
    ec2 = env.control.capacity.client

    # EC2 refuses every spot launch, as it does over a spot vCPU quota
    ec2.meta.events.register("before-parameter-build.ec2.RunInstances", _keep_params)
    ec2.meta.events.register("before-call.ec2.RunInstances", _refuse_spot_from_context)
    # WHEN a job is submitted
    sub = submission()
    commands.handler(env.sqs_event(env.sns_envelope(sub.model_dump_json(), "submit")), CONTEXT)
    # THEN it runs on-demand, and its timeline names the quota, its value and the command
    record = env.control.jobs.get(sub.job_id)
    assert record is not None and record.state is JobState.REQUESTED
    assert record.current is not None and record.current.placement.market.value == "on-demand"
    note = next(e for e in record.timeline if e.kind == "quota")
    assert "'All G and VT Spot Instance Requests' (L-3819A6DF) is 0 vCPUs" in note.text
    assert note.data["command"] == (
        "aws service-quotas request-service-quota-increase --service-code ec2 "
        "--quota-code L-3819A6DF --desired-value 4 --region us-east-1"
    )
    stub.assert_no_pending_responses()


def _keep_params(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    context["test_params"] = json.loads(json.dumps(params, default=str))


def _refuse_spot_from_context(context: dict[str, Any], **_: Any) -> Any:
    from infra.local.market import _error

    if context.get("test_params", {}).get("InstanceMarketOptions"):
        return _error("MaxSpotInstanceCountExceeded", "Max spot instance count exceeded")
    return None


def test_boot_failed_reports_fail_the_job_after_three(env: Env) -> None:
    # GIVEN a job whose instances' boot scripts keep reporting a failed boot
    job_id, iid = submit_job(env)
    seen = []
    for n in range(1, 4):
        record = env.control.jobs.get(job_id)
        assert record is not None and record.current is not None
        iid = record.current.instance_id or iid
        seen.append(iid)
        message = AgentMessage(
            job_id=job_id,
            attempt=n,
            instance_id=iid,
            seq=0,
            sent_at=record.updated_at,
            body=AgentBootFailed(
                reason="agent package download failed: AccessDenied", log_tail=["403"]
            ),
        )
        response = agent_events.handler(env.sqs_event(message.model_dump_json()), CONTEXT)
        assert response == {"batchItemFailures": []}
    # THEN the job is FAILED with that reason, and no instance of it is left running
    record = env.control.jobs.get(job_id)
    assert record is not None and record.state is JobState.FAILED
    assert record.reason is not None and "AccessDenied" in record.reason
    assert len(set(seen)) == 3
    assert env.live_instances(job_id) == []
