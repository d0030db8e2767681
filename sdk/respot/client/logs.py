"""A job's training output (stdout/stderr), across every instance it ran on, in order.

The agent ships each attempt's output live to CloudWatch Logs, stream
`<job_id>/<attempt:04d>/<instance_id>` in the deployment's log group, and uploads the whole
`session.log` to `jobs/<job>/logs/<attempt>/` in S3 when the attempt ends. `JobLogs` reads
the CloudWatch streams; an attempt without a stream (no log group, no permission to read it,
or an agent that could not ship) falls back to its S3 copy once that exists.

    logs = JobLogs(deployment, session, job_id)
    for line in logs.read(record):          # everything so far, attempt by attempt
        print(line.prefix, line.text)
    logs.follow(handle, emit=print_line)    # and what comes next, until the job is over
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from respot.storage import layout

if TYPE_CHECKING:
    from respot.client.deployment import Deployment
    from respot.client.handle import JobHandle
    from respot.core.job import JobRecord

logger = logging.getLogger(__name__)

FOLLOW_POLL_SECONDS = 2.0


@dataclass(frozen=True)
class LogLine:
    """One line of training output."""

    attempt: int
    instance_id: str | None
    text: str
    timestamp_ms: int | None = None  # when the agent read it (CloudWatch); None from S3
    source: Literal["cloudwatch", "s3", "failure"] = "cloudwatch"

    @property
    def prefix(self) -> str:
        """`a2 i-0abc...`: which attempt and instance printed it."""
        return f"a{self.attempt} {self.instance_id or '-'}"


@dataclass
class _Stream:
    name: str
    attempt: int
    instance_id: str | None
    token: str | None = None


def _parse_stream(job_id: str, name: str) -> tuple[int, str | None] | None:
    rest = name.removeprefix(f"{job_id}/")
    if rest == name:
        return None
    attempt, _, instance = rest.partition("/")
    if not attempt.isdigit():
        return None
    return int(attempt), instance or None


# Errors that mean CloudWatch Logs is not readable here at all (rather than not right now).
_NO_ACCESS = frozenset(
    {"AccessDeniedException", "ResourceNotFoundException", "UnrecognizedClientException"}
)


def failure_lines(record: JobRecord | None) -> list[LogLine]:
    """What to show for a FAILED job that printed nothing: its reason, then the log tail its
    failure report carried (pip's output when the job's environment could not be built, the
    agent's own last lines when setup failed); empty for any other job."""
    if record is None or record.state.value != "FAILED":
        return []
    entry = next((e for e in reversed(record.timeline) if e.kind == "failed"), None)
    attempt = record.current.number if record.current else 0
    instance = record.current.instance_id if record.current else None
    tail = entry.data.get("log_tail") if entry is not None else None
    lines = [f"respot: no session output; the job failed: {record.reason or '?'}"]
    if isinstance(tail, list) and tail:
        lines.append("respot: the last lines its failure report carried:")
        lines.extend(str(t) for t in tail)
    return [LogLine(attempt, instance, text, source="failure") for text in lines]


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code") or type(exc).__name__)
    return type(exc).__name__


class JobLogs:
    """Reads one job's output from CloudWatch Logs, else from S3."""

    def __init__(self, deployment: Deployment, session: Any, job_id: str) -> None:
        self.deployment = deployment
        self.job_id = job_id
        self.group = deployment.job_log_group
        self._logs = deployment.client("logs", session)
        self._s3 = deployment.client("s3", session)
        self._streams: dict[str, _Stream] = {}
        self._s3_done: set[int] = set()
        self._cloudwatch_ok = True
        self.warnings: list[str] = []

    # ---- CloudWatch Logs ---------------------------------------------------------------------

    def _discover(self) -> list[_Stream]:
        if not self._cloudwatch_ok:
            return []
        kwargs: dict[str, Any] = {
            "logGroupName": self.group,
            "logStreamNamePrefix": f"{self.job_id}/",
        }
        try:
            while True:
                page = self._logs.describe_log_streams(**kwargs)
                for s in page.get("logStreams", []):
                    name = s["logStreamName"]
                    parsed = _parse_stream(self.job_id, name)
                    if parsed is not None and name not in self._streams:
                        self._streams[name] = _Stream(name, parsed[0], parsed[1])
                token = page.get("nextToken")
                if not token or token == kwargs.get("nextToken"):
                    break
                kwargs["nextToken"] = token
        except Exception as exc:
            code = _code(exc)
            if code in _NO_ACCESS:
                self._cloudwatch_ok = False
                self.warnings.append(
                    f"cannot read CloudWatch Logs group {self.group} ({code}); showing the logs "
                    "each attempt uploads to S3 when it ends"
                )
                return []
            # Anything else may pass (throttling, the network): keep what is known, try again.
            self.warnings.append(f"listing log streams failed ({code}); will retry")
        return sorted(self._streams.values(), key=lambda s: (s.attempt, s.name))

    def _drain(self, stream: _Stream) -> list[LogLine]:
        lines: list[LogLine] = []
        while True:
            kwargs: dict[str, Any] = {
                "logGroupName": self.group,
                "logStreamName": stream.name,
                "startFromHead": True,
            }
            if stream.token:
                kwargs["nextToken"] = stream.token
            try:
                page = self._logs.get_log_events(**kwargs)
            except Exception as exc:  # the next read starts from the same token
                self.warnings.append(f"reading {stream.name} failed ({_code(exc)}); will retry")
                return lines
            events = page.get("events", [])
            lines.extend(
                LogLine(stream.attempt, stream.instance_id, e["message"], int(e["timestamp"]))
                for e in events
            )
            token = page.get("nextForwardToken")
            unchanged = token == stream.token
            stream.token = token or stream.token
            if not events or unchanged:
                return lines

    # ---- S3 ----------------------------------------------------------------------------------

    def _s3_lines(self, attempt: int, instance_id: str | None) -> list[LogLine] | None:
        key = layout.logs_prefix(self.job_id, attempt) + "session.log"
        try:
            body = self._s3.get_object(Bucket=self.deployment.bucket, Key=key)["Body"].read()
        except Exception as exc:
            code = _code(exc)
            if code not in ("NoSuchKey", "404"):
                self.warnings.append(f"cannot read s3://{self.deployment.bucket}/{key} ({code})")
            return None
        text = body.decode("utf-8", errors="replace")
        return [LogLine(attempt, instance_id, t, None, "s3") for t in text.splitlines()]

    # ---- reading -----------------------------------------------------------------------------

    def _fallbacks(self, record: JobRecord | None, *, ended_only: bool) -> list[LogLine]:
        """S3 copies of attempts that have no CloudWatch stream."""
        if record is None:
            return []
        with_stream = {s.attempt for s in self._streams.values()}
        out: list[LogLine] = []
        for att in record.attempts:
            if att.number in with_stream or att.number in self._s3_done:
                continue
            if ended_only and att.end is None:
                continue
            lines = self._s3_lines(att.number, att.instance_id)
            if lines is not None:
                self._s3_done.add(att.number)
                out.extend(lines)
        return out

    def read(self, record: JobRecord | None) -> Iterator[LogLine]:
        """Every line so far: attempt 1's, then attempt 2's, ... (each from its best source)."""
        per_attempt: dict[int, list[LogLine]] = {}
        for stream in self._discover():
            per_attempt.setdefault(stream.attempt, []).extend(self._drain(stream))
        for line in self._fallbacks(record, ended_only=False):
            per_attempt.setdefault(line.attempt, []).append(line)
        for attempt in sorted(per_attempt):
            yield from per_attempt[attempt]

    def follow(
        self,
        handle: JobHandle,
        emit: Callable[[LogLine], None],
        *,
        poll_seconds: float = FOLLOW_POLL_SECONDS,
        timeout: float | None = None,
    ) -> JobRecord | None:
        """Emit every line so far, then new lines as they come, until the job is over.

        Returns the job's final record (None if it never appeared within `timeout`).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        record = handle.record()
        for line in self.read(record):
            emit(line)
        while True:
            over = record is not None and record.state.is_terminal()
            if deadline is not None and time.monotonic() > deadline:
                return record
            if not over:
                time.sleep(poll_seconds)
                record = handle.record()
            new: list[LogLine] = []
            for stream in self._discover():
                new.extend(self._drain(stream))
            new.sort(key=lambda x: (x.timestamp_ms or 0, x.attempt))
            new.extend(self._fallbacks(record, ended_only=not over))
            for line in new:
                emit(line)
            if over:
                return record
