"""Hostile raw input at the handlers: every refusal is a dead letter with its reason.

Ids, nesting, foreign owners, malformed and late EC2 events: nothing here may launch an
instance, replace another job's record or spec, or crash a batch.
"""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError

from lambdas import agent_events, commands, instance_state, spot_interruption
from respot.core.events import AgentReport
from respot.core.states import JobState
from respot.spec.training import TrainingEnvVar
from respot.storage import layout
from respot.wire.messages import AgentMessage, AgentProgress, JobSubmission
from tests.handlers.test_handlers import CONTEXT, Env, submit_job


def dead_letters(env: Env, queue: str = "commands") -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while True:
        page = (
            env.clients["sqs"]
            .receive_message(
                QueueUrl=env.local.dlq_urls[queue],
                MessageAttributeNames=["All"],
                MaxNumberOfMessages=10,
            )
            .get("Messages", [])
        )
        if not page:
            return out
        out.extend(page)
        for m in page:
            env.clients["sqs"].delete_message(
                QueueUrl=env.local.dlq_urls[queue], ReceiptHandle=m["ReceiptHandle"]
            )


def reasons(env: Env) -> list[str]:
    return [m["MessageAttributes"]["reason"]["StringValue"] for m in dead_letters(env)]


def raw_submission(job_id: str, **extra: Any) -> str:
    message = {
        "command": "submit",
        "job_id": job_id,
        "submitted_at": datetime.now(UTC).isoformat(),
        "spec": {"name": "x", "entry_point": "a.b:C"},
        **extra,
    }
    return json.dumps(message)


def all_instances(env: Env) -> list[dict[str, Any]]:
    pages = env.clients["ec2"].describe_instances()["Reservations"]
    return [i for r in pages for i in r["Instances"]]


HOSTILE_IDS = [
    "",
    " ",
    "job-1 ",
    "../../x",  # hostile-path
    "/abs",
    "a/b",
    "job\n",
]


@pytest.mark.parametrize("job_id", HOSTILE_IDS)
def test_invalid_ids_are_dead_lettered_and_never_launched(env: Env, job_id: str) -> None:
    before = len(all_instances(env))
    body = env.sns_envelope(raw_submission(job_id), "submit")
    response = commands.handler(env.sqs_event(body), CONTEXT)
    assert response == {"batchItemFailures": []}
    (reason,) = reasons(env)
    assert reason.startswith("submit.job_id:") and "is not a job id" in reason
    assert len(all_instances(env)) == before
    scan = env.clients["dynamodb"].scan(TableName=env.local.table_name)["Items"]
    assert not [i for i in scan if i["pk"]["S"] == f"JOB#{job_id}"]


def test_cancel_with_an_invalid_id_is_dead_lettered(env: Env) -> None:
    body = json.dumps(
        {
            "command": "cancel",
            "job_id": "../x",  # hostile-path
            "requested_at": datetime.now(UTC).isoformat(),
        }
    )
    commands.handler(env.sqs_event(env.sns_envelope(body, "cancel")), CONTEXT)
    (reason,) = reasons(env)
    assert "job_id" in reason and "is not a job id" in reason


@pytest.mark.parametrize("depth", [100, 5000, 100_000])
def test_deeply_nested_bodies_are_dead_lettered_at_once_with_the_reason(
    env: Env, depth: int
) -> None:
    nested = "[" * depth + "]" * depth
    # As the SNS message, and as the whole SQS body.
    as_message = env.sns_envelope(
        raw_submission("job-1").replace(
            '"a.b:C"}', f'"a.b:C", "hyperparameters": {{"x": {nested}}}}}'
        ),
        "submit",
    )
    bodies = [as_message, nested] if len(nested) < 200_000 else [nested]
    response = commands.handler(env.sqs_event(*bodies), CONTEXT)
    assert response == {"batchItemFailures": []}  # not retried: poison, at once
    found = reasons(env)
    assert len(found) == len(bodies)
    assert all("nests" in r and "levels deep" in r for r in found), found


def test_an_oversize_body_is_dead_lettered_with_the_reason(env: Env) -> None:
    body = env.sns_envelope(raw_submission("job-1", provenance={"host": "x" * 300_000}), "submit")
    commands.handler(env.sqs_event(body), CONTEXT)
    (reason,) = reasons(env)
    assert "bytes; at most" in reason


def test_agent_message_with_a_hostile_id_is_dead_lettered(env: Env) -> None:
    body = json.dumps(
        {
            "job_id": "../../etc",  # hostile-path
            "attempt": 1,
            "instance_id": "i-1",
            "seq": 0,
            "sent_at": datetime.now(UTC).isoformat(),
            "body": {"kind": "progress"},
        }
    )
    response = agent_events.handler(env.sqs_event(body), CONTEXT)
    assert response == {"batchItemFailures": []}
    (reason,) = reasons(env)
    assert "job id" in reason


