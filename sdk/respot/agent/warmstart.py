"""Warm start: the replacement gets ready inside the notice's two minutes; the old one trains on.

On a notice the control plane requests the replacement at once, so on AWS it boots while the
old instance still has most of its two minutes. Both sides use that time:

- the replacement (`WarmSession`): with the code and data in place it starts the session
  process, which imports the entry point (`import torch`, ...) and calls `prepare()`, then
  says ready; the agent writes the successor marker (`layout.successor_ready_key`), waits for
  the old attempt's handoff marker (its final checkpoint is complete, or the instance is gone,
  or the wait timed out), restores the newest complete checkpoint and tells the waiting
  process to resume. A warm-up that fails (import error, `prepare()` raised, the process
  died) is reported and the agent starts the session cold, as without warm start.
- the old instance (`NoticeHold`): it holds the spot-interruption notice back from the session
  (which keeps training) until the successor marker appears or until the reserve it needs to
  save and upload its final checkpoint before the reclaim time is reached, whichever is first.
  A return's stop (on-demand -> spot) is held the same way, until the successor marker or
  the limit the control plane sent with it (there is no reclaim time), whichever is first.

So the pause the researcher sees is the final checkpoint's save and upload, the restore and
the resume, not the replacement's boot. `TrainingEnvVar(warm_start=False)` turns both off.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from respot.agent.process import SessionEvent, SessionExited, SessionProcess, describe_exit
from respot.agent.protocol import FailedLine, ReadyLine
from respot.agent.workspace import object_exists
from respot.storage import layout
from respot.wire.messages import utcnow

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

logger = logging.getLogger("respot.agent.warmstart")

# The old instance keeps this much of the notice to save and upload its final checkpoint: the
# least of 30 s and a third of the notice, but at least 4 x the slowest upload of this
# attempt and at least 3 s (the local runtime compresses the two minutes; uploads are real).
HOLD_RESERVE_SECONDS = 30.0
HOLD_RESERVE_FRACTION = 1 / 3
HOLD_UPLOAD_FACTOR = 4.0
HOLD_MIN_RESERVE_SECONDS = 3.0
HOLD_MIN_SECONDS = 0.5  # a hold shorter than this is not worth it: tell the session at once
HOLD_POLL_SECONDS = 1.0  # the old instance looks for the successor marker this often (off the
# pause: it only decides how long the old instance trains on)
# The replacement looks for the handoff marker this often once it is warm: half of it, on
# average, is in the pause. The old instance saves and uploads within its reserve (at most
# 30 s), so this costs at most ~300 HEADs an interruption ($0.00012 at S3's list price).
WARM_HANDOFF_POLL_SECONDS = 0.1
WARMUP_TIMEOUT_SECONDS = 1800.0  # a warm-up (import + prepare) still going after this failed


class WarmSession:
    """The replacement's session process, started before the checkpoint is restored."""

    def __init__(
        self,
        make_process: Callable[[Callable[[SessionEvent], None]], SessionProcess],
        *,
        forward: Callable[[SessionEvent], None],
    ) -> None:
        self._forward = forward
        self._lock = threading.Lock()
        self._settled = threading.Event()  # ready, failed or exited
        self._resumed = False
        self.ready_seconds: float | None = None
        self.failure: str | None = None
        self.process = make_process(self.on_event)

    def start(self) -> WarmSession:
        """Start the session process (it imports, prepares and says ready)."""
        self.process.start()
        return self

    def on_event(self, event: SessionEvent) -> None:
        """Before the resume: watch the warm-up; after it: the agent's events, as usual."""
        with self._lock:
            if self._resumed:
                self._forward(event)
                return
            if isinstance(event, ReadyLine):
                self.ready_seconds = event.seconds
            elif isinstance(event, FailedLine):
                self.failure = event.error[:500]
            elif isinstance(event, SessionExited):
                self.failure = self.failure or (
                    f"the session process ended while warming up ({describe_exit(event.exit_code)})"
                )
            else:
                logger.warning("ignoring %s from the session before it resumed", event)
                return
        self._settled.set()

    def wait_ready(self, give_up: Callable[[], bool]) -> bool:
        """True once warm; False if the warm-up failed, timed out or `give_up()` says so."""
        deadline = time.monotonic() + WARMUP_TIMEOUT_SECONDS
        while not self._settled.wait(0.1):
            if give_up():
                return False
            if time.monotonic() >= deadline:
                self.failure = f"not ready after {WARMUP_TIMEOUT_SECONDS:.0f}s"
                break
        if self.failure is None:
            logger.info("warm: the session is ready (%.2fs)", self.ready_seconds or 0.0)
            return True
        logger.warning("warm-up failed: %s; the session will start cold", self.failure)
        self.stop()
        return False

    @property
    def gone(self) -> str | None:
        """Why the warm process can no longer be resumed (it failed or ended after being
        ready), else None."""
        with self._lock:
            return None if self._resumed else self.failure

    def resume(self, resume_step: int | None) -> SessionProcess | None:
        """Let the waiting session train from `resume_step`; its events go to the agent now.

        None if the process failed or ended while it waited (after it was ready): its exit
        was the warm-up's to see, so the agent would wait forever for a session that is
        gone, heartbeating all the while. The caller starts the session cold instead.
        """
        with self._lock:
            if self.failure is not None:
                logger.warning("the warm session is gone (%s); starting cold", self.failure)
                return None
            self._resumed = True
        self.process.resume(resume_step)
        return self.process

    def stop(self) -> None:
        """End the warm process (a failed warm-up, or a notice before training began)."""
        self.process.terminate(grace_seconds=5.0)


