"""The hand-off's two halves, fast: the successor's bounded wait, and the predecessor's seal.

Real S3 (moto) for the markers and the checkpoint store; the agents' processes are in
test_handoff_faults.py.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from respot.agent.handoff import (
    HandoffOutcome,
    HandoffWait,
    predecessor_limit_seconds,
    write_with_retry,
)
from respot.agent.notices import (
    STOP_NOTICE_SECONDS,
    StopRequest,
    deadlines,
    parse_stop_request,
    stop_notice,
)
from respot.storage import layout
from respot.storage.checkpoints import CheckpointSealedError, CheckpointStore

JOB = "handoff-job"


def _wait(
    s3: Any,
    bucket: str,
    *,
    wait: float = 0.6,
    stop: StopRequest | None = None,
    beats: list[float] | None = None,
    give_up: bool = False,
    announce: Any = None,
) -> HandoffWait:
    return HandoffWait(
        s3,
        bucket,
        JOB,
        1,
        wait_seconds=wait,
        heartbeat_seconds=0.2,
        poll_seconds=0.05,
        read_stop=lambda: stop,
        beat=lambda: (beats if beats is not None else []).append(time.monotonic()),
        give_up=lambda: give_up,
        announce=announce,
    )


def _mark_later(s3: Any, bucket: str, key: str, after: float) -> threading.Timer:
    timer = threading.Timer(after, lambda: s3.put_object(Bucket=bucket, Key=key, Body=b"{}"))
    timer.start()
    return timer


def test_the_limit_covers_everything_the_held_predecessor_may_still_do() -> None:
    # It reads its stop within a heartbeat, holds at most hold_seconds, and its stop's
    # deadlines (kill the session, finish uploads) are within STOP_NOTICE_SECONDS of the tell.
    heartbeat, hold = 60.0, 1200.0
    kill_at, end_by = deadlines(stop_notice().at)
    after_tell = max(kill_at, end_by) - time.monotonic()
    assert after_tell <= STOP_NOTICE_SECONDS
    limit = predecessor_limit_seconds(StopRequest("return", hold), heartbeat)
    assert limit > heartbeat + hold + after_tell
    # an unheld stop (a move to on-demand): read within a heartbeat, then the stop's 60 s
    assert predecessor_limit_seconds(StopRequest("switch"), heartbeat) > heartbeat + after_tell


@pytest.mark.parametrize(
    ("body", "hold"),
    [
        ({"hold_seconds": 100, "at": "2026-11-24T06:00:00+00:00"}, 70.0),  # read 30 s late
        ({"hold_seconds": 100, "at": "2026-11-24T05:00:00+00:00"}, 0.0),  # read after its end
        ({"hold_seconds": 100, "at": "2026-11-24T06:01:00+00:00"}, 100.0),  # a clock ahead
        ({"hold_seconds": 100, "at": "not a time"}, 100.0),
        ({"hold_seconds": 100}, 100.0),
        ({"hold_seconds": "100"}, None),  # not a number: no hold
        ({}, None),
    ],
)
def test_a_stop_is_held_from_when_it_was_written_not_when_it_was_read(
    body: dict[str, Any], hold: float | None
) -> None:
    # The successor's bound counts from the stop's write (its predecessor reads it up to a
    # heartbeat later, or later still if its reads fail): the hold must end by then too.
    now = datetime(2026, 11, 24, 6, 0, 30, tzinfo=UTC)
    request = parse_stop_request(json.dumps({"reason": "return", **body}).encode(), now)
    assert request.reason == "return"
    assert request.hold_seconds == (None if hold is None else pytest.approx(hold))


def test_a_marker_ends_the_wait_and_says_so(s3: Any, bucket: str) -> None:
    # (the wait's bound is far beyond the marker's 0.2 s, so only the marker can end it)
    timer = _mark_later(s3, bucket, layout.handoff_key(JOB, 1), 0.2)
    outcome = _wait(s3, bucket, wait=120.0).run()
    timer.join()
    assert outcome.found and outcome.reason == "attempt 1 handed off"


def test_without_a_stop_request_the_default_wait_bounds_it(s3: Any, bucket: str) -> None:
    beats: list[float] = []
    outcome = _wait(s3, bucket, wait=0.6, beats=beats).run()
    assert not outcome.found
    assert outcome.seconds >= 0.6  # no sooner than the bound; the reason says which bound
    assert "default wait" in outcome.reason and "not asked to stop" in outcome.reason
    assert beats == []  # within the default wait it does not report


def test_a_stopping_predecessor_is_waited_for_to_its_limit_with_heartbeats(
    s3: Any, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from respot.agent import handoff

    # Its limit here: heartbeat 0.2 + hold 0.5 + stop 0.3 + margin 0.2 = 1.2 s.
    monkeypatch.setattr(handoff, "STOP_NOTICE_SECONDS", 0.3)
    monkeypatch.setattr(handoff, "HANDOFF_MARGIN_SECONDS", 0.2)
    beats: list[float] = []
    t0 = time.monotonic()
    outcome = _wait(s3, bucket, wait=0.3, stop=StopRequest("return", 0.5), beats=beats).run()
    assert not outcome.found
    assert outcome.seconds >= 1.2, outcome  # no sooner than its limit; the reason names it
    assert outcome.reason == (
        "attempt 1's limit passed (asked to stop: read within 0.2s + hold up to 0.5s + "
        "stop 0.3s + margin 0.2s)"
    )
    # past the default wait (0.3 s) it reported every heartbeat (0.2 s): at 0.3, 0.5, ... 1.1
    assert len(beats) >= 3 and all(b - t0 >= 0.3 for b in beats), beats


def test_while_waiting_a_failed_successor_marker_is_written_again(s3: Any, bucket: str) -> None:
    key = layout.successor_ready_key(JOB, 1)
    tries: list[float] = []

    def announce() -> None:
        tries.append(time.monotonic())
        if len(tries) < 2:
            raise RuntimeError("S3 said 500")
        s3.put_object(Bucket=bucket, Key=key, Body=b"{}")

    # The tries come 1 s and then 2 s apart (each gap counted from when the last try really
    # ran): a wait of 5 s holds the second even if the first runs up to 2 s late.
    outcome = _wait(s3, bucket, wait=5.0, announce=announce).run()
    assert not outcome.found
    assert len(tries) == 2  # at 1 s and 3 s: the second went through, and no more after it
    s3.head_object(Bucket=bucket, Key=key)


def test_a_notice_for_the_successor_ends_the_wait(s3: Any, bucket: str) -> None:
    # (the wait's bound is far away: only the notice can have ended it)
    outcome = _wait(s3, bucket, wait=120.0, give_up=True).run()
    assert outcome == HandoffOutcome(False, outcome.seconds, "a notice came for this instance")


def test_write_with_retry_is_bounded() -> None:
    calls: list[int] = []
    slept: list[float] = []

    def fail() -> None:
        calls.append(1)
        raise RuntimeError("no")

    assert not write_with_retry(fail, "x", attempts=3, sleep=slept.append)
    assert len(calls) == 3 and slept == [1.0, 2.0]
    assert write_with_retry(lambda: None, "x", sleep=slept.append)


# ---- the predecessor: its store is sealed before its handoff marker ---------------------------


def _dir(root: Path, step: int) -> Path:
    root.mkdir(parents=True)
    (root / "state.json").write_text(f'{{"step": {step}}}')
    return root


class _SlowManifests:
    """An S3 client whose manifest PUTs wait until `release` is set (a slow PUT in flight)."""

    def __init__(self, s3: Any) -> None:
        self._s3 = s3
        self.release = threading.Event()
        self.in_flight = threading.Event()

    def put_object(self, **kwargs: Any) -> Any:
        if "/manifests/" in kwargs["Key"]:
            self.in_flight.set()
            assert self.release.wait(10)
        return self._s3.put_object(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._s3, name)


def test_a_sealed_store_writes_no_manifest(s3: Any, bucket: str, tmp_path: Path) -> None:
    store = CheckpointStore(bucket=bucket, job_id=JOB, client=s3)
    store.upload(_dir(tmp_path / "a", 10), step=10, attempt=1, reason="periodic")
    assert store.seal("handed off") is not None
    with pytest.raises(CheckpointSealedError, match="sealed"):
        store.upload(_dir(tmp_path / "b", 20), step=20, attempt=1, reason="notice")
    assert [m.step for m in map(store.read_manifest, store.manifest_keys())] == [10]


def test_a_sealed_store_prunes_nothing(s3: Any, bucket: str, tmp_path: Path) -> None:
    store = CheckpointStore(bucket=bucket, job_id=JOB, client=s3)
    for step in (10, 20, 30):
        store.upload(_dir(tmp_path / str(step), step), step=step, attempt=1, reason="periodic")
    store.seal("handed off")
    # the successor's blob, uploaded ahead of its manifest, is named by no manifest yet
    s3.put_object(Bucket=bucket, Key=layout.blob_key(JOB, "f" * 64), Body=b"successor's")
    assert store.prune(1).manifests_deleted == 0
    assert len(store.manifest_keys()) == 3
    s3.head_object(Bucket=bucket, Key=layout.blob_key(JOB, "f" * 64))


def test_the_seal_waits_for_a_manifest_put_in_flight(s3: Any, bucket: str, tmp_path: Path) -> None:
    slow = _SlowManifests(s3)
    store = CheckpointStore(bucket=bucket, job_id=JOB, client=slow)  # type: ignore[arg-type]
    src = _dir(tmp_path / "a", 30)
    upload = threading.Thread(
        target=store.upload, args=(src,), kwargs={"step": 30, "attempt": 1, "reason": "notice"}
    )
    upload.start()
    assert slow.in_flight.wait(10)
    sealed: list[Any] = []
    sealer = threading.Thread(target=lambda: sealed.append(store.seal("handed off")))
    sealer.start()
    time.sleep(0.3)
    assert sealer.is_alive()  # it waits for the PUT: the marker cannot be written before it
    slow.release.set()
    sealer.join(10)
    upload.join(10)
    # the seal returns the checkpoint that landed: what the handoff marker names
    assert sealed and sealed[0] is not None and sealed[0].step == 30
