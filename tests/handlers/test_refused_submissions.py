"""A submission the commands function refuses is a FAILED job its submitter can see, when the
refusal can be put on a job of a verified submitter; otherwise it stays dead-lettered.

The researcher who bypasses `run()` (another client, an older SDK, a hand-written message)
and names a secret or an image the instances may not read gets what `run()` would have said,
as the reason of a FAILED job (`respot status`, `JobHandle.status()`, one Slack thread), and
nothing is launched. The identities are the emulator's STS answers to each sender's own signed
proof (tests/security/test_ownership.py), never what the message claims. A refusal never
replaces a job that already has the id, whoever owns it.
"""

from __future__ import annotations

import copy
import json
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime
from io import StringIO
from typing import Any

import pytest
from rich.console import Console

from infra.local import cloud
from infra.local.slack import LocalSlack
from lambdas import commands, notify
from respot.cli.jobs import render_status
from respot.client.handle import JobHandle
from respot.core.job import JobRecord
from respot.core.states import JobState
from respot.identity.proofs import prove, sts_url
from respot.notify import SlackNotifier, SlackTokenSource
from respot.spec.training import TrainingEnvVar
from respot.wire.messages import JobSubmission, encode
from tests.conftest import aws_event
from tests.handlers.test_handlers import CONTEXT, Env, env
from tests.security.test_hostile_handlers import reasons
from tests.security.test_identity import REGION, Person, person
from tests.security.test_ownership import verified

__all__ = ["env", "verified"]  # the fixtures, shared with the other handler tests

CHANNEL = "#ml-training"
# The commands function's home (its context's ARN): us-east-1 of 123456789012.
FOREIGN_SECRET = "arn:aws:secretsmanager:us-west-2:123456789012:secret:respot/jobs/wandb-AbCdEf"
# What `run()` says for it (respot.spec.reach.refused_reads), field first, then the fix.
SAID = (
    f"secrets.WANDB: {FOREIGN_SECRET} is in us-west-2; respot's instances (in every region "
    "they run in) read secrets in us-east-1: create it there, or replicate it"
)


def job_submission(job_id: str, **spec: Any) -> JobSubmission:
    return JobSubmission(
        job_id=job_id,
        spec=TrainingEnvVar(name="mine", entry_point="a.b:C", **spec),
        submitted_at=datetime.now(UTC),
    )


def refusable(job_id: str) -> JobSubmission:
    return job_submission(job_id, secrets={"WANDB": FOREIGN_SECRET})


def signed_body(env: Env, sub: JobSubmission, who: Person, endpoint: str) -> str:
    """The SQS body SNS delivers for `sub` published by `who` (one SNS message id)."""
    proof = prove(sub, who.session, region=REGION, url=sts_url(REGION, endpoint))
    envelope = json.loads(
        env.sns_envelope(encode(sub.model_copy(update={"proof": proof})), "submit")
    )
    envelope["MessageId"] = secrets.token_hex(8)
    return json.dumps(envelope)


def deliver(env: Env, *bodies: str) -> dict[str, Any]:
    return commands.handler(env.sqs_event(*bodies), CONTEXT)


def notifications(env: Env) -> list[dict[str, Any]]:
    """Every message on the notifications queue (received once, then deleted)."""
    sqs, url = env.clients["sqs"], env.local.queue_urls["notifications"]
    out: list[dict[str, Any]] = []
    while page := sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"]
    ).get("Messages", []):
        out.extend(page)
        for m in page:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    return out


@pytest.fixture
def slack(verified: Env) -> Iterator[LocalSlack]:
    """The local Slack, with the notify function's token in place and its notifier installed."""
    with LocalSlack() as server:
        server.add_channel(CHANNEL)
        ssm = verified.local.client("ssm")
        name = verified.local.slack_token_parameter
        ssm.put_parameter(Name=name, Type="SecureString", Value=server.token, Overwrite=True)
        notify.install(
            lambda: SlackNotifier(
                jobs=verified.control.jobs,
                tokens=SlackTokenSource(name, ssm),
                default_channel=CHANNEL,
                base_url=server.base_url,
            )
        )
        yield server
        notify.install(None)


def post_to_slack(env: Env) -> int:
    """Run the notify function over what the notifications queue holds; how many it took."""
    queued = notifications(env)
    sample = aws_event("lambda-sqs-event")["Records"][0]
    records = []
    for m in queued:
        record = copy.deepcopy(sample)
        record.update(messageId=m["MessageId"], body=m["Body"])
        record["attributes"].update(
            MessageGroupId=m["Attributes"]["MessageGroupId"],
            SequenceNumber=m["Attributes"].get("SequenceNumber", "1"),
        )
        records.append(record)
    if records:
        response = notify.handler({"Records": records}, CONTEXT)
        assert response == {"batchItemFailures": []}
    return len(records)


def failed(env: Env, job_id: str) -> JobRecord:
    record = env.control.jobs.get(job_id)
    assert record is not None
    assert record.state is JobState.FAILED
    return record


