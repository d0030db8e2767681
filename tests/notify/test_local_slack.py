"""The local Slack Web API answers slack_sdk over real HTTP with Slack's rules."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from urllib.error import URLError

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler

from infra.local.slack import LocalSlack, render_thread


@pytest.fixture(scope="module")
def slack() -> Iterator[LocalSlack]:
    with LocalSlack() as server:
        yield server


@pytest.fixture
def client(slack: LocalSlack) -> WebClient:
    return WebClient(token=slack.token, base_url=slack.base_url, timeout=5)


def refused(call: object, *args: object, **kwargs: object) -> str:
    with pytest.raises(SlackApiError) as caught:
        call(*args, **kwargs)  # type: ignore[operator]
    assert caught.value.response.status_code == 200  # Slack refuses with HTTP 200, ok: false
    return str(caught.value.response["error"])


def test_auth_needs_a_known_live_token(slack: LocalSlack, client: WebClient) -> None:
    assert client.auth_test()["user_id"] == "U0RESPOT0"
    assert refused(WebClient(base_url=slack.base_url).auth_test) == "not_authed"
    assert refused(WebClient(token="xoxb-nope", base_url=slack.base_url).auth_test) == (
        "invalid_auth"
    )
    old = "xoxb-old"
    slack.workspace.add_token(old)
    slack.workspace.revoke(old)
    assert refused(WebClient(token=old, base_url=slack.base_url).auth_test) == "token_revoked"


def test_post_reply_and_update_build_one_thread(slack: LocalSlack, client: WebClient) -> None:
    # GIVEN a channel WHEN a card is posted by name, replied to and edited by id
    cid = slack.add_channel("threads")
    parent = client.chat_postMessage(channel="#threads", text="card v1")
    assert parent["channel"] == cid and parent["ts"]
    reply = client.chat_postMessage(channel=cid, text="reply 1", thread_ts=parent["ts"])
    client.chat_postMessage(channel=cid, text="reply 2", thread_ts=parent["ts"])
    updated = client.chat_update(
        channel=cid,
        ts=parent["ts"],
        text="card v2",
        blocks=[{"type": "section", "text": {"type": "mrkdwn", "text": "*card* v2"}}],
    )
    # THEN the thread holds the edited card and both replies, in order, with unique ts
    assert updated["ts"] == parent["ts"] and updated["message"]["text"] == "card v2"
    assert reply["message"]["thread_ts"] == parent["ts"]
    thread = slack.thread(cid, parent["ts"])
    assert [r.text for r in thread.replies] == ["reply 1", "reply 2"]
    assert thread.parent.edits == [("card v1", [])]
    assert render_thread(thread).splitlines() == [
        "*card* v2",
        "(edited 1 times)",
        "  └ reply 1",
        "  └ reply 2",
    ]
    assert len({m.ts for m in slack.workspace.messages}) == len(slack.workspace.messages)


def test_channel_checks(slack: LocalSlack, client: WebClient) -> None:
    archived = slack.add_channel("old-runs", archived=True)
    private = slack.add_channel("private", member=False)
    assert refused(client.chat_postMessage, channel="#nope", text="x") == "channel_not_found"
    assert refused(client.chat_postMessage, channel=archived, text="x") == "is_archived"
    assert refused(client.chat_postMessage, channel="#private", text="x") == "not_in_channel"
    cid = slack.add_channel("by-id-only")
    ts = client.chat_postMessage(channel=cid, text="x")["ts"]
    # chat.update takes the channel id, not its name
    assert refused(client.chat_update, channel="#by-id-only", ts=ts, text="y") == (
        "channel_not_found"
    )
    assert private.startswith("C")


def test_thread_ts_must_name_a_top_level_message(slack: LocalSlack, client: WebClient) -> None:
    cid = slack.add_channel("thread-rules")
    parent = client.chat_postMessage(channel=cid, text="p")["ts"]
    reply = client.chat_postMessage(channel=cid, text="r", thread_ts=parent)["ts"]
    assert refused(client.chat_postMessage, channel=cid, text="x", thread_ts="1.000001") == (
        "invalid_thread_ts"
    )
    assert refused(client.chat_postMessage, channel=cid, text="x", thread_ts=reply) == (
        "invalid_thread_ts"
    )


def test_update_of_unknown_or_foreign_message(slack: LocalSlack, client: WebClient) -> None:
    cid = slack.add_channel("updates")
    assert refused(client.chat_update, channel=cid, ts="123.456", text="x") == "message_not_found"
    slack.workspace.add_token("xoxb-someone", user="U0SOMEONE")
    theirs = WebClient(token="xoxb-someone", base_url=slack.base_url).chat_postMessage(
        channel=cid, text="mine"
    )["ts"]
    assert refused(client.chat_update, channel=cid, ts=theirs, text="x") == "cant_update_message"


def test_message_content_limits(slack: LocalSlack, client: WebClient) -> None:
    cid = slack.add_channel("limits")
    section = {"type": "section", "text": {"type": "mrkdwn", "text": "ok"}}
    with pytest.warns(UserWarning, match="text"):  # slack_sdk warns before sending, too
        assert refused(client.chat_postMessage, channel=cid) == "no_text"
    assert refused(client.chat_postMessage, channel=cid, text="x" * 40_001) == "msg_too_long"
    assert refused(client.chat_postMessage, channel=cid, text="x", blocks=[section] * 51) == (
        "invalid_blocks"
    )
    header = {"type": "header", "text": {"type": "plain_text", "text": "h" * 151}}
    assert refused(client.chat_postMessage, channel=cid, text="x", blocks=[header]) == (
        "invalid_blocks"
    )
    assert refused(client.chat_postMessage, channel=cid, text="x", metadata={"x": 1}) == (
        "invalid_metadata_format"
    )
    assert client.chat_postMessage(channel=cid, text="x" * 40_000, blocks=[section] * 50)["ok"]


def test_429_with_retry_after_until_the_client_waits(slack: LocalSlack) -> None:
    cid = slack.add_channel("rate")
    plain = WebClient(token=slack.token, base_url=slack.base_url)
    slack.rate_limit(times=1, retry_after=1)
    with pytest.raises(SlackApiError) as caught:
        plain.chat_postMessage(channel=cid, text="x")
    assert caught.value.response.status_code == 429
    assert caught.value.response.headers["Retry-After"] == "1"
    assert caught.value.response["error"] == "ratelimited"
    # WHEN the client has the rate-limit retry handler THEN it waits Retry-After and succeeds
    patient = WebClient(token=slack.token, base_url=slack.base_url)
    patient.retry_handlers.append(RateLimitErrorRetryHandler(max_retry_count=2))
    slack.rate_limit(times=1, retry_after=1, method="chat.postMessage")
    started = time.monotonic()
    assert patient.chat_postMessage(channel=cid, text="after the wait")["ok"]
    assert time.monotonic() - started >= 1.0


def test_outage_then_refused_connections_then_recovery(slack: LocalSlack) -> None:
    cid = slack.add_channel("outage")
    client = WebClient(token=slack.token, base_url=slack.base_url, retry_handlers=[])
    before = client.chat_postMessage(channel=cid, text="before")["ts"]
    slack.outage(503)
    with pytest.raises(SlackApiError) as caught:
        client.chat_postMessage(channel=cid, text="during")
    assert caught.value.response.status_code == 503
    slack.recover()
    port = slack.port
    slack.stop()
    with pytest.raises(URLError):
        client.chat_postMessage(channel=cid, text="while stopped")
    slack.start()
    # THEN the server is back on the same port with the transcript it had
    assert slack.port == port
    client.chat_postMessage(channel=cid, text="after", thread_ts=before)
    texts = [m.text for m in slack.workspace.messages if m.channel == cid]
    assert texts == ["before", "after"]


def test_form_encoded_calls_with_a_token_argument(slack: LocalSlack) -> None:
    cid = slack.add_channel("forms")
    data = f"token={slack.token}&channel={cid}&text=hello%20form".encode()
    request = urllib.request.Request(
        slack.base_url + "chat.postMessage",
        data=data,
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        body = json.loads(response.read())
    assert body["ok"] and body["message"]["text"] == "hello form"


def test_binds_loopback_only() -> None:
    with pytest.raises(ValueError, match="loopback"):
        LocalSlack(host="0.0.0.0")
