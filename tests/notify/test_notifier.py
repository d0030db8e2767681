"""The notifier against the local Slack over real HTTP (slack_sdk) and a job table on moto."""

from __future__ import annotations

import time
from typing import Any

import pytest
from slack_sdk import WebClient

from infra.local.slack import LocalSlack
from respot.aws.jobs import JobTable
from respot.core.job import JobRecord
from respot.notify import SlackPermanentError, SlackTokenSource, SlackTransientError
from tests.notify.conftest import CHANNEL, Bench, job_id, kinds
from tests.notify.story import Story, every_second, interrupted_story


def test_one_card_edited_in_place_and_every_reply_in_its_thread(bench: Bench) -> None:
    # GIVEN a job interrupted once and resumed to completion, notified commit by commit
    story = interrupted_story(job_id())
    # WHEN every notification is delivered in order
    done = bench.play(story, bench.notifier())
    # THEN one parent card was posted, then edited once per later notification
    assert [d.posted_card for d in done].count(True) == 1 and done[0].posted_card
    assert all(d.updated_card for d in done[1:])
    (parent,) = bench.top_level_of(story.job_id)
    thread = bench.thread(story.job_id)
    assert thread.parent is parent
    assert len(parent.edits) == len(done) - 1
    # AND the card shows the job's final state, cost and savings
    assert parent.text.startswith(f"demo ({story.job_id}) is COMPLETED")
    assert "% saved" in parent.text
    # AND the replies are the news, in the order the job lived them, all in the thread
    expected = [e.kind for n in story.notifications for e in n.entries]
    expected = [k for k in expected if k not in ("requested", "checkpoint")]
    assert kinds(thread.replies) == expected
    assert expected[:4] == ["queued", "placed", "started", "progress"]
    assert expected[-1] == "completed" and "resumed" in expected
    # AND the thread is remembered on the job record, by channel id
    record = bench.jobs.get(story.job_id)
    assert record is not None
    assert record.notify["slack"] == {"channel": bench.channel_id, "ts": parent.ts}


def test_heartbeats_cost_slack_nothing_only_the_throttled_notes_reply(bench: Bench) -> None:
    # GIVEN a job that reports progress every 30 s for 30 minutes, notes every 10 minutes
    story = Story(job_id(), settings=every_second(600)).submit(0).place("i-1", 5)
    story.start("i-1", 1, 10)
    for n in range(1, 61):
        story.progress("i-1", 1, n * 10, 10 + 30 * n, total=600, loss=1.0 / n)
    before = len(bench.slack.calls)
    # WHEN its notifications are delivered
    bench.play(story, bench.notifier())
    # THEN Slack heard of three progress notes, one reply each, not of 60 heartbeats
    thread = bench.thread(story.job_id)
    assert kinds(thread.replies) == ["queued", "placed", "started", *["progress"] * 3]
    calls = len(bench.slack.calls) - before
    assert calls == len(story.notifications) + len(thread.replies)  # one card call per message


def test_a_notify_write_never_undoes_a_concurrent_control_plane_change(bench: Bench) -> None:
    # GIVEN a queued job, and a control plane that commits the placement just as the notifier
    # is about to remember the new thread on the record
    story = Story(job_id()).submit(0)
    bench.commit(story.records[0])
    story.place("i-1", 5)
    raced = []

    class RacingTable(JobTable):
        def save(self, record: JobRecord, *, expected_version: int | None) -> JobRecord:
            if not raced and record.notify:
                raced.append(bench.commit(story.record))  # the control plane wins the race
            return super().save(record, expected_version=expected_version)

    racing = RacingTable(bench.jobs.table_name, bench.jobs.client)
    # WHEN the queued notification is delivered
    bench.notifier(jobs=racing).deliver(story.notifications[0])
    # THEN the record has both: the control plane's placement and the notifier's thread
    record = bench.jobs.get(story.job_id)
    assert record is not None and raced
    assert record.state.value == "STARTING" and record.current is not None
    assert record.current.instance_id == "i-1"
    assert record.notify["slack"]["channel"] == bench.channel_id
    assert record.version == raced[0].version + 1


def test_the_job_can_name_its_own_channel(bench: Bench) -> None:
    vision = bench.slack.add_channel("team-vision")
    story = Story(job_id(), slack_channel="#team-vision").submit(0)
    bench.play(story, bench.notifier())
    assert bench.thread(story.job_id).parent.channel == vision
    assert bench.top_level_of(story.job_id) == []  # nothing in the deployment's channel


def test_without_a_token_notifications_are_off_and_nothing_fails(bench: Bench) -> None:
    story = Story(job_id()).submit(0)
    bench.commit(story.records[0])
    note = story.notifications[0]
    calls = len(bench.slack.calls)
    no_secret = bench.notifier(tokens=SlackTokenSource(None))
    assert no_secret.deliver(note).skipped == "Slack notifications are off (no token)"
    missing = SlackTokenSource(f"{bench.local.slack_token_parameter}-gone", bench.ssm)
    assert bench.notifier(tokens=missing).deliver(note).skipped is not None
    bench.put_token(None)  # deleted: notifications are off, nothing fails
    try:
        assert bench.notifier().deliver(note).skipped is not None
    finally:
        bench.put_token(bench.slack.token)
    assert len(bench.slack.calls) == calls


def test_refusals_no_retry_can_fix_are_permanent(bench: Bench) -> None:
    story = Story(job_id()).submit(0)
    bench.commit(story.records[0])
    note = story.notifications[0]
    with pytest.raises(SlackPermanentError, match="channel_not_found"):
        bench.notifier(default_channel="#deleted-channel").deliver(note)
    bench.slack.add_channel("archived-runs", archived=True)
    with pytest.raises(SlackPermanentError, match="is_archived") as caught:
        bench.notifier(default_channel="#archived-runs").deliver(note)
    assert caught.value.job_id == story.job_id
    bench.put_token("xoxb-wrong")
    try:
        with pytest.raises(SlackPermanentError, match="invalid_auth"):
            bench.notifier().deliver(note)
    finally:
        bench.put_token(bench.slack.token)


