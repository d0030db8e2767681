"""Lambda `notify`: SQS FIFO batches, the dead-letter queue for what Slack will never take."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from slack_sdk import WebClient

import lambdas._runtime as runtime
from infra.local.dispatcher import LambdaContext
from lambdas import notify
from respot.notify import JobNotification
from tests.conftest import aws_event
from tests.notify.conftest import Bench, job_id, kinds
from tests.notify.story import Story

CONTEXT = LambdaContext("notify", 256, 30)


def fifo_event(*messages: tuple[str, str]) -> dict[str, Any]:
    """An SQS FIFO event: (message group, body) per record, in queue order."""
    sample = aws_event("lambda-sqs-event")["Records"][0]
    records = []
    for n, (group, body) in enumerate(messages):
        record = copy.deepcopy(sample)
        record.update(messageId=f"m{n}", body=body)
        record["attributes"].update(
            MessageGroupId=group, MessageDeduplicationId=f"d{n}", SequenceNumber=str(1000 + n)
        )
        records.append(record)
    return {"Records": records}


@pytest.fixture
def dead_letters(bench: Bench) -> Iterator[list[tuple[str, str, str]]]:
    letters: list[tuple[str, str, str]] = []
    runtime.install(None, lambda body, reason, source: letters.append((body, reason, source)))

    def impatient(token: str, base_url: str | None) -> WebClient:
        return WebClient(token=token, base_url=base_url, retry_handlers=[])

    notify.install(lambda: bench.notifier(client_factory=impatient))
    yield letters
    notify.install(None)
    runtime.install(None)


def queued(bench: Bench, **spec: Any) -> JobNotification:
    story = Story(job_id(), **spec).submit(0)
    bench.commit(story.records[0])
    return story.notifications[0]


def test_a_batch_posts_each_jobs_news(bench: Bench, dead_letters: list[Any]) -> None:
    a, b = queued(bench), queued(bench)
    response = notify.handler(
        fifo_event((a.job_id, a.model_dump_json()), (b.job_id, b.model_dump_json())), CONTEXT
    )
    assert response == {"batchItemFailures": []}
    assert kinds(bench.thread(a.job_id).replies) == kinds(bench.thread(b.job_id).replies)
    assert dead_letters == []


def test_a_transient_failure_holds_back_the_rest_of_its_job_only(
    bench: Bench, dead_letters: list[Any]
) -> None:
    # GIVEN two messages of job A and one of job B; Slack rate limits the first call
    story = Story(job_id()).submit(0).place("i-1", 5)
    for record in story.records:
        bench.commit(record)
    first, later = story.notifications[0], story.notifications[-1]
    other = queued(bench)
    bench.slack.rate_limit(times=1, retry_after=30)
    calls = len(bench.slack.calls)
    # WHEN the batch is handled
    response = notify.handler(
        fifo_event(
            (first.job_id, first.model_dump_json()),
            (later.job_id, later.model_dump_json()),
            (other.job_id, other.model_dump_json()),
        ),
        CONTEXT,
    )
    # THEN A's two messages go back to the queue (in order, for a later try), B's is posted
    assert response == {"batchItemFailures": [{"itemIdentifier": "m0"}, {"itemIdentifier": "m1"}]}
    assert kinds(bench.thread(other.job_id).replies) == ["queued"]
    assert len(bench.slack.calls) - calls == 3  # A1's refused call, B's card and reply
    assert bench.top_level_of(first.job_id) == []
    assert dead_letters == []


def test_what_slack_will_never_take_goes_to_the_dead_letter_queue(
    bench: Bench, dead_letters: list[Any]
) -> None:
    bench.slack.add_channel("archived-team", archived=True)
    doomed = queued(bench, slack_channel="#archived-team")
    fine = queued(bench)
    response = notify.handler(
        fifo_event(
            (doomed.job_id, doomed.model_dump_json()),
            ("junk", "{not json"),
            (fine.job_id, fine.model_dump_json()),
        ),
        CONTEXT,
    )
    # THEN nothing is retried; both bad messages are dead letters with their reasons
    assert response == {"batchItemFailures": []}
    (body, reason, source), (junk, why, _) = dead_letters
    assert body == doomed.model_dump_json() and source == "notifications"
    assert reason == f"job {doomed.job_id}: Slack refused: is_archived"
    assert junk == "{not json" and why.startswith("not a job notification")
    assert kinds(bench.thread(fine.job_id).replies) == ["queued"]


def test_a_lone_message_slack_cannot_take_yet_is_reported_not_raised(
    bench: Bench, dead_letters: list[Any]
) -> None:
    # GIVEN Slack is down WHEN a batch of one message is handled
    note = queued(bench)
    bench.slack.outage(503)
    response = notify.handler(fifo_event((note.job_id, note.model_dump_json())), CONTEXT)
    # THEN the message goes back to the queue without the invocation counting as an error
    assert response == {"batchItemFailures": [{"itemIdentifier": "m0"}]}
    assert dead_letters == []
