"""How long the interrupted instance keeps training while its replacement warms up."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from respot.agent.warmstart import NoticeHold, hold_seconds
from respot.storage import layout


@pytest.mark.parametrize(
    ("remaining", "slowest", "hold"),
    [
        (120.0, 1.0, 90.0),  # AWS, a small checkpoint: keep 30 s for the final upload
        (120.0, 20.0, 40.0),  # a slow upload: keep 4 x its time
        (120.0, None, 0.0),  # nothing uploaded or restored yet: no estimate, no hold
        (24.0, 0.3, 16.0),  # the local runtime at 1/5: keep a third
        (4.0, 0.3, 1.0),  # at 1/30: keep at least 3 s (uploads are real seconds)
        (3.2, 0.3, 0.0),  # a hold under 0.5 s is not worth it
        (120.0, 40.0, 0.0),  # the final upload would not fit a hold: tell at once
    ],
)
def test_the_hold_keeps_what_the_final_upload_needs(
    remaining: float, slowest: float | None, hold: float
) -> None:
    assert hold_seconds(remaining, slowest) == pytest.approx(hold)


class _S3:
    """head_object answers 404 until `ready` is set."""

    def __init__(self) -> None:
        self.ready = False
        self.heads: list[str] = []

    def head_object(self, Bucket: str, Key: str) -> dict[str, Any]:  # noqa: N803 - boto3's
        self.heads.append(Key)
        if not self.ready:
            raise ClientError({"Error": {"Code": "404", "Message": "Not Found"}}, "HeadObject")
        return {}


def test_the_notice_is_passed_on_when_the_successor_is_warm() -> None:
    s3 = _S3()
    hold = NoticeHold(s3, "b", "job-1", 3)  # type: ignore[arg-type]
    hold.start(datetime.now(UTC) + timedelta(seconds=120), 120.0, 1.0)
    time.sleep(0.7)
    assert not hold.due()
    s3.ready = True
    deadline = time.monotonic() + 5
    while not hold.due() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert hold.reason == "the replacement is warm"
    assert set(s3.heads) == {layout.successor_ready_key("job-1", 3)}
    hold.stop()


def test_without_a_successor_the_notice_is_passed_on_when_the_reserve_is_reached() -> None:
    s3 = _S3()
    hold = NoticeHold(s3, "b", "job-1", 1)  # type: ignore[arg-type]
    t0 = time.monotonic()
    reclaim_at = datetime.now(UTC) + timedelta(seconds=5)
    t1 = time.monotonic()
    hold.start(reclaim_at, 120.0, 0.1)  # hold 2 s, keep 3 s
    # The hold ends 2 s after reclaim_at was taken (5 s to the reclaim, less the 3 s kept,
    # however late start() ran): between t0 + 2 and t1 + 2. Each look is judged by when it
    # was made, so a late wake-up of this thread is no failure: never due before 1.8 s,
    # always due from 2.2 s (0.2 s for the wall clock against the monotonic one).
    while True:
        before = time.monotonic()
        due = hold.due()
        after = time.monotonic()
        if due:
            assert after - t0 >= 1.8, after - t0
            break
        assert before - t1 < 2.2, before - t1
        assert after - t0 < 60, "never due"
        time.sleep(0.05)
    assert hold.reason == "the hold's time is up"
    hold.stop()


def test_without_an_estimate_the_notice_is_passed_on_at_once() -> None:
    hold = NoticeHold(_S3(), "b", "job-1", 1)  # type: ignore[arg-type]
    hold.start(datetime.now(UTC) + timedelta(seconds=120), 120.0, None)
    assert hold.due() and hold.reason == "no hold"
