"""`checkpoint_first` on a cancel (issue 27), through the real commands handler: a raw message
whose value is not a JSON boolean is dead-lettered naming the field, nothing done; the field
is bound by the identity proof like the rest of the command (added or removed after signing:
refused); the owner's signed cancel of a training job asks its agent to checkpoint and stop
(the control object in S3), the job still RUNNING until the agent's report ends it."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from botocore.exceptions import ClientError

from lambdas import commands
from respot.core.events import AgentReport
from respot.core.states import JobState
from respot.identity.proofs import prove, sts_url
from respot.storage import layout
from respot.wire.messages import AgentMessage, AgentPreempted, CancelCommand, encode
from tests.control.test_budget_hard import save_training
from tests.handlers.test_handlers import CONTEXT, Env
from tests.security.test_hostile_handlers import reasons
from tests.security.test_identity import REGION, Person, person
from tests.security.test_ownership import new_job, verified

__all__ = ["verified"]  # the fixture, imported for pytest


def _training(env: Env, who: Person, endpoint: str) -> str:
    """A job of `who`'s, launched, now RUNNING with a checkpoint at step 40."""
    job_id = new_job(env, who, endpoint)
    record = env.control.jobs.get(job_id)
    assert record is not None and record.current is not None
    assert record.current.instance_id is not None
    now = datetime.now(UTC)
    att = record.current.model_copy(
        update={"started_at": now - timedelta(minutes=5), "last_heard_at": now}
    )
    save_training(env, record, att, now)
    return job_id


def _send(env: Env, message: dict[str, object], message_id: str) -> None:
    envelope = json.loads(env.sns_envelope(json.dumps(message), "cancel"))
    envelope["MessageId"] = message_id
    assert commands.handler(env.sqs_event(json.dumps(envelope)), CONTEXT) == {
        "batchItemFailures": []
    }  # refused messages are dead-lettered with their reason, not retried


def _signed(command: CancelCommand, who: Person, endpoint: str) -> dict[str, object]:
    proof = prove(command, who.session, region=REGION, url=sts_url(REGION, endpoint))
    message: dict[str, object] = json.loads(encode(command.model_copy(update={"proof": proof})))
    return message


def _control_object(env: Env, job_id: str) -> dict[str, object] | None:
    try:
        got = env.clients["s3"].get_object(
            Bucket=env.control.bucket, Key=layout.control_key(job_id, 1)
        )
    except ClientError:
        return None
    said: dict[str, object] = json.loads(got["Body"].read())
    return said


@pytest.mark.parametrize("value", ["yes", "true", 1, 0, None, [True], {"on": True}])
def test_a_non_boolean_is_refused_naming_the_field(
    verified: Env, moto_endpoint: str, value: object
) -> None:
    alice = person(moto_endpoint, "alice")
    job_id = _training(verified, alice, moto_endpoint)
    message = _signed(
        CancelCommand(job_id=job_id, requested_at=datetime.now(UTC)), alice, moto_endpoint
    )
    message["checkpoint_first"] = value
    _send(verified, message, f"bad-{type(value).__name__}")
    (reason,) = reasons(verified)
    if value is None:  # `null` is not "absent": it is not what was signed
        assert "identity" in reason and "another content" in reason, reason
    else:
        assert "checkpoint_first" in reason, reason
    record = verified.control.jobs.get(job_id)
    assert record is not None and record.state is JobState.RUNNING
    assert "stopping" not in record.policy and _control_object(verified, job_id) is None


def test_the_field_is_bound_by_the_identity_proof(verified: Env, moto_endpoint: str) -> None:
    alice = person(moto_endpoint, "alice")
    job_id = _training(verified, alice, moto_endpoint)
    now = datetime.now(UTC)
    # signed as a plain cancel, sent as one that checkpoints first: refused
    plain = _signed(CancelCommand(job_id=job_id, requested_at=now), alice, moto_endpoint)
    _send(verified, {**plain, "checkpoint_first": True}, "added")
    # signed as one that checkpoints first, sent without it: refused
    first = _signed(
        CancelCommand(job_id=job_id, requested_at=now, checkpoint_first=True), alice, moto_endpoint
    )
    _send(verified, {k: v for k, v in first.items() if k != "checkpoint_first"}, "removed")
    found = reasons(verified)
    assert len(found) == 2 and all("another content" in r for r in found), found
    record = verified.control.jobs.get(job_id)
    assert record is not None and record.state is JobState.RUNNING
    assert verified.live_instances(job_id) != []


def test_the_owners_cancel_checkpoints_first_then_ends_cancelled(
    verified: Env, moto_endpoint: str
) -> None:
    alice = person(moto_endpoint, "alice")
    job_id = _training(verified, alice, moto_endpoint)
    command = CancelCommand(
        job_id=job_id,
        reason="workspace nlp stopped by its owner",
        requested_at=datetime.now(UTC),
        checkpoint_first=True,
    )
    _send(verified, _signed(command, alice, moto_endpoint), "graceful")
    assert reasons(verified) == []
    # THEN its agent is asked to checkpoint and stop, naming who asked; nothing is terminated
    said = _control_object(verified, job_id)
    assert said is not None and said["notice"] == "stop", said
    assert f"stopped by its owner by {alice.arn}" in str(said["reason"])
    record = verified.control.jobs.get(job_id)
    assert record is not None and record.state is JobState.RUNNING
    assert record.policy["stopping"]["cause"] == "owner"
    assert len(verified.live_instances(job_id)) == 1
    # WHEN the agent reports it stopped after its notice checkpoint
    instance = record.current.instance_id if record.current else None
    assert instance is not None
    body = AgentPreempted(step=44, checkpoint_step=44, notice="stop")
    message = AgentMessage(
        job_id=job_id, attempt=1, instance_id=instance, seq=99, sent_at=datetime.now(UTC),
        body=body,
    )  # fmt: skip
    verified.control.apply(job_id, AgentReport(message))
    # THEN it is CANCELLED with the reason and the checkpoint named; its instance is gone
    final = verified.control.jobs.get(job_id)
    assert final is not None and final.state is JobState.CANCELLED
    assert final.reason is not None and f"by {alice.arn}" in final.reason
    assert "is kept in S3" in final.reason
    assert verified.live_instances(job_id) == []
