"""A paced launch is launched again when its launch token is due (issue 26), on the moto
server, through the handlers: the second of two launches into a bucket of one reserves the
next token, the control plane queues a look on `launch-retries` delayed until it is due, and
the launch_retries function, handed that message as Lambda hands it, launches the same pool with
the same client token, taking no second token; a look before it is due launches nothing.
Clocks are the test's (the pacing's and the control plane's), moved by hand."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from infra.local.dispatcher import _lambda_record
from lambdas import commands, launch_retries, reconcile
from respot.aws.pacing import LaunchPacer, Pacing
from respot.core.states import JobState
from tests.handlers.test_handlers import CONTEXT, Env, env, submission

__all__ = ["env"]


class Clocks:
    """The pacing's clock (epoch seconds) and the control plane's, moved together."""

    def __init__(self) -> None:
        self.start = datetime.now(UTC)
        self.offset = 0.0

    def epoch(self) -> float:
        return self.start.timestamp() + self.offset

    def utc(self) -> datetime:
        return self.start + timedelta(seconds=self.offset)


class SentSpy:
    """Records what the control plane sends to the launch-retries queue, and sends it."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.sent: list[dict[str, Any]] = []

    def send_message(self, **kwargs: Any) -> Any:
        self.sent.append(kwargs)
        return self.client.send_message(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


def _receive(env: Env, url: str) -> list[dict[str, Any]]:
    """The queue's messages, waiting for them to become visible (bounded by their delay)."""
    got = env.clients["sqs"].receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=20, AttributeNames=["All"]
    )
    return list(got.get("Messages", []))


def _handle(env: Env, url: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    arn = env.clients["sqs"].get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    records = [_lambda_record(m, arn["Attributes"]["QueueArn"], "us-east-1") for m in messages]
    return launch_retries.handler({"Records": records}, CONTEXT)


def _submit(env: Env) -> str:
    """A job submitted through the commands function."""
    sub = submission()
    response = commands.handler(
        env.sqs_event(env.sns_envelope(sub.model_dump_json(), "submit")), CONTEXT
    )
    assert response == {"batchItemFailures": []}
    return sub.job_id


def _state(env: Env, job_id: str) -> JobState:
    record = env.control.jobs.get(job_id)
    assert record is not None
    return record.state


def test_a_paced_launch_is_launched_again_when_its_token_is_due(env: Env) -> None:
    clocks = Clocks()
    env.control.clock = clocks.utc
    pacing = Pacing(rate_per_second=0.5, burst=1, max_wait_seconds=0.0)
    env.control.capacity.pacer = LaunchPacer(  # type: ignore[attr-defined]
        env.local.table_name, env.clients["dynamodb"], pacing, clock=clocks.epoch
    )
    url = env.control.retries.queue_url
    assert url and url == env.local.queue_urls["launch-retries"]
    spy = SentSpy(env.control.retries.client)
    env.control.retries.client = spy
    # GIVEN two jobs submitted at once into a bucket of one token, refilled every 2 s
    first = _submit(env)
    second = _submit(env)
    assert env.live_instances(first) and not env.live_instances(second)
    # THEN the second is paced with its own token reserved, due in 2 s: a look is queued,
    # delayed by SQS until then; nothing was sent to EC2, and it is not "no capacity"
    assert [(json.loads(s["MessageBody"])["job_id"], s["DelaySeconds"]) for s in spy.sent] == [
        (second, 2)
    ]
    record = env.control.jobs.get(second)
    assert record is not None and record.state is JobState.REQUESTED
    kinds = [e.kind for e in record.timeline]
    assert "paced" in kinds and "waiting" not in kinds and "capacity" not in kinds
    assert record.current is not None and record.current.tried == []
    messages = _receive(env, url)
    assert len(messages) == 1
    # WHEN the look comes early (1 s on) THEN it launches nothing
    clocks.offset = 1.0
    assert _handle(env, url, messages) == {"batchItemFailures": []}
    assert not env.live_instances(second) and len(env.instances(second)) == 0
    # WHEN it comes when the token is due (as SQS delivers it: 2 s on) THEN the same pool is
    # launched, with the same client token, and no second token is taken
    clocks.offset = 2.0
    assert _handle(env, url, messages) == {"batchItemFailures": []}
    launched = env.live_instances(second)
    assert len(launched) == 1
    again = env.control.jobs.get(second)
    assert again is not None and again.current is not None
    assert again.current.instance_id == launched[0]
    assert again.current.client_token == record.current.client_token
    assert again.current.placement == record.current.placement
    bucket = env.clients["dynamodb"].get_item(
        TableName=env.local.table_name,
        Key={"pk": {"S": "PACING#launches"}, "sk": {"S": "PACING"}},
    )["Item"]
    # the bucket as the reservation left it (1 token - 2 taken, at the start): the launch
    # when due took nothing more
    assert float(bucket["tokens"]["N"]) == -1.0
    assert float(bucket["at"]["N"]) == clocks.start.timestamp()
    # AND the minute's tick after it changes nothing more for it
    clocks.offset = 60.0
    reconcile.handler({"source": "aws.events", "detail-type": "Scheduled Event"}, CONTEXT)
    assert env.live_instances(second) == launched and len(env.instances(second)) == 1
    assert _state(env, first) is not JobState.FAILED


def test_a_malformed_look_is_dropped(env: Env) -> None:
    url = env.local.queue_urls["launch-retries"]
    arn = env.clients["sqs"].get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    bad = {"MessageId": "m1", "ReceiptHandle": "r1", "Body": '{"attempt": 1}'}
    record = _lambda_record(bad, arn["Attributes"]["QueueArn"], "us-east-1")
    assert launch_retries.handler({"Records": [record]}, CONTEXT) == {"batchItemFailures": []}
