"""Ownership through the real handlers: the caller STS names is the owner; only the owner or
an admin principal may cancel. Each researcher is an IAM user of the emulator with a key of
their own, so the identities come from STS's answers, not from anything the sender wrote."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

import lambdas._commands as reading
from lambdas import commands
from respot.core.states import JobState
from respot.identity.proofs import prove, sts_url
from respot.identity.verify import DynamoProofLedger, Verifier
from respot.spec.training import TrainingEnvVar
from respot.wire.messages import CancelCommand, JobSubmission, encode
from tests.handlers.test_handlers import CONTEXT, Env
from tests.security.test_hostile_handlers import reasons
from tests.security.test_identity import REGION, Person, person


@pytest.fixture
def verified(env: Env, moto_endpoint: str) -> Iterator[Env]:
    reading.install_verifier(
        Verifier(
            sts_url=sts_url(REGION, moto_endpoint),
            region=REGION,
            ledger=DynamoProofLedger(env.local.table_name, env.clients["dynamodb"]),
        )
    )
    yield env
    reading.uninstall_verifier()


def publish(env: Env, command: Any, who: Person, endpoint: str, *, message_id: str = "") -> Any:
    proof = prove(command, who.session, region=REGION, url=sts_url(REGION, endpoint))
    envelope = json.loads(
        env.sns_envelope(encode(command.model_copy(update={"proof": proof})), "x")
    )
    envelope["MessageId"] = message_id or secrets.token_hex(8)
    return commands.handler(env.sqs_event(json.dumps(envelope)), CONTEXT)


def new_job(env: Env, who: Person, endpoint: str, **claims: Any) -> str:
    job_id = f"job-{secrets.token_hex(4)}"
    sub = JobSubmission(
        job_id=job_id,
        spec=TrainingEnvVar(name="mine", entry_point="a.b:C"),
        submitted_at=datetime.now(UTC),
        **claims,
    )
    assert publish(env, sub, who, endpoint) == {"batchItemFailures": []}
    return job_id


def cancel_cmd(job_id: str, **claims: Any) -> CancelCommand:
    return CancelCommand(job_id=job_id, requested_at=datetime.now(UTC), **claims)


def test_the_owner_is_the_caller_sts_names_not_the_claim(verified: Env, moto_endpoint: str) -> None:
    alice = person(moto_endpoint, "alice")
    job_id = new_job(
        verified, alice, moto_endpoint, submitted_by="arn:aws:iam::123456789012:user/admin"
    )
    record = verified.control.jobs.get(job_id)
    assert record is not None and record.submission.submitted_by == alice.arn
    assert record.submission.proof is None  # the proof is not kept


def test_the_instances_owner_tag_is_the_user_id_sts_names_not_the_claim(
    verified: Env, moto_endpoint: str
) -> None:
    """The tag the researcher policy's Session Manager grant compares with `${aws:userid}`
    (infra/constructs/workspaces.py) is STS's `UserId` of the submitter, whatever they wrote."""
    alice, mallory = person(moto_endpoint, "alice"), person(moto_endpoint, "mallory")
    sts = mallory.session.client("sts", endpoint_url=moto_endpoint)
    mallory_id = sts.get_caller_identity()["UserId"]
    alice_id = alice.session.client("sts", endpoint_url=moto_endpoint).get_caller_identity()[
        "UserId"
    ]
    assert alice_id and alice_id != mallory_id
    job_id = new_job(verified, alice, moto_endpoint, submitted_by_id=mallory_id)
    record = verified.control.jobs.get(job_id)
    assert record is not None and record.submission.submitted_by_id == alice_id
    (instance,) = verified.instances(job_id)
    tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
    assert tags["respot:owner"] == alice_id


def test_only_the_owner_can_cancel(verified: Env, moto_endpoint: str) -> None:
    alice, mallory = person(moto_endpoint, "alice"), person(moto_endpoint, "mallory")
    job_id = new_job(verified, alice, moto_endpoint)
    # mallory claims to be alice
    publish(verified, cancel_cmd(job_id, requested_by=alice.arn), mallory, moto_endpoint)
    (reason,) = reasons(verified)
    assert f"{mallory.arn} may not cancel job {job_id}" in reason
    assert f"it belongs to {alice.arn}" in reason
    assert verified.control.jobs.get(job_id).state is not JobState.CANCELLED  # type: ignore[union-attr]
    assert len(verified.live_instances(job_id)) == 1
    # alice can
    publish(verified, cancel_cmd(job_id), alice, moto_endpoint)
    assert verified.control.jobs.get(job_id).state is JobState.CANCELLED  # type: ignore[union-attr]
    assert verified.live_instances(job_id) == []


def test_an_admin_principal_can_cancel_any_job(
    verified: Env, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice, ops = person(moto_endpoint, "alice"), person(moto_endpoint, "ops")
    monkeypatch.setenv("RESPOT_ADMIN_PRINCIPALS", f"arn:aws:iam::123456789012:role/X,{ops.arn}")
    job_id = new_job(verified, alice, moto_endpoint)
    publish(verified, cancel_cmd(job_id), ops, moto_endpoint)
    assert reasons(verified) == []
    assert verified.control.jobs.get(job_id).state is JobState.CANCELLED  # type: ignore[union-attr]


def test_a_submission_without_a_proof_is_dead_lettered(verified: Env) -> None:
    sub = JobSubmission(
        job_id=f"job-{secrets.token_hex(4)}",
        spec=TrainingEnvVar(name="x", entry_point="a.b:C"),
        submitted_at=datetime.now(UTC),
    )
    commands.handler(
        verified.sqs_event(verified.sns_envelope(sub.model_dump_json(), "submit")), CONTEXT
    )
    (reason,) = reasons(verified)
    assert reason.startswith("identity: submit of") and "carries no identity proof" in reason
    assert verified.control.jobs.get(sub.job_id) is None


def test_a_republished_message_is_a_replay(verified: Env, moto_endpoint: str) -> None:
    alice = person(moto_endpoint, "alice")
    sub = JobSubmission(
        job_id=f"job-{secrets.token_hex(4)}",
        spec=TrainingEnvVar(name="x", entry_point="a.b:C"),
        submitted_at=datetime.now(UTC),
    )
    proof = prove(sub, alice.session, region=REGION, url=sts_url(REGION, moto_endpoint))
    body = json.loads(verified.sns_envelope(encode(sub.model_copy(update={"proof": proof})), "s"))
    for message_id in ("first", "first", "second"):
        body["MessageId"] = message_id
        commands.handler(verified.sqs_event(json.dumps(body)), CONTEXT)
    (reason,) = reasons(verified)  # the redelivery of "first" passed, "second" did not
    assert "replayed identity proof" in reason
    assert len(verified.instances(sub.job_id)) == 1
