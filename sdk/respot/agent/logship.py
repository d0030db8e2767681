"""Ships the session's stdout/stderr to CloudWatch Logs while it trains, never blocking it.

`LogShipper.write(line)` only appends to a bounded buffer (it is called from the thread that
copies the child's output into `session.log`). One background thread sends the buffer with
`PutLogEvents` every `FLUSH_SECONDS`, or sooner when `TRIGGER_BYTES` are waiting, in batches
that respect the API's limits: at most 1,048,576 bytes (each message's UTF-8 size plus 26)
and 10,000 events per call, events in chronological order, each event at most 256 KiB, one
batch within 24 hours. A send that fails is retried a few times and then dropped with a
warning: the S3 copy of `session.log`, uploaded at the end of the attempt before its last
report (`respot.agent.endings`), is the durable one.

Stream: `<job_id>/<attempt:04d>/<instance_id>` in the deployment's group (`/respot/jobs` on
AWS; the local runtime makes its own group in the emulator). The stream is created on first
use; if the group does not exist, shipping turns itself off with one warning.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

MAX_BATCH_BYTES = 1_048_576  # PutLogEvents: sum of UTF-8 message sizes + 26 bytes per event
EVENT_OVERHEAD_BYTES = 26
MAX_BATCH_EVENTS = 10_000
MAX_EVENT_BYTES = 256 * 1024 - EVENT_OVERHEAD_BYTES  # one event, overhead included, <= 256 KiB
MAX_BATCH_SPAN_MS = 24 * 3600 * 1000 - 1000
FLUSH_SECONDS = 1.0  # also keeps us far below the five PutLogEvents per second per stream
TRIGGER_BYTES = 256 * 1024  # send early when this much is waiting
MAX_BUFFER_BYTES = 16 * 1024 * 1024  # beyond this the oldest lines are dropped (and counted)
SEND_ATTEMPTS = 3
RETRY_GAP_SECONDS = 0.5


def stream_name(job_id: str, attempt: int, instance_id: str) -> str:
    """The log stream of one attempt on one instance; lexical order is attempt order."""
    return f"{job_id}/{attempt:04d}/{instance_id}"


def _message(raw: bytes) -> str:
    """One log event's text: the line without its newline, at most `MAX_EVENT_BYTES`."""
    data = raw.rstrip(b"\r\n")
    if len(data) > MAX_EVENT_BYTES:
        data = data[:MAX_EVENT_BYTES]
    text = data.decode("utf-8", errors="replace")
    while len(text.encode("utf-8")) > MAX_EVENT_BYTES:  # replacement chars can grow it
        text = text[: len(text) - 64]
    return text or " "  # CloudWatch refuses empty messages


def batches(events: list[tuple[int, str]]) -> list[list[dict[str, Any]]]:
    """Split time-ordered (timestamp_ms, message) events into PutLogEvents-sized batches."""
    out: list[list[dict[str, Any]]] = []
    batch: list[dict[str, Any]] = []
    size = 0
    first_ts = 0
    for ts, message in events:
        cost = len(message.encode("utf-8")) + EVENT_OVERHEAD_BYTES
        if batch and (
            size + cost > MAX_BATCH_BYTES
            or len(batch) >= MAX_BATCH_EVENTS
            or ts - first_ts > MAX_BATCH_SPAN_MS
        ):
            out.append(batch)
            batch, size = [], 0
        if not batch:
            first_ts = ts
        batch.append({"timestamp": ts, "message": message})
        size += cost
    if batch:
        out.append(batch)
    return out