def announce_ready(s3: S3Client, bucket: str, job_id: str, previous: int, **data: object) -> None:
    """Write the successor marker of attempt `previous`: its replacement is warm."""
    body = json.dumps({"job_id": job_id, "previous": previous, "at": utcnow().isoformat(), **data})
    s3.put_object(
        Bucket=bucket,
        Key=layout.successor_ready_key(job_id, previous),
        Body=body.encode(),
        ContentType="application/json",
    )


def hold_seconds(remaining: float, slowest_upload: float | None) -> float:
    """How long to keep training after a notice with `remaining` seconds to the reclaim.

    0 when this attempt has not uploaded a checkpoint yet (no estimate of what the final one
    needs) or when the hold would be too short to matter.
    """
    if slowest_upload is None:
        return 0.0
    reserve = max(
        min(HOLD_RESERVE_SECONDS, remaining * HOLD_RESERVE_FRACTION),
        HOLD_UPLOAD_FACTOR * slowest_upload,
        HOLD_MIN_RESERVE_SECONDS,
    )
    hold = remaining - reserve
    return hold if hold >= HOLD_MIN_SECONDS else 0.0


class NoticeHold:
    """The old instance: when to pass a spot-interruption notice on to the session."""

    def __init__(self, s3: S3Client, bucket: str, job_id: str, attempt: int) -> None:
        self._s3 = s3
        self._bucket = bucket
        self._key = layout.successor_ready_key(job_id, attempt)
        self._until: float | None = None
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.reason: str | None = None

    @property
    def started(self) -> bool:
        """True once `start` was called."""
        return self._until is not None

    def start(
        self, reclaim_at: datetime | None, default_seconds: float, slowest: float | None
    ) -> None:
        """Begin holding a notice whose instance goes at `reclaim_at`."""
        remaining = (
            default_seconds
            if reclaim_at is None
            else (reclaim_at - datetime.now(UTC)).total_seconds()
        )
        hold = hold_seconds(remaining, slowest)
        self._begin(hold, f"of {remaining:.1f}s while the replacement warms up")

    def start_for(self, limit: float) -> None:
        """Begin holding a return's stop: no reclaim time, the control plane's `limit`."""
        self._begin(limit, "(the control plane's limit) while the spot successor warms up")

    def _begin(self, hold: float, why: str) -> None:
        self._until = time.monotonic() + hold
        if hold <= 0:
            self.reason = "no hold"
            return
        logger.warning("holding the notice from the session for up to %.1fs %s", hold, why)
        self._thread = threading.Thread(target=self._watch, name="notice-hold", daemon=True)
        self._thread.start()

    def due(self) -> bool:
        """True once the session should be told: the successor is warm, or time is up."""
        if self._until is None:
            return False
        if self.reason is not None:
            return True
        if self._ready.is_set():
            self.reason = "the replacement is warm"
        elif time.monotonic() >= self._until:
            self.reason = "the hold's time is up"
        else:
            return False
        self._stop.set()
        logger.warning("telling the session now: %s", self.reason)
        return True

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                if object_exists(self._s3, self._bucket, self._key):
                    self._ready.set()
                    return
            except Exception as exc:
                logger.warning("looking for the successor marker failed: %s", exc)
            self._stop.wait(HOLD_POLL_SECONDS)

    def stop(self) -> None:
        """Stop watching."""
        self._stop.set()
