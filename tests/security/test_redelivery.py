"""A command whose first delivery failed is not lost when SQS delivers it again.

Lambda retries a failed SQS record only after the commands queue's visibility timeout (360 s),
longer than a proof may live (`DEFAULT_MAX_AGE`, 5 minutes). These tests deliver the very same
SNS envelope twice through the commands handler, the second time 6 minutes later on the
verifier's clock: once after a first try that failed before the proof was verified (STS
unreachable), once after a first try that verified the proof and then failed (the job table).
Both redeliveries must act; a replay in another message must not.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError

import lambdas._commands as reading
from lambdas import commands
from respot.core.states import JobState
from respot.identity.proofs import prove, sts_url
from respot.identity.verify import DynamoProofLedger, Verifier, urllib3_post
from respot.spec.training import TrainingEnvVar
from respot.wire.messages import CancelCommand, JobSubmission, encode
from tests.handlers.test_handlers import CONTEXT, Env
from tests.security.test_hostile_handlers import reasons
from tests.security.test_identity import REGION, Person, person


class Clock:
    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


class FlakySts:
    """STS through urllib3, failing the calls it is told to fail (as a throttle would)."""

    def __init__(self) -> None:
        self.failures = 0
        self.calls = 0

    def __call__(self, url: str, body: bytes, headers: Any, timeout: float) -> tuple[int, bytes]:
        self.calls += 1
        if self.failures:
            self.failures -= 1
            raise OSError("connection timed out")
        return urllib3_post(url, body, headers, timeout)


@pytest.fixture
def setup(env: Env, moto_endpoint: str) -> Iterator[tuple[Env, Clock, FlakySts]]:
    clock, sts = Clock(), FlakySts()
    reading.install_verifier(
        Verifier(
            sts_url=sts_url(REGION, moto_endpoint),
            region=REGION,
            ledger=DynamoProofLedger(env.local.table_name, env.clients["dynamodb"]),
            clock=clock,
            post=sts,
        )
    )
    yield env, clock, sts
    reading.uninstall_verifier()


def envelope(env: Env, command: Any, who: Person, endpoint: str, message_id: str) -> str:
    """The SQS body SNS delivers for `command`, published now (its `Timestamp`)."""
    proof = prove(command, who.session, region=REGION, url=sts_url(REGION, endpoint))
    body = json.loads(env.sns_envelope(encode(command.model_copy(update={"proof": proof})), "x"))
    body["MessageId"] = message_id
    return json.dumps(body)


def deliver(env: Env, body: str) -> dict[str, Any]:
    return commands.handler(env.sqs_event(body), CONTEXT)


def fails_for_retry(env: Env, body: str) -> None:
    """The delivery fails in a way SQS retries (a batch whose one record failed raises)."""
    with pytest.raises(BatchProcessingError):
        deliver(env, body)
    assert reasons(env) == []  # not dead-lettered


def submission() -> JobSubmission:
    return JobSubmission(
        job_id=f"job-{secrets.token_hex(4)}",
        spec=TrainingEnvVar(name="x", entry_point="a.b:C"),
        submitted_at=datetime.now(UTC),
    )


def test_a_submit_redelivered_6_minutes_after_sts_failed_is_recorded(
    setup: tuple[Env, Clock, FlakySts], moto_endpoint: str
) -> None:
    env, clock, sts = setup
    alice = person(moto_endpoint, "alice")
    sub = submission()
    body = envelope(env, sub, alice, moto_endpoint, "sns-submit-1")
    sts.failures = 1
    fails_for_retry(env, body)  # STS unreachable: retried, not dropped
    assert env.control.jobs.get(sub.job_id) is None
    clock.now += timedelta(minutes=6)  # SQS hands it back after the visibility timeout
    assert deliver(env, body) == {"batchItemFailures": []}
    assert reasons(env) == []
    record = env.control.jobs.get(sub.job_id)
    assert record is not None and record.submission.submitted_by == alice.arn
    assert len(env.live_instances(sub.job_id)) == 1


def test_a_cancel_redelivered_6_minutes_after_a_failure_cancels(
    setup: tuple[Env, Clock, FlakySts], moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env, clock, sts = setup
    alice = person(moto_endpoint, "alice")
    sub = submission()
    assert deliver(env, envelope(env, sub, alice, moto_endpoint, "sns-submit")) == {
        "batchItemFailures": []
    }
    cancel = CancelCommand(job_id=sub.job_id, requested_at=datetime.now(UTC))
    body = envelope(env, cancel, alice, moto_endpoint, "sns-cancel-1")
    # The proof verifies, then the job table fails (a throttle): the whole record is retried.
    real_cancel = env.control.cancel

    def throttled(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(env.control, "cancel", real_cancel)
        raise RuntimeError("ProvisionedThroughputExceededException")

    monkeypatch.setattr(env.control, "cancel", throttled)
    fails_for_retry(env, body)
    assert env.control.jobs.get(sub.job_id).state is not JobState.CANCELLED  # type: ignore[union-attr]
    calls = sts.calls
    clock.now += timedelta(minutes=6)
    assert deliver(env, body) == {"batchItemFailures": []}
    assert reasons(env) == []
    assert env.control.jobs.get(sub.job_id).state is JobState.CANCELLED  # type: ignore[union-attr]
    assert env.live_instances(sub.job_id) == []
    assert sts.calls == calls  # the caller verified on the first try was remembered
    # the same proof republished in another message is still a replay
    replay = json.loads(body)
    replay["MessageId"] = "sns-cancel-2"
    deliver(env, json.dumps(replay))
    (reason,) = reasons(env)
    assert "replayed identity proof" in reason


def test_a_command_old_when_published_is_still_refused(
    setup: tuple[Env, Clock, FlakySts], moto_endpoint: str
) -> None:
    env, clock, _ = setup
    alice = person(moto_endpoint, "alice")
    sub = submission()
    body = json.loads(envelope(env, sub, alice, moto_endpoint, "sns-old"))
    # signed now, published (SNS's Timestamp) 6 minutes later, delivered at once
    clock.now += timedelta(minutes=6)
    body["Timestamp"] = clock.now.strftime("%Y-%m-%dT%H:%M:%S.000Z")
    assert deliver(env, json.dumps(body)) == {"batchItemFailures": []}  # dead-lettered
    (reason,) = reasons(env)
    assert reason.startswith("identity: the proof expired") and "when published" in reason
    assert env.control.jobs.get(sub.job_id) is None
