"""The successor's side of a hand-off: say it is warm, then wait until its predecessor is done.

One trainer per job (docs/agent.md, step 3): an instance launched with `await-handoff = N`
restores and trains only once attempt N can no longer write a checkpoint, which it knows by

- attempt N's handoff marker (`layout.handoff_key`): N's agent writes it after sealing its
  checkpoint store (no manifest of N can land after it, `CheckpointStore.seal`); the control
  plane writes it when N's instance is gone or judged lost (`ReleaseHandoff`), so while there
  is no marker, N is not known to be gone; or
- the end of N's own limits: a spot notice's instance is reclaimed within two minutes (the
  default wait, `RESPOT_HANDOFF_WAIT_SECONDS`, covers it); an attempt asked to stop
  (its control key) reads that request within a heartbeat, holds it at most the
  `hold_seconds` it carries, then has `STOP_NOTICE_SECONDS` to save and hand off.

The successor's warm marker tells a holding predecessor to stop now; a write that fails is
retried (a few times at once, then every few seconds while it waits), so one refused PUT does
not keep N holding to its limit while the successor waits for it. Past the default wait the
successor heartbeats, so the control plane does not judge it lost while it waits. Every wait
ends with why: found, the predecessor's limit passed, or a notice came for this instance.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from respot.agent.notices import STOP_NOTICE_SECONDS, StopRequest
from respot.agent.workspace import object_exists
from respot.storage import layout

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

logger = logging.getLogger("respot.agent.handoff")

MARKER_ATTEMPTS = 3  # tries of a marker write at once (each is botocore's own retries)
MARKER_RETRY_SECONDS = 1.0  # the gap after the first failed try, doubled after each
MARKER_RETRY_CAP_SECONDS = 10.0  # while waiting, the successor's marker is tried this often
STOP_CHECK_SECONDS = 5.0  # how often the successor reads its predecessor's stop request
# After the stop's deadline, the predecessor's last upload (its store is sealed only after
# an in-flight manifest PUT) and its handoff marker write, with botocore's retries.
HANDOFF_MARGIN_SECONDS = 30.0


def write_with_retry(
    write: Callable[[], object],
    what: str,
    *,
    attempts: int = MARKER_ATTEMPTS,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Run `write` until it succeeds, at most `attempts` times with a doubling gap; True if
    it did. A failure is logged, never raised: the caller decides what a lost write means."""
    gap = MARKER_RETRY_SECONDS
    for n in range(1, attempts + 1):
        try:
            write()
            return True
        except Exception as exc:
            last = n == attempts
            logger.warning(
                "writing %s failed (try %d of %d): %s%s",
                what,
                n,
                attempts,
                exc,
                "" if last else f"; again in {gap:.0f}s",
            )
            if not last:
                sleep(gap)
                gap *= 2
    return False


def predecessor_limit_seconds(stop: StopRequest, heartbeat_seconds: float) -> float:
    """From when its stop request is seen, how long the predecessor may still train and save.

    It reads the request within a heartbeat (its control poll), holds it at most
    `hold_seconds` for this successor's warm marker, then has `STOP_NOTICE_SECONDS` to save,
    upload and hand off, plus `HANDOFF_MARGIN_SECONDS` for the last PUTs.
    """
    hold = stop.hold_seconds or 0.0
    return heartbeat_seconds + hold + STOP_NOTICE_SECONDS + HANDOFF_MARGIN_SECONDS


@dataclass(frozen=True)
class HandoffOutcome:
    """How the wait for the predecessor's hand-off ended."""

    found: bool
    seconds: float
    reason: str


class HandoffWait:
    """Wait for attempt `previous`'s handoff marker, no longer than it may be training."""

    def __init__(
        self,
        s3: S3Client,
        bucket: str,
        job_id: str,
        previous: int,
        *,
        wait_seconds: float,
        heartbeat_seconds: float,
        poll_seconds: float,
        read_stop: Callable[[], StopRequest | None],
        beat: Callable[[], object],
        give_up: Callable[[], bool],
        announce: Callable[[], object] | None = None,
    ) -> None:
        self._s3 = s3
        self._bucket = bucket
        self._key = layout.handoff_key(job_id, previous)
        self._previous = previous
        self._wait = wait_seconds
        self._heartbeat = heartbeat_seconds
        self._poll = poll_seconds
        self._read_stop = read_stop
        self._beat = beat
        self._give_up = give_up
        self._announce = announce  # the successor marker still to write (None: written)
        self.beats = 0

    def run(self) -> HandoffOutcome:
        started = time.monotonic()
        deadline = started + self._wait
        limit = (
            f"the default wait ({self._wait:g}s) passed and attempt {self._previous} "
            "was not asked to stop (a spot notice's instance is reclaimed by then)"
        )
        stop: StopRequest | None = None
        next_stop_check = started
        next_beat = deadline
        gap = MARKER_RETRY_SECONDS
        next_announce = started + gap
        while True:
            try:
                if object_exists(self._s3, self._bucket, self._key):
                    return self._end(started, True, f"attempt {self._previous} handed off")
            except Exception as exc:
                logger.warning("checking s3://%s/%s failed: %s", self._bucket, self._key, exc)
            now = time.monotonic()
            if self._announce is not None and now >= next_announce:
                if write_with_retry(self._announce, "the successor marker", attempts=1):
                    logger.info("the successor marker is written (late)")
                    self._announce = None
                gap = min(gap * 2, MARKER_RETRY_CAP_SECONDS)
                next_announce = now + gap
            if stop is None and now >= next_stop_check:
                next_stop_check = now + STOP_CHECK_SECONDS
                try:
                    stop = self._read_stop()
                except Exception as exc:
                    logger.warning(
                        "reading attempt %d's stop request failed: %s", self._previous, exc
                    )
                if stop is not None:
                    seconds = predecessor_limit_seconds(stop, self._heartbeat)
                    held = (
                        f"hold up to {stop.hold_seconds:g}s + "
                        if stop.hold_seconds is not None
                        else ""
                    )
                    if now + seconds > deadline:
                        deadline = now + seconds
                        limit = (
                            f"attempt {self._previous}'s limit passed (asked to stop: read within "
                            f"{self._heartbeat:g}s + {held}stop {STOP_NOTICE_SECONDS:g}s + "
                            f"margin {HANDOFF_MARGIN_SECONDS:g}s)"
                        )
                    logger.info(
                        "attempt %d is asked to stop (%s); waiting for its hand-off up to %.0fs",
                        self._previous,
                        stop.reason,
                        deadline - started,
                    )
            if self._give_up():
                return self._end(started, False, "a notice came for this instance")
            if now >= deadline:
                return self._end(started, False, limit)
            if now >= next_beat:
                # Past the default wait: report, so the control plane does not judge it lost.
                self._beat()
                self.beats += 1
                next_beat = now + self._heartbeat
            time.sleep(max(0.0, min(self._poll, deadline - time.monotonic())))

    def _end(self, started: float, found: bool, reason: str) -> HandoffOutcome:
        seconds = time.monotonic() - started
        if self._announce is not None:
            logger.error(
                "the successor marker was never written: attempt %d never saw this instance warm",
                self._previous,
            )
        log = logger.info if found else logger.warning
        log(
            "handoff from attempt %d: %s after %.1fs: %s",
            self._previous,
            "found" if found else "not found, going on",
            seconds,
            reason,
        )
        return HandoffOutcome(found, seconds, reason)
