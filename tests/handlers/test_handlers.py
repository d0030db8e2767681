"""Every Lambda handler on the moto server, fed the sample events from the AWS documentation."""

from __future__ import annotations

import copy
import json
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

import lambdas._runtime as runtime
from infra.local import cloud
from infra.local.dispatcher import LambdaContext
from lambdas import (
    agent_events,
    commands,
    instance_state,
    reconcile,
    spot_fulfillment,
    spot_interruption,
)
from respot.control.config import ENV_DLQ_URL, ControlPlaneConfig
from respot.control.service import ControlPlane
from respot.core.job import Attempt, AttemptEnd, JobRecord, Market
from respot.core.states import JobState
from respot.spec.training import TrainingEnvVar
from respot.wire.messages import (
    AgentMessage,
    AgentProgress,
    AgentStarted,
    CancelCommand,
    JobSubmission,
)
from tests.conftest import aws_event

CONTEXT = LambdaContext("test", 256, 60)


class Env:
    """A provisioned deployment on the moto server with the handlers' control plane installed."""

    def __init__(self, endpoint: str) -> None:
        self.local = cloud.provision(endpoint, prefix=f"t{secrets.token_hex(4)}")
        self.clients = {
            n: self.local.client(n) for n in ("dynamodb", "ec2", "s3", "sqs", "iam", "sts")
        }
        config = ControlPlaneConfig.from_env(self.local.function_env("commands"))
        self.control = ControlPlane.from_config(
            config, session=cloud.session(), clients=self.clients
        )
        runtime.install(lambda: self.control)

    def sqs_event(self, *bodies: str) -> dict[str, Any]:
        sample = aws_event("lambda-sqs-event")["Records"][0]
        records = []
        for i, body in enumerate(bodies):
            record = copy.deepcopy(sample)
            record.update(messageId=f"m{i}", body=body)
            records.append(record)
        return {"Records": records}

    def sns_envelope(self, message: str, command: str) -> str:
        envelope = aws_event("sns-to-sqs-envelope")
        envelope["Message"] = message
        envelope["MessageAttributes"] = {"command": {"Type": "String", "Value": command}}
        # Published now: a proof's age is judged at publication (the sample's is from 2012).
        envelope["Timestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        return json.dumps(envelope)

    def ec2_event(self, name: str, instance_id: str, **detail: str) -> dict[str, Any]:
        event = aws_event(name)
        # A live event: EventBridge stamps it now (the documentation sample's own time is
        # from 2021, and the core records events older than their attempt without acting).
        event["time"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event["detail"]["instance-id"] = instance_id
        event["detail"].update(detail)
        return event

    def instances(self, job_id: str) -> list[dict[str, Any]]:
        reservations = self.clients["ec2"].describe_instances(
            Filters=[{"Name": "tag:respot:job-id", "Values": [job_id]}]
        )["Reservations"]
        return [i for r in reservations for i in r["Instances"]]

    def live_instances(self, job_id: str) -> list[str]:
        return [
            i["InstanceId"]
            for i in self.instances(job_id)
            if i["State"]["Name"] in ("pending", "running")
        ]


@pytest.fixture
def env(
    moto_endpoint: str, aws_credentials: None, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Env]:
    deployment = Env(moto_endpoint)
    # The stack gives each queue-fed function the URL of its own queue's dead-letter queue.
    monkeypatch.setenv(ENV_DLQ_URL, deployment.local.dlq_urls["commands"])
    yield deployment
    runtime.install(None)


def submission(job_id: str | None = None, **spec: Any) -> JobSubmission:
    return JobSubmission(
        job_id=job_id or f"job-{secrets.token_hex(4)}",
        spec=TrainingEnvVar(name="demo", entry_point="pkg.mod:Session", **spec),
        submitted_at=datetime.now(UTC),
    )


def submit_job(env: Env, **spec: Any) -> tuple[str, str]:
    sub = submission(**spec)
    response = commands.handler(
        env.sqs_event(env.sns_envelope(sub.model_dump_json(), "submit")), CONTEXT
    )
    assert response == {"batchItemFailures": []}
    (instance_id,) = env.live_instances(sub.job_id)
    return sub.job_id, instance_id


def test_submit_records_the_job_and_launches_one_tagged_spot_instance(env: Env) -> None:
    # GIVEN a submission inside an SNS envelope inside an SQS record (the real nesting)
    job_id, instance_id = submit_job(env)
    # THEN the job is REQUESTED, its spec is in S3 for the agent, the instance is spot and tagged
    record = env.control.jobs.get(job_id)
    assert record is not None and record.state is JobState.REQUESTED
    assert record.current is not None and record.current.instance_id == instance_id
    (instance,) = env.instances(job_id)
    assert instance["InstanceLifecycle"] == "spot"
    tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
    assert tags["respot:attempt"] == "1" and tags["respot:managed"] == env.local.name
    body = (
        env.clients["s3"]
        .get_object(Bucket=env.local.bucket, Key=f"jobs/{job_id}/submission.json")["Body"]
        .read()
    )
    assert JobSubmission.model_validate_json(body).job_id == job_id
    assert env.control.jobs.instance_owner(instance_id) == (job_id, 1)


def test_duplicate_delivery_launches_nothing_more(env: Env) -> None:
    sub = submission()
    body = env.sns_envelope(sub.model_dump_json(), "submit")
    commands.handler(env.sqs_event(body, body), CONTEXT)
    commands.handler(env.sqs_event(body), CONTEXT)
    assert len(env.instances(sub.job_id)) == 1


def test_poison_message_goes_to_the_dlq_with_its_reason(env: Env) -> None:
    # GIVEN the sample SQS event as AWS documents it: its body is not a job at all
    sample = aws_event("lambda-sqs-event")
    response = commands.handler(sample, CONTEXT)
    # THEN the batch succeeds (the poison is not retried) and the DLQ holds it with the reason
    assert response == {"batchItemFailures": []}
    messages = env.clients["sqs"].receive_message(
        QueueUrl=env.local.dlq_urls["commands"], MessageAttributeNames=["All"]
    )["Messages"]
    assert messages[0]["Body"] == "Message Body"
    assert "JSON" in messages[0]["MessageAttributes"]["reason"]["StringValue"]


def test_invalid_spec_is_poison_with_field_level_reason(env: Env) -> None:
    message = json.dumps(
        {
            "command": "submit",
            "job_id": "j",
            "submitted_at": "2026-01-01T00:00:00Z",
            "spec": {"name": "x", "entry_point": "nope"},
        }
    )
    commands.handler(env.sqs_event(env.sns_envelope(message, "submit")), CONTEXT)
    (dead,) = env.clients["sqs"].receive_message(
        QueueUrl=env.local.dlq_urls["commands"], MessageAttributeNames=["All"]
    )["Messages"]
    assert "entry_point" in dead["MessageAttributes"]["reason"]["StringValue"]


def test_a_transient_failure_fails_only_its_record(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    good, bad = submission(), submission()
    real = env.control.submit

    def flaky(sub: JobSubmission, **how: Any) -> Any:
        if sub.job_id == bad.job_id:
            raise ConnectionError("DynamoDB unreachable")
        return real(sub, **how)

    monkeypatch.setattr(env.control, "submit", flaky)
    event = env.sqs_event(
        env.sns_envelope(good.model_dump_json(), "submit"),
        env.sns_envelope(bad.model_dump_json(), "submit"),
    )
    response = commands.handler(event, CONTEXT)
    assert response == {"batchItemFailures": [{"itemIdentifier": "m1"}]}
    assert env.control.jobs.get(good.job_id) is not None


def test_fulfilment_binds_and_agent_start_runs(env: Env) -> None:
    job_id, iid = submit_job(env)
    result = spot_fulfillment.handler(env.ec2_event("spot-request-fulfillment", iid), CONTEXT)
    assert result["state"] == "STARTING"
    message = AgentMessage(
        job_id=job_id,
        attempt=1,
        instance_id=iid,
        seq=1,
        sent_at=datetime.now(UTC),
        body=AgentStarted(),
    )
    progress = AgentMessage(
        job_id=job_id,
        attempt=1,
        instance_id=iid,
        seq=2,
        sent_at=datetime.now(UTC),
        body=AgentProgress(step=5, total_steps=9),
    )
    response = agent_events.handler(
        env.sqs_event(message.model_dump_json(), progress.model_dump_json()), CONTEXT
    )
    assert response == {"batchItemFailures": []}
    record = env.control.jobs.get(job_id)
    assert record is not None and record.state is JobState.RUNNING
    assert record.progress.step == 5


def test_interruption_warning_replaces_the_instance_at_once(env: Env) -> None:
    job_id, iid = submit_job(env)
    spot_fulfillment.handler(env.ec2_event("spot-request-fulfillment", iid), CONTEXT)
    result = spot_interruption.handler(env.ec2_event("spot-interruption-warning", iid), CONTEXT)
    assert result["state"] == "REQUESTED"
    record = env.control.jobs.get(job_id)
    assert record is not None and record.interruptions == 1 and len(record.attempts) == 2
    assert len(env.live_instances(job_id)) == 2  # the old one until EC2 takes it, and the new
    again = spot_interruption.handler(env.ec2_event("spot-interruption-warning", iid), CONTEXT)
    assert again["outcome"] == "duplicate"
    assert len(env.instances(job_id)) == 2


def test_rebalance_is_noted_without_moving_the_job(env: Env) -> None:
    job_id, iid = submit_job(env)
    spot_fulfillment.handler(env.ec2_event("spot-request-fulfillment", iid), CONTEXT)
    spot_interruption.handler(env.ec2_event("rebalance-recommendation", iid), CONTEXT)
    record = env.control.jobs.get(job_id)
    assert record is not None and record.state is JobState.STARTING
    assert record.timeline[-1].kind == "rebalance"


def test_instance_terminated_without_notice_is_replaced(env: Env) -> None:
    job_id, iid = submit_job(env)
    instance_state.handler(env.ec2_event("instance-state-change", iid, state="running"), CONTEXT)
    env.clients["ec2"].terminate_instances(InstanceIds=[iid])
    result = instance_state.handler(
        env.ec2_event("instance-state-change", iid, state="terminated"), CONTEXT
    )
    assert result["state"] == "REQUESTED"
    assert len(env.live_instances(job_id)) == 1
    assert env.live_instances(job_id) != [iid]
    handoff = env.clients["s3"].get_object(
        Bucket=env.local.bucket, Key=f"jobs/{job_id}/handoff/0001.json"
    )
    assert json.loads(handoff["Body"].read())["by"] == "control-plane"


def test_cancel_terminates_every_instance(env: Env) -> None:
    job_id, _ = submit_job(env)
    # The owner cancels: the submission and the cancel name the same (here: no) principal.
    command = CancelCommand(job_id=job_id, requested_at=datetime.now(UTC))
    response = commands.handler(
        env.sqs_event(env.sns_envelope(command.model_dump_json(), "cancel")), CONTEXT
    )
    assert response == {"batchItemFailures": []}
    record = env.control.jobs.get(job_id)
    assert record is not None and record.state is JobState.CANCELLED
    assert env.live_instances(job_id) == []


def test_one_queue_carries_every_command_each_to_its_own_path(env: Env) -> None:
    # GIVEN one batch off the commands queue: a cancel of a running job, a new submission,
    # and a message whose command respot does not know
    running, _ = submit_job(env)
    fresh = submission()
    cancel = CancelCommand(job_id=running, requested_at=datetime.now(UTC))
    unknown = json.dumps({"command": "frobnicate", "job_id": "j-1"})
    response = commands.handler(
        env.sqs_event(
            env.sns_envelope(cancel.model_dump_json(), "cancel"),
            env.sns_envelope(fresh.model_dump_json(), "submit"),
            env.sns_envelope(unknown, "frobnicate"),
        ),
        CONTEXT,
    )
    # THEN each went its own way: cancelled, submitted, dead-lettered with the reason
    assert response == {"batchItemFailures": []}
    cancelled, submitted = env.control.jobs.get(running), env.control.jobs.get(fresh.job_id)
    assert cancelled is not None and cancelled.state is JobState.CANCELLED
    assert submitted is not None and submitted.state is JobState.REQUESTED
    (dead,) = env.clients["sqs"].receive_message(
        QueueUrl=env.local.dlq_urls["commands"], MessageAttributeNames=["All"]
    )["Messages"]
    assert "frobnicate" in dead["MessageAttributes"]["reason"]["StringValue"]


def test_the_topic_filter_lets_in_exactly_the_commands_that_have_a_path() -> None:
    from infra.wiring import WIRING
    from respot.control.queuecommand import QueueSettingsCommand
    from respot.sweep.model import SweepStopCommand, SweepSubmission

    (intake,) = [q for q in WIRING.queues if q.topic_filter is not None]
    kinds = {
        model.model_fields["command"].default
        for model in (
            JobSubmission,
            CancelCommand,
            SweepSubmission,
            SweepStopCommand,
            QueueSettingsCommand,
        )
    }
    assert set(intake.topic_filter["command"]) == set(commands.PATHS) == kinds


def test_reconcile_looks_at_live_jobs_only(env: Env) -> None:
    _job_id, _ = submit_job(env)
    result = reconcile.handler({"source": "aws.events", "detail-type": "Scheduled Event"}, CONTEXT)
    assert result["jobs"] >= 1
    assert sum(result["outcomes"].values()) == result["jobs"]


@pytest.mark.parametrize(
    "name",
    [
        "spot-request-fulfillment",
        "spot-interruption-warning",
        "rebalance-recommendation",
        "instance-state-change",
    ],
)
def test_documentation_samples_as_they_are_do_not_crash(env: Env, name: str) -> None:
    # The samples name instances respot never launched and carry placeholder times.
    handler = {
        "spot-request-fulfillment": spot_fulfillment,
        "spot-interruption-warning": spot_interruption,
        "rebalance-recommendation": spot_interruption,
        "instance-state-change": instance_state,
    }[name].handler
    result = handler(aws_event(name), CONTEXT)
    assert result["outcome"].startswith("ignored")


@pytest.mark.parametrize(
    "event",
    [
        {},
        {"detail-type": "EC2 Instance State-change Notification"},
        {
            "source": "aws.ec2",
            "detail-type": "EC2 Spot Instance Interruption Warning",
            "detail": {},
        },
        "not json",
        [],
    ],
)
def test_foreign_and_truncated_events_are_ignored(env: Env, event: Any) -> None:
    result = spot_interruption.handler(event, CONTEXT)
    assert result["outcome"].startswith("ignored")


def test_reconcile_terminates_orphans_of_this_deployment_only(env: Env) -> None:
    # GIVEN a live job, an instance of an unknown job, a second instance of the live job's
    # attempt, and an instance of another deployment
    job_id, owned = submit_job(env)
    ec2 = env.clients["ec2"]

    def launch(tags: dict[str, str]) -> str:
        response = ec2.run_instances(
            LaunchTemplate={"LaunchTemplateId": env.local.launch_template_id},
            MinCount=1,
            MaxCount=1,
            TagSpecifications=[
                {
                    "ResourceType": "instance",
                    "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
                }
            ],
        )
        return str(response["Instances"][0]["InstanceId"])

    forgotten = launch(
        {"respot:managed": env.local.name, "respot:job-id": "gone-1", "respot:attempt": "1"}
    )
    duplicate = launch(
        {"respot:managed": env.local.name, "respot:job-id": job_id, "respot:attempt": "1"}
    )
    foreign = launch(
        {"respot:managed": "someone-else", "respot:job-id": "x", "respot:attempt": "1"}
    )
    config = ControlPlaneConfig.from_env(
        {**env.local.function_env("reconcile"), "RESPOT_LAUNCH_TIMEOUT_SECONDS": "0"}
    )
    control = ControlPlane.from_config(config, session=cloud.session(), clients=env.clients)
    # WHEN reconcile looks
    orphans = control.terminate_orphans()
    # THEN only this deployment's unowned instances go; "already gone" is fine the next time
    assert sorted(orphans) == sorted([forgotten, duplicate])
    states = {
        i["InstanceId"]: i["State"]["Name"]
        for r in ec2.describe_instances(InstanceIds=[owned, forgotten, duplicate, foreign])[
            "Reservations"
        ]
        for i in r["Instances"]
    }
    assert states[owned] in ("pending", "running") and states[foreign] in ("pending", "running")
    assert states[forgotten] == states[duplicate] == "terminated"
    assert control.terminate_orphans() == []


def test_reconcile_keeps_the_instance_a_return_to_spot_leaves_until_its_attempt_ends(
    env: Env,
) -> None:
    # GIVEN a job training on its first attempt (on-demand) while a return to spot is being
    # requested: the record's current attempt is the spot one, the first is still open
    job_id, trained_on = submit_job(env)
    now = datetime.now(UTC)

    def mid_return(record: JobRecord | None) -> JobRecord:
        assert record is not None
        r = record.model_copy(deep=True)
        first = r.attempts[0]
        first.placement = first.placement.model_copy(update={"market": Market.ON_DEMAND})
        first.started_at = first.last_heard_at = now
        spot = first.placement.model_copy(update={"market": Market.SPOT})
        r.attempts.append(
            Attempt(number=2, placement=spot, client_token="rs-x-2-2", requested_at=now)
        )
        r.state = JobState.REQUESTED
        r.policy.update(return_from=1, return_attempt=2)
        return r

    env.control.jobs.update(job_id, mid_return)
    # AND the return's spot instance, launched but not yet recorded on the record
    ec2 = env.clients["ec2"]
    tags = {"respot:managed": env.local.name, "respot:job-id": job_id, "respot:attempt": "2"}
    spot_instance = ec2.run_instances(
        LaunchTemplate={"LaunchTemplateId": env.local.launch_template_id},
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[
            {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
        ],
    )["Instances"][0]["InstanceId"]
    config = ControlPlaneConfig.from_env(
        {**env.local.function_env("reconcile"), "RESPOT_LAUNCH_TIMEOUT_SECONDS": "0"}
    )
    control = ControlPlane.from_config(config, session=cloud.session(), clients=env.clients)
    # WHEN reconcile looks THEN neither is an orphan: the first attempt is open, though not
    # the job's current one
    assert control.terminate_orphans() == []

    # AND once the first attempt has ended (stopped for the hand-off), an instance of it that
    # still runs is an orphan and goes; the spot one stays
    def ended(record: JobRecord | None) -> JobRecord:
        assert record is not None
        r = record.model_copy(deep=True)
        r.attempts[0].end = AttemptEnd.INTERRUPTED
        r.attempts[0].ended_at = datetime.now(UTC)
        return r

    env.control.jobs.update(job_id, ended)
    assert control.terminate_orphans() == [trained_on]
    assert env.live_instances(job_id) == [spot_instance]
