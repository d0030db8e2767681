"""LogShipper: the session's output reaches CloudWatch Logs in order, within the API's limits,
and a logging failure never reaches training."""

from __future__ import annotations

import secrets
import threading
from typing import Any

import boto3
import pytest

from respot.agent.logship import (
    EVENT_OVERHEAD_BYTES,
    MAX_BATCH_BYTES,
    MAX_BATCH_EVENTS,
    MAX_EVENT_BYTES,
    LogShipper,
    _message,
    batches,
)


@pytest.fixture
def logs(moto_endpoint: str, aws_credentials: None) -> Any:
    return boto3.client("logs", endpoint_url=moto_endpoint, region_name="us-east-1")


def read_all(client: Any, group: str, stream: str) -> list[str]:
    out: list[str] = []
    token = None
    while True:
        kwargs: dict[str, Any] = {
            "logGroupName": group,
            "logStreamName": stream,
            "startFromHead": True,
        }
        if token:
            kwargs["nextToken"] = token
        page = client.get_log_events(**kwargs)
        out.extend(e["message"] for e in page["events"])
        if not page["events"] or page["nextForwardToken"] == token:
            return out
        token = page["nextForwardToken"]


def test_lines_arrive_in_order_from_a_busy_writer(logs: Any) -> None:
    # GIVEN a log group and a shipper writing to a new stream
    group = f"/respot-{secrets.token_hex(3)}/jobs"
    logs.create_log_group(logGroupName=group)
    shipper = LogShipper(client=logs, group=group, stream="job-1/0001/i-1", flush_seconds=0.2)
    # WHEN 3,000 lines are written (an empty one among them) and the shipper is closed
    for i in range(3000):
        shipper.write(f"line {i}\n".encode() if i != 7 else b"\n")
    assert shipper.close(timeout=20)
    # THEN every line is there, in order, the empty one as a blank
    got = read_all(logs, group, "job-1/0001/i-1")
    assert len(got) == 3000 and shipper.shipped == 3000 and shipper.dropped == 0
    assert got[0] == "line 0" and got[7] == " " and got[-1] == "line 2999"


def test_a_missing_log_group_turns_shipping_off_without_raising(logs: Any) -> None:
    shipper = LogShipper(client=logs, group="/no/such/group", stream="s", flush_seconds=0.1)
    shipper.write(b"hello\n")
    assert shipper.close(timeout=5)
    shipper.write(b"after close\n")  # still never raises
    assert shipper.shipped == 0


def test_a_failing_client_never_blocks_or_raises_into_the_writer() -> None:
    # GIVEN a CloudWatch client that always fails
    calls = threading.Event()

    class Broken:
        def create_log_stream(self, **_: Any) -> None:
            calls.set()
            raise ConnectionError("network down")

        def put_log_events(self, **_: Any) -> None:
            raise ConnectionError("network down")

    shipper = LogShipper(
        client=Broken(), group="g", stream="s", flush_seconds=0.05, retry_gap_seconds=0.01
    )
    # WHEN lines are written THEN writing stays instant and the lines are counted as dropped
    for i in range(10):
        shipper.write(f"{i}\n".encode())
    assert calls.wait(5)
    shipper.close(timeout=10)
    assert shipper.dropped == 10 and shipper.shipped == 0


def test_batches_respect_the_put_log_events_limits() -> None:
    # GIVEN many small events and a few large ones, in time order
    small = [(1_000 + i, "x") for i in range(25_000)]
    big = [(100_000 + i, "y" * 200_000) for i in range(12)]
    later = [(100_000 + 25 * 3600 * 1000, "next day")]
    # WHEN they are split into batches
    out = batches(small + big + later)
    # THEN no batch is over 10,000 events, 1,048,576 bytes or 24 hours, and order is kept
    for batch in out:
        assert len(batch) <= MAX_BATCH_EVENTS
        size = sum(len(e["message"].encode()) + EVENT_OVERHEAD_BYTES for e in batch)
        assert size <= MAX_BATCH_BYTES
        assert batch[-1]["timestamp"] - batch[0]["timestamp"] < 24 * 3600 * 1000
    flat = [e["timestamp"] for b in out for e in b]
    assert flat == sorted(flat) and len(flat) == 25_000 + 12 + 1
    assert out[-1] == [{"timestamp": later[0][0], "message": "next day"}]


def test_an_overlong_line_is_cut_to_the_event_size_limit() -> None:
    text = _message(("é" * 300_000 + "\n").encode())
    assert len(text.encode()) <= MAX_EVENT_BYTES
    assert text.startswith("ééé")