# ---- create-only -----------------------------------------------------------------------------


def _sub(job_id: str, by: str | None, **spec: Any) -> JobSubmission:
    return JobSubmission(
        job_id=job_id,
        spec=TrainingEnvVar(name="victim", entry_point="pkg.mod:Session", **spec),
        submitted_at=datetime.now(UTC),
        submitted_by=by,
    )


def _stored_spec(env: Env, job_id: str) -> bytes:
    key = layout.submission_key(job_id)
    return bytes(env.clients["s3"].get_object(Bucket=env.local.bucket, Key=key)["Body"].read())


def test_a_reused_id_from_another_owner_replaces_nothing_and_is_reported(env: Env) -> None:
    # GIVEN alice's job, recorded and launched
    job_id = f"job-{secrets.token_hex(4)}"
    alice = _sub(job_id, "arn:aws:iam::123456789012:user/alice", hyperparameters={"lr": 0.1})
    commands.handler(env.sqs_event(env.sns_envelope(alice.model_dump_json(), "submit")), CONTEXT)
    spec_before = _stored_spec(env, job_id)
    record_before = env.control.jobs.get(job_id)
    # WHEN mallory publishes a submission with the same id and her own hyperparameters
    mallory = _sub(
        job_id,
        "arn:aws:iam::123456789012:user/mallory",
        hyperparameters={"lr": 99},
        environment={"EVIL": "1"},
    )
    response = commands.handler(
        env.sqs_event(env.sns_envelope(mallory.model_dump_json(), "submit")), CONTEXT
    )
    # THEN it is dead-lettered with the reason; alice's spec, record and instance are untouched
    assert response == {"batchItemFailures": []}
    (reason,) = reasons(env)
    assert f"job id {job_id} already belongs to arn:aws:iam::123456789012:user/alice" in reason
    assert _stored_spec(env, job_id) == spec_before
    after = env.control.jobs.get(job_id)
    assert after is not None and record_before is not None
    assert after.version == record_before.version
    assert after.submission.spec.hyperparameters == {"lr": 0.1}
    assert len(env.instances(job_id)) == 1


def test_the_same_owner_cannot_replace_a_job_either(env: Env) -> None:
    job_id = f"job-{secrets.token_hex(4)}"
    first = _sub(job_id, "arn:aws:iam::123456789012:user/alice")
    commands.handler(env.sqs_event(env.sns_envelope(first.model_dump_json(), "submit")), CONTEXT)
    spec_before = _stored_spec(env, job_id)
    second = _sub(job_id, "arn:aws:iam::123456789012:user/alice", seed=7)
    commands.handler(env.sqs_event(env.sns_envelope(second.model_dump_json(), "submit")), CONTEXT)
    (reason,) = reasons(env)
    assert "already exists with a different submission" in reason
    assert _stored_spec(env, job_id) == spec_before


def test_a_true_redelivery_is_a_no_op(env: Env) -> None:
    sub = _sub(f"job-{secrets.token_hex(4)}", "arn:aws:iam::123456789012:user/alice")
    body = env.sns_envelope(sub.model_dump_json(), "submit")
    commands.handler(env.sqs_event(body), CONTEXT)
    version = env.control.jobs.get(sub.job_id).version  # type: ignore[union-attr]
    commands.handler(env.sqs_event(body, body), CONTEXT)
    assert reasons(env) == []
    assert env.control.jobs.get(sub.job_id).version == version  # type: ignore[union-attr]
    assert len(env.instances(sub.job_id)) == 1