class LogShipper:
    """Batches output lines into one CloudWatch Logs stream from a background thread."""

    def __init__(
        self,
        *,
        client: Any,
        group: str,
        stream: str,
        flush_seconds: float = FLUSH_SECONDS,
        retry_gap_seconds: float = RETRY_GAP_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.group = group
        self.stream = stream
        self._flush_seconds = flush_seconds
        self._retry_gap = retry_gap_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._buffer: deque[tuple[int, str]] = deque()
        self._buffered_bytes = 0
        self._last_ts = 0
        self._sending = False
        self._flush_requested = False
        self._closed = False
        self._disabled = False
        self._stream_ready = False
        self.shipped = 0  # events CloudWatch accepted
        self.dropped = 0  # events given up on (buffer full, or sends that kept failing)
        self._thread = threading.Thread(target=self._run, name="log-shipper", daemon=True)
        self._thread.start()

    def write(self, raw: bytes) -> None:
        """Queue one output line; never blocks on the network, never raises."""
        try:
            message = _message(raw)
            with self._lock:
                if self._closed or self._disabled:
                    return
                # Timestamps must never go backwards within the stream.
                ts = max(int(self._clock() * 1000), self._last_ts)
                self._last_ts = ts
                self._buffer.append((ts, message))
                self._buffered_bytes += len(message.encode("utf-8")) + EVENT_OVERHEAD_BYTES
                while self._buffered_bytes > MAX_BUFFER_BYTES and self._buffer:
                    _, old = self._buffer.popleft()
                    self._buffered_bytes -= len(old.encode("utf-8")) + EVENT_OVERHEAD_BYTES
                    self.dropped += 1
                if self._buffered_bytes >= TRIGGER_BYTES:
                    self._wake.notify_all()
        except Exception:  # a log line must never break the output copy
            logger.debug("could not queue a log line", exc_info=True)

    def flush(self, timeout: float) -> bool:
        """Send everything written so far; False if it is not all sent within `timeout`."""
        deadline = time.monotonic() + timeout
        with self._lock:
            self._flush_requested = True
            self._wake.notify_all()
            while (self._buffer or self._sending) and not self._disabled:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._wake.wait(min(remaining, 0.1))
                if self._buffer:
                    self._flush_requested = True
                    self._wake.notify_all()
        return True

    def close(self, timeout: float) -> bool:
        """Flush, then stop the thread."""
        done = self.flush(timeout)
        with self._lock:
            self._closed = True
            self._wake.notify_all()
        self._thread.join(timeout=max(timeout, 0.1))
        if self.dropped:
            logger.warning("%d log line(s) were not shipped to CloudWatch Logs", self.dropped)
        return done

    # ---- the sending thread ------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                if not (
                    self._closed or self._flush_requested or self._buffered_bytes >= TRIGGER_BYTES
                ):
                    self._wake.wait(self._flush_seconds)
                if self._closed and not self._buffer:
                    return
                events = list(self._buffer)
                self._buffer.clear()
                self._buffered_bytes = 0
                self._flush_requested = False
                self._sending = bool(events)
            try:
                for batch in batches(events):
                    self._send(batch)
            except Exception:
                logger.exception("shipping log lines failed")
            finally:
                with self._lock:
                    self._sending = False
                    self._wake.notify_all()

    def _send(self, batch: list[dict[str, Any]]) -> None:
        if self._disabled:
            self.dropped += len(batch)
            return
        for attempt in range(SEND_ATTEMPTS):
            try:
                if not self._stream_ready:
                    self._create_stream()
                if self._disabled:
                    self.dropped += len(batch)
                    return
                self.client.put_log_events(
                    logGroupName=self.group, logStreamName=self.stream, logEvents=batch
                )
                self.shipped += len(batch)
                return
            except Exception as exc:
                code = _error_code(exc)
                if code == "ResourceNotFoundException":
                    self._stream_ready = False  # the stream is gone (or never was): make it
                logger.warning(
                    "PutLogEvents to %s failed (%s); attempt %d of %d",
                    self.stream,
                    code or exc,
                    attempt + 1,
                    SEND_ATTEMPTS,
                )
                time.sleep(self._retry_gap * 2**attempt)
        self.dropped += len(batch)

    def _create_stream(self) -> None:
        try:
            self.client.create_log_stream(logGroupName=self.group, logStreamName=self.stream)
        except Exception as exc:
            code = _error_code(exc)
            if code == "ResourceAlreadyExistsException":
                pass
            elif code == "ResourceNotFoundException":
                logger.warning(
                    "log group %s does not exist: the session's output is only in session.log",
                    self.group,
                )
                self._disabled = True
                return
            else:
                raise
        self._stream_ready = True


def _error_code(exc: Exception) -> str | None:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code") or "") or None
    return None