def test_a_refused_submission_is_a_failed_job_of_its_verified_submitter(
    verified: Env, moto_endpoint: str
) -> None:
    alice = person(moto_endpoint, "alice")
    job_id = f"job-{secrets.token_hex(4)}"
    # GIVEN a hand-published submission that claims someone else and names a foreign secret
    sub = refusable(job_id).model_copy(
        update={"submitted_by": "arn:aws:iam::123456789012:user/admin"}
    )
    # WHEN the commands function reads it
    assert deliver(verified, signed_body(verified, sub, alice, moto_endpoint)) == {
        "batchItemFailures": []
    }
    # THEN it is a FAILED job of alice (STS's answer), its reason what run() says
    record = failed(verified, job_id)
    assert record.submission.submitted_by == alice.arn
    assert record.reason is not None and SAID in record.reason
    assert record.attempts == [] and record.finished_at is not None
    assert [e.kind for e in record.timeline] == ["queued", "failed"]
    # ... nothing is launched, nothing dead-lettered
    assert verified.instances(job_id) == []
    assert reasons(verified) == []
    # ... and the SDK and `respot status` show it
    status = JobHandle(job_id, verified.local.deployment(), cloud.session()).status()
    assert status.state == "FAILED" and status.is_terminal and SAID in (status.reason or "")
    out = StringIO()
    render_status(record, Console(file=out, width=1000, emoji=False), datetime.now(UTC))
    assert "FAILED" in out.getvalue() and f"reason      {record.reason}" in out.getvalue()


def test_a_duplicated_refused_submission_is_one_job_and_one_slack_thread(
    verified: Env, moto_endpoint: str, slack: LocalSlack
) -> None:
    alice = person(moto_endpoint, "alice")
    job_id = f"job-{secrets.token_hex(4)}"
    body = signed_body(verified, refusable(job_id), alice, moto_endpoint)
    # GIVEN one SNS message delivered three times: twice in a batch, then again later
    assert deliver(verified, body, body) == {"batchItemFailures": []}
    assert post_to_slack(verified) == 1
    first = failed(verified, job_id)  # with its Slack thread, which the notifier records
    assert deliver(verified, body) == {"batchItemFailures": []}
    # THEN one record, written once; one notification; one Slack card, one failure reply
    again = failed(verified, job_id)
    assert again.model_dump() == first.model_dump()
    assert post_to_slack(verified) == 0
    assert len([m for m in slack.workspace.top_level(CHANNEL) if job_id in m.text]) == 1
    where = again.notify["slack"]
    replies = slack.thread(where["channel"], where["ts"]).replies
    failures = [r for r in replies if SAID in r.text]
    assert len(failures) == 1, [r.text for r in replies]
    assert reasons(verified) == [] and verified.instances(job_id) == []


@pytest.mark.parametrize("owner", ["alice", "mallory"])
def test_a_refused_submission_never_replaces_a_job_that_has_its_id(
    verified: Env, moto_endpoint: str, owner: str
) -> None:
    people = {"alice": person(moto_endpoint, "alice"), "mallory": person(moto_endpoint, "m")}
    alice = people["alice"]
    job_id = f"job-{secrets.token_hex(4)}"
    # GIVEN alice's running job
    ok = job_submission(job_id)
    assert deliver(verified, signed_body(verified, ok, alice, moto_endpoint)) == {
        "batchItemFailures": []
    }
    before = verified.control.jobs.get(job_id)
    assert before is not None and before.state is JobState.REQUESTED
    (instance,) = verified.live_instances(job_id)
    notifications(verified)
    # WHEN a refusable submission with the same id comes from alice herself, or from mallory
    bad = signed_body(verified, refusable(job_id), people[owner], moto_endpoint)
    assert deliver(verified, bad) == {"batchItemFailures": []}
    # THEN alice's job is exactly as it was: not FAILED, not re-owned, its instance running
    after = verified.control.jobs.get(job_id)
    assert after is not None and after.model_dump() == before.model_dump()
    assert verified.live_instances(job_id) == [instance]
    assert notifications(verified) == []
    # ... and the refused message is dead-lettered with why (the id is taken)
    (reason,) = reasons(verified)
    assert job_id in reason
    if owner == "alice":
        assert "already exists with a different submission" in reason
    else:
        assert f"already belongs to {alice.arn}" in reason


def test_what_cannot_be_attributed_stays_dead_lettered(verified: Env, moto_endpoint: str) -> None:
    alice = person(moto_endpoint, "alice")
    no_proof, forged, wrong_id = (f"job-{secrets.token_hex(4)}" for _ in range(3))
    # no identity proof at all
    unsigned = verified.sns_envelope(refusable(no_proof).model_dump_json(), "submit")
    # a proof alice signed for another job id, under this one
    proof = prove(
        refusable(wrong_id), alice.session, region=REGION, url=sts_url(REGION, moto_endpoint)
    )
    borrowed = verified.sns_envelope(
        encode(refusable(forged).model_copy(update={"proof": proof})), "submit"
    )
    # unreadable, and a command with no job id
    unreadable = verified.sns_envelope("{not json", "submit")
    anonymous = verified.sns_envelope(
        json.dumps({"command": "submit", "spec": {"name": "x", "entry_point": "a.b:C"}}),
        "submit",
    )
    response = deliver(verified, unsigned, borrowed, unreadable, anonymous)
    assert response == {"batchItemFailures": []}
    said = reasons(verified)
    assert len(said) == 4, said
    assert any("carries no identity proof" in r for r in said)
    assert any("signed for another job-id" in r for r in said)
    for job_id in (no_proof, forged, wrong_id):
        assert verified.control.jobs.get(job_id) is None
        assert verified.instances(job_id) == []
    assert notifications(verified) == []