def test_outages_are_transient_and_the_retry_delivers_it_all(bench: Bench) -> None:
    story = Story(job_id()).submit(0)
    bench.commit(story.records[0])
    note = story.notifications[0]
    notifier = bench.notifier()
    # WHEN Slack answers 500s, then refuses connections
    bench.slack.outage(500)
    with pytest.raises(SlackTransientError, match="HTTP 500"):
        notifier.deliver(note)
    bench.slack.recover()
    bench.slack.stop()
    with pytest.raises(SlackTransientError, match="cannot reach Slack"):
        notifier.deliver(note)
    assert bench.top_level_of(story.job_id) == []
    # THEN once it is back, the same message (as SQS redelivers it) posts the card and reply
    bench.slack.start()
    done = notifier.deliver(note)
    assert done.posted_card and done.replies == 1
    assert kinds(bench.thread(story.job_id).replies) == ["queued"]


def test_a_429_is_retried_after_retry_after_inside_the_delivery(bench: Bench) -> None:
    story = Story(job_id()).submit(0)
    bench.commit(story.records[0])
    bench.slack.rate_limit(times=1, retry_after=1, method="chat.postMessage")
    started = time.monotonic()
    done = bench.notifier().deliver(story.notifications[0])
    assert done.posted_card and done.replies == 1
    assert time.monotonic() - started >= 1.0  # the Retry-After wait
    assert [c.status for c in bench.slack.calls[-3:]] == [429, 200, 200]


def test_rate_limited_beyond_the_retries_is_transient(bench: Bench) -> None:
    story = Story(job_id()).submit(0)
    bench.commit(story.records[0])
    bench.slack.rate_limit(times=1, retry_after=0)

    def impatient(token: str, base_url: str | None) -> WebClient:
        return WebClient(token=token, base_url=base_url, retry_handlers=[])

    with pytest.raises(SlackTransientError, match="rate limited"):
        bench.notifier(client_factory=impatient).deliver(story.notifications[0])


def test_a_rotated_token_is_read_again_after_invalid_auth(bench: Bench, slack: LocalSlack) -> None:
    # GIVEN a notifier that cached token A, then A is revoked and B put in the secret
    story = Story(job_id()).submit(0)
    bench.commit(story.records[0])
    old, new = "xoxb-rotate-a", "xoxb-rotate-b"
    slack.workspace.add_token(old)
    slack.workspace.add_token(new)
    bench.put_token(old)
    try:
        notifier = bench.notifier()
        assert notifier.tokens.get() == old
        slack.workspace.revoke(old)
        bench.put_token(new)
        # WHEN a message is delivered THEN it goes out with B, within the same delivery
        done = notifier.deliver(story.notifications[0])
        assert done.posted_card
        assert notifier.tokens.get() == new
    finally:
        bench.put_token(bench.slack.token)


def test_a_deleted_card_starts_a_new_thread(bench: Bench, slack: LocalSlack) -> None:
    story = Story(job_id()).submit(0).place("i-1", 5)
    notifier = bench.notifier()
    bench.commit(story.records[0])
    notifier.deliver(story.notifications[0])
    first = bench.thread(story.job_id).parent
    with slack.workspace.lock:
        slack.workspace.messages.remove(first)  # someone deleted the card
    for record in story.records[1:]:
        bench.commit(record)
    done = notifier.deliver(story.notifications[-1])
    assert done.posted_card and not done.updated_card
    assert bench.thread(story.job_id).parent.ts != first.ts
    assert kinds(bench.thread(story.job_id).replies) == ["placed"]


def test_the_token_is_cached_for_its_ttl(bench: Bench) -> None:
    now = [0.0]
    calls: list[Any] = []

    class CountingSsm:
        def get_parameter(self, **kwargs: Any) -> dict[str, Any]:
            calls.append(kwargs)
            return bench.ssm.get_parameter(**kwargs)

    tokens = SlackTokenSource(
        bench.local.slack_token_parameter, CountingSsm(), ttl_seconds=300, clock=lambda: now[0]
    )
    for _ in range(5):
        assert tokens.get() == bench.slack.token
    now[0] = 301.0
    tokens.get()
    assert len(calls) == 2
    assert all(c["WithDecryption"] is True for c in calls)


@pytest.mark.parametrize(
    ("value", "token"),
    [('{"bot_token": "xoxb-1"}', "xoxb-1"), ("xoxb-2", "xoxb-2"), ('{"bot_token": ""}', None)],
)
def test_the_parameter_may_hold_the_bare_token_or_json(
    bench: Bench, value: str, token: str | None
) -> None:
    name = f"/{bench.local.table_name}/{abs(hash(value))}"
    bench.ssm.put_parameter(Name=name, Type="SecureString", Value=value)
    assert SlackTokenSource(name, bench.ssm).get() == token


def test_channel_comes_from_the_stack_configuration() -> None:
    from respot.control.config import NotifyConfig

    config = NotifyConfig.from_env(
        {
            "RESPOT_TABLE": "jobs",
            "RESPOT_SLACK_TOKEN_PARAMETER": "/respot/slack-token",
            "RESPOT_SLACK_CHANNEL": CHANNEL,
        }
    )
    assert (config.table_name, config.slack_token_parameter, config.slack_channel) == (
        "jobs",
        "/respot/slack-token",
        CHANNEL,
    )
    assert config.slack_api_url is None