def test_the_record_is_written_before_the_spec_and_a_crash_between_is_repaired(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the S3 write of submission.json fails once, after the record was created
    sub = _sub(f"job-{secrets.token_hex(4)}", "arn:aws:iam::123456789012:user/alice")
    real_put = env.control.s3.put_object
    failed: list[str] = []

    def crash_once(**kwargs: Any) -> Any:
        if kwargs["Key"].endswith("submission.json") and not failed:
            failed.append(kwargs["Key"])
            assert env.control.jobs.get(sub.job_id) is not None  # the record came first
            raise ConnectionError("crash between the record and the spec")
        return real_put(**kwargs)

    monkeypatch.setattr(env.control.s3, "put_object", crash_once)
    body = env.sns_envelope(sub.model_dump_json(), "submit")
    with pytest.raises(BatchProcessingError):  # the whole batch failed: SQS delivers it again
        commands.handler(env.sqs_event(body), CONTEXT)
    assert env.instances(sub.job_id) == []  # nothing launched without the spec in S3
    # WHEN SQS delivers it again
    commands.handler(env.sqs_event(body), CONTEXT)
    # THEN the spec is stored and no dead letter was written
    assert JobSubmission.model_validate_json(_stored_spec(env, sub.job_id)).job_id == sub.job_id
    assert reasons(env) == []


def test_environment_values_are_not_in_the_record(env: Env) -> None:
    sub = _sub(f"job-{secrets.token_hex(4)}", None, environment={"WANDB_KEY": "s3cr3t"})
    commands.handler(env.sqs_event(env.sns_envelope(sub.model_dump_json(), "submit")), CONTEXT)
    item = env.clients["dynamodb"].get_item(
        TableName=env.local.table_name, Key={"pk": {"S": f"JOB#{sub.job_id}"}, "sk": {"S": "JOB"}}
    )["Item"]
    assert "s3cr3t" not in json.dumps(item)
    assert "WANDB_KEY" in item["doc"]["S"]  # the name is kept, for `respot status`
    assert b"s3cr3t" in _stored_spec(env, sub.job_id)  # the agent gets the value


# ---- EC2 events ------------------------------------------------------------------------------


def test_an_event_with_undocumented_field_names_is_not_acted_on(env: Env) -> None:
    # GIVEN a job running on one instance
    job_id, iid = submit_job(env)
    # WHEN an interruption warning spells the instance id `instance_id` (not `instance-id`)
    event = env.ec2_event("spot-interruption-warning", "ignored")
    del event["detail"]["instance-id"]
    event["detail"]["instance_id"] = iid
    result = spot_interruption.handler(event, CONTEXT)
    # THEN it is ignored as malformed: no replacement, still one instance
    assert result["outcome"].startswith("ignored: malformed")
    assert env.live_instances(job_id) == [iid]
    assert env.control.jobs.get(job_id).state is JobState.REQUESTED  # type: ignore[union-attr]


def test_a_warning_older_than_the_attempt_is_recorded_not_acted_on(env: Env) -> None:
    job_id, iid = submit_job(env)
    event = env.ec2_event("spot-interruption-warning", iid)
    event["time"] = (datetime.now(UTC) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    result = spot_interruption.handler(event, CONTEXT)
    assert result["outcome"] == "recorded: stale event"
    record = env.control.jobs.get(job_id)
    assert record is not None and record.interruptions == 0
    assert record.timeline[-1].kind == "stale-event"
    assert env.live_instances(job_id) == [iid]
    # and a state change stamped before the attempt does not end it either
    down = env.ec2_event("instance-state-change", iid, state="terminated")
    down["time"] = event["time"]
    assert instance_state.handler(down, CONTEXT)["outcome"] == "recorded: stale event"
    assert env.control.jobs.get(job_id).current.end is None  # type: ignore[union-attr]


def test_a_fresh_warning_still_acts(env: Env) -> None:
    job_id, iid = submit_job(env)
    event = env.ec2_event("spot-interruption-warning", iid)
    event["time"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    spot_interruption.handler(event, CONTEXT)
    record = env.control.jobs.get(job_id)
    assert record is not None and record.interruptions == 1


def test_late_warnings_while_the_agent_still_reports_are_recorded_rebalances_still_count(
    env: Env,
) -> None:
    job_id, iid = submit_job(env)
    now = datetime.now(UTC)
    # the agent reports now, from the current instance
    env.control.apply(
        job_id,
        AgentReport(
            AgentMessage(
                job_id=job_id,
                attempt=1,
                instance_id=iid,
                seq=1,
                sent_at=now,
                body=AgentProgress(step=5),
            )
        ),
    )
    # an interruption warning stamped 10 minutes ago cannot be about an instance still talking
    stale = env.ec2_event("spot-interruption-warning", iid)
    stale["time"] = (now - timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    # (the attempt itself was requested just now, so shift its request time back first)
    record = env.control.jobs.get(job_id)
    assert record is not None and record.current is not None
    record.current.requested_at = now - timedelta(hours=1)
    env.control.jobs.save(record, expected_version=record.version)
    assert spot_interruption.handler(stale, CONTEXT)["outcome"] == "recorded: stale event"
    # but a rebalance recommendation of the same age is still noted: it does not end anything
    late = env.ec2_event("rebalance-recommendation", iid)
    late["time"] = stale["time"]
    spot_interruption.handler(late, CONTEXT)
    record = env.control.jobs.get(job_id)
    assert record is not None and record.interruptions == 0
    assert record.timeline[-1].kind == "rebalance"
