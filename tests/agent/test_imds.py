"""The local IMDS server follows EC2's IMDSv2 rules; the agent's IMDS client reads it."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import cast

import pytest

from infra.local.imds import ImdsServer, SpotAction
from respot.agent.exceptions import ImdsError
from respot.agent.imds import ImdsClient
from respot.agent.protocol import Notice

AWS_EVENTS = Path(__file__).resolve().parents[1] / "events" / "aws"
TAGS = {"respot:job-id": "job-1", "respot:attempt": "3", "team": "vision"}


@pytest.fixture
def imds() -> Iterator[ImdsServer]:
    server = ImdsServer(
        instance_id="i-0123456789abcdef0",
        instance_type="g5.xlarge",
        availability_zone="us-east-1b",
        tags=dict(TAGS),
    )
    server.start()
    yield server
    server.stop()


def call(
    url: str, method: str = "GET", headers: dict[str, str] | None = None
) -> tuple[int, str, dict[str, str]]:
    request = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            return resp.status, resp.read().decode(), dict(resp.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), dict(exc.headers)


def token(imds: ImdsServer, ttl: str = "60") -> str:
    status, body, _ = call(
        f"{imds.url}/latest/api/token", "PUT", {"X-aws-ec2-metadata-token-ttl-seconds": ttl}
    )
    assert status == 200
    return body


def get(imds: ImdsServer, path: str, tok: str | None) -> tuple[int, str]:
    headers = {"X-aws-ec2-metadata-token": tok} if tok is not None else {}
    status, body, _ = call(f"{imds.url}/latest/meta-data/{path}", "GET", headers)
    return status, body


# ---- the token ----------------------------------------------------------------------------


@pytest.mark.parametrize("ttl", ["1", "21600"])
def test_a_token_is_issued_for_a_ttl_in_range(imds: ImdsServer, ttl: str) -> None:
    status, body, headers = call(
        f"{imds.url}/latest/api/token", "PUT", {"X-aws-ec2-metadata-token-ttl-seconds": ttl}
    )
    assert status == 200 and len(body) >= 20
    assert headers["X-aws-ec2-metadata-token-ttl-seconds"] == ttl


@pytest.mark.parametrize("ttl", [None, "0", "21601", "-5", "abc", ""])
def test_a_missing_or_out_of_range_ttl_is_a_bad_request(imds: ImdsServer, ttl: str | None) -> None:
    headers = {} if ttl is None else {"X-aws-ec2-metadata-token-ttl-seconds": ttl}
    assert call(f"{imds.url}/latest/api/token", "PUT", headers)[0] == 400


def test_a_proxied_token_request_is_refused(imds: ImdsServer) -> None:
    headers = {"X-aws-ec2-metadata-token-ttl-seconds": "60", "X-Forwarded-For": "10.0.0.1"}
    assert call(f"{imds.url}/latest/api/token", "PUT", headers)[0] == 403


def test_get_needs_a_live_token(imds: ImdsServer) -> None:
    assert get(imds, "instance-id", None)[0] == 401  # IMDSv1 style: refused
    assert get(imds, "instance-id", "not-a-token")[0] == 401
    short = token(imds, "1")
    assert get(imds, "instance-id", short) == (200, "i-0123456789abcdef0")
    time.sleep(1.1)
    assert get(imds, "instance-id", short)[0] == 401  # expired
    tok = token(imds)
    imds.revoke_tokens()
    assert get(imds, "instance-id", tok)[0] == 401


def test_other_methods_are_not_allowed(imds: ImdsServer) -> None:
    tok = token(imds)
    headers = {"X-aws-ec2-metadata-token": tok}
    assert call(f"{imds.url}/latest/meta-data/instance-id", "POST", headers)[0] == 405
    assert call(f"{imds.url}/latest/meta-data/instance-id", "DELETE", headers)[0] == 405


def test_it_binds_loopback_only() -> None:
    with pytest.raises(ValueError, match="loopback"):
        ImdsServer(
            instance_id="i-1",
            instance_type="t3.micro",
            availability_zone="a",
            tags={},
            host="0.0.0.0",
        )


# ---- the metadata -------------------------------------------------------------------------


def test_identity_and_tags(imds: ImdsServer) -> None:
    tok = token(imds)
    assert imds.url.startswith("http://127.0.0.1:")
    assert get(imds, "instance-id", tok) == (200, "i-0123456789abcdef0")
    assert get(imds, "instance-type", tok) == (200, "g5.xlarge")
    assert get(imds, "placement/availability-zone", tok) == (200, "us-east-1b")
    assert get(imds, "tags/instance", tok) == (200, "respot:attempt\nrespot:job-id\nteam")
    assert get(imds, "tags/instance/respot:job-id", tok) == (200, "job-1")
    assert get(imds, "tags/instance/respot:await-handoff", tok)[0] == 404
    assert get(imds, "no/such/path", tok)[0] == 404


def test_spot_instance_action_appears_when_scheduled(imds: ImdsServer) -> None:
    tok = token(imds)
    assert get(imds, "spot/instance-action", tok)[0] == 404
    # A notice due in the future is not visible yet.
    reclaim = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    imds.schedule_interruption(
        "terminate", reclaim, notice_at=datetime.now(UTC) + timedelta(hours=1)
    )
    assert get(imds, "spot/instance-action", tok)[0] == 404
    imds.schedule_interruption("stop", reclaim)
    status, body = get(imds, "spot/instance-action", tok)
    sample = json.loads((AWS_EVENTS / "imds-spot-instance-action.json").read_text())
    assert status == 200
    assert json.loads(body) == {"action": "stop", "time": "2030-01-02T03:04:05Z"}
    assert set(json.loads(body)) == set(sample)
    # Without a time, EC2's two minutes.
    # (judged between clock readings taken around the call, whatever the machine's speed;
    # the time is written in whole seconds, as AWS writes it)
    before = datetime.now(UTC).replace(microsecond=0)
    imds.schedule_interruption()
    when = datetime.fromisoformat(json.loads(get(imds, "spot/instance-action", tok)[1])["time"])
    after = datetime.now(UTC)
    assert before + timedelta(seconds=120) <= when <= after + timedelta(seconds=120)


def test_rebalance_recommendation_appears_from_its_time(imds: ImdsServer) -> None:
    tok = token(imds)
    assert get(imds, "events/recommendations/rebalance", tok)[0] == 404
    imds.recommend_rebalance(datetime.now(UTC) + timedelta(hours=1))
    assert get(imds, "events/recommendations/rebalance", tok)[0] == 404
    imds.recommend_rebalance(datetime(2020, 10, 27, 8, 22, tzinfo=UTC))
    status, body = get(imds, "events/recommendations/rebalance", tok)
    sample = json.loads((AWS_EVENTS / "imds-rebalance.json").read_text())
    assert status == 200 and json.loads(body) == sample


# ---- the agent's client -------------------------------------------------------------------


def test_client_reads_identity_and_absent_tags(imds: ImdsServer) -> None:
    client = ImdsClient(imds.url)
    ident = client.identity()
    assert (ident.instance_id, ident.instance_type, ident.availability_zone) == (
        "i-0123456789abcdef0",
        "g5.xlarge",
        "us-east-1b",
    )
    assert (ident.job_id, ident.attempt, ident.await_handoff) == ("job-1", 3, None)
    assert client.instance_action() is None and client.rebalance_notice() is None
    imds.schedule_interruption("terminate", datetime(2030, 1, 1, tzinfo=UTC))
    action = client.instance_action()
    assert action is not None and action.action == "terminate"
    assert action.time == datetime(2030, 1, 1, tzinfo=UTC)


def test_client_gets_a_new_token_after_a_401(imds: ImdsServer) -> None:
    client = ImdsClient(imds.url)
    assert client.get("instance-id") == "i-0123456789abcdef0"
    imds.revoke_tokens()  # the cached token is now refused
    assert client.get("instance-id") == "i-0123456789abcdef0"


def test_client_gives_up_with_an_error_when_nothing_answers() -> None:
    server = ImdsServer(instance_id="i-1", instance_type="t3.micro", availability_zone="a", tags={})
    server.start()
    url = server.url
    server.stop()
    client = ImdsClient(url, attempts=3, backoff_seconds=0.01, timeout_seconds=0.5)
    with pytest.raises(ImdsError, match="after 3 attempts"):
        client.get("instance-id")


# ---- the agent's notice poller ------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "notice"),
    [("terminate", "spot-interruption"), ("stop", "stop"), ("hibernate", "stop")],
)
def test_poller_reports_each_notice_once(imds: ImdsServer, action: str, notice: str) -> None:
    from respot.agent.notices import InterruptionNotice, NoticePoller, RebalanceNotice

    seen: list[object] = []
    poller = NoticePoller(ImdsClient(imds.url), every_seconds=60, emit=seen.append)
    poller.poll_once()
    assert seen == []
    reclaim = datetime(2030, 1, 1, tzinfo=UTC)
    imds.schedule_interruption(cast(SpotAction, action), reclaim)
    imds.recommend_rebalance(datetime(2020, 10, 27, 8, 22, tzinfo=UTC))
    poller.poll_once()
    poller.poll_once()
    assert seen == [
        InterruptionNotice(cast(Notice, notice), reclaim),
        RebalanceNotice("2020-10-27T08:22:00Z"),
    ]
    imds.recommend_rebalance(datetime(2020, 10, 27, 8, 23, tzinfo=UTC))  # a new one
    poller.poll_once()
    assert seen[-1] == RebalanceNotice("2020-10-27T08:23:00Z") and len(seen) == 3


def test_notice_deadlines_leave_time_to_upload() -> None:
    from respot.agent.notices import deadlines

    t0 = time.monotonic()
    kill_at, end_by = deadlines(datetime.now(UTC) + timedelta(seconds=120))
    assert 88 < kill_at - t0 <= 90.5 and 108 < end_by - t0 <= 110.5
    # A scaled-down local notice (12 s): stop the session 3 s before, finish 1.2 s before.
    kill_at, end_by = deadlines(datetime.now(UTC) + timedelta(seconds=12))
    assert 8.5 < kill_at - t0 <= 9.5 and 10.3 < end_by - t0 <= 11.3
    # The demo's notice (two minutes scaled to 4 s): stop the session after 3 s.
    kill_at, end_by = deadlines(datetime.now(UTC) + timedelta(seconds=4))
    assert 2.5 < kill_at - t0 <= 3.5 and 3.1 < end_by - t0 <= 4.1
    # A time already past still leaves 2 s; no time at all means EC2's two minutes.
    kill_at, _ = deadlines(datetime.now(UTC) - timedelta(seconds=30))
    assert 1.2 < kill_at - t0 <= 1.6
    kill_at, _ = deadlines(None)
    assert 88 < kill_at - t0 <= 90.5
