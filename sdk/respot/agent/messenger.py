"""Sends the agent's messages to the control plane's SQS queue, in order, without ever failing.

`send` only queues the message (it never blocks training or raises); one thread sends them
in `seq` order, retrying with capped backoff. A message that still cannot be sent is logged
and dropped: the control plane notices silence through its heartbeat timeout.
"""

from __future__ import annotations

import hashlib
import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from respot.wire.messages import (
    AgentBody,
    AgentCompleted,
    AgentFailed,
    AgentMessage,
    AgentPreempted,
    encode,
    utcnow,
)

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

logger = logging.getLogger(__name__)

SEND_ATTEMPTS = 6  # about 30 s of retries for a heartbeat or a checkpoint
FINAL_SEND_ATTEMPTS = 12  # about 90 s for completed / failed / preempted
BACKOFF_SECONDS = 0.5
MAX_BACKOFF_SECONDS = 8.0


@dataclass(frozen=True)
class _Outgoing:
    seq: int
    body: Any


class AgentMessenger:
    """Queue-backed sender of `AgentMessage`s for one agent run (one job attempt)."""

    def __init__(
        self,
        *,
        client: SQSClient,
        queue_url: str,
        job_id: str,
        attempt: int,
        instance_id: str,
    ) -> None:
        self._client = client
        self._queue_url = queue_url
        self._job_id = job_id
        self._attempt = attempt
        self._instance_id = instance_id
        self._seq = 0
        self._seq_lock = threading.Lock()
        self._queue: queue.Queue[_Outgoing | None] = queue.Queue()
        self._fifo = queue_url.endswith(".fifo")
        self.sent: list[AgentMessage] = []  # what reached SQS, for logs and tests
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="agent-messenger", daemon=True)
        self._thread.start()

    def send(self, body: AgentBody) -> int:
        """Queue `body` for sending; returns its sequence number."""
        with self._seq_lock:
            self._seq += 1
            seq = self._seq
            self._queue.put(_Outgoing(seq, body))
        return seq

    def flush(self, timeout: float) -> bool:
        """Wait until every queued message is sent or dropped; False on timeout."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

    def close(self, timeout: float) -> bool:
        """Flush, then stop the sending thread."""
        done = self.flush(timeout)
        self._queue.put(None)
        self._thread.join(timeout=1.0)
        return done

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                self._deliver(item)
            except Exception:
                logger.exception("agent message %s could not be sent", item)
            finally:
                self._queue.task_done()

    def _deliver(self, item: _Outgoing) -> None:
        message = AgentMessage(
            job_id=self._job_id,
            attempt=self._attempt,
            instance_id=self._instance_id,
            seq=item.seq,
            sent_at=utcnow(),
            body=item.body,
        )
        text = encode(message)
        extra: dict[str, str] = {}
        if self._fifo:
            extra["MessageGroupId"] = self._job_id
            extra["MessageDeduplicationId"] = hashlib.sha256(
                f"{self._job_id}/{self._attempt}/{self._instance_id}/{item.seq}".encode()
            ).hexdigest()
        final = isinstance(item.body, AgentCompleted | AgentFailed | AgentPreempted)
        attempts = FINAL_SEND_ATTEMPTS if final else SEND_ATTEMPTS
        for attempt in range(attempts):
            try:
                self._client.send_message(QueueUrl=self._queue_url, MessageBody=text, **extra)
            except Exception as exc:
                delay = min(BACKOFF_SECONDS * 2**attempt, MAX_BACKOFF_SECONDS)
                logger.warning(
                    "sending %s #%d failed (%s); retrying in %.1fs",
                    item.body.kind,
                    item.seq,
                    exc,
                    delay,
                )
                time.sleep(delay)
                continue
            self.sent.append(message)
            logger.info("sent %s #%d", item.body.kind, item.seq)
            return
        self.dropped += 1
        logger.error("dropped %s #%d after %d attempts", item.body.kind, item.seq, attempts)
