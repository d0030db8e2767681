"""Helpers of the agent tests: put a job in S3, start a real agent process, read its messages."""

from __future__ import annotations

import hashlib
import io
import subprocess
import sys
import time
import uuid
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.local.imds import ImdsServer
from respot.spec.training import TrainingEnvVar
from respot.storage import layout
from respot.wire.messages import AgentMessage, CodeArtifact, JobSubmission, utcnow

from .conftest import JOBS_DIR, child_env

ENTRY_POINT = "countjob:CountingSession"


def zip_dir(root: Path) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted([*root.rglob("*.py"), *root.rglob("*.ipynb")]):
            zf.write(path, path.relative_to(root).as_posix())
    return buf.getvalue()


def submit_job(
    s3: Any,
    bucket: str,
    *,
    hyperparameters: dict[str, Any],
    environment: dict[str, str] | None = None,
    secrets: dict[str, str] | None = None,
    checkpoint_keep: int = 2,
    entry_point: str = ENTRY_POINT,
    **spec_fields: Any,
) -> JobSubmission:
    """Put the code zip and the submission of a CountingSession job in S3."""
    job_id = f"count-{uuid.uuid4().hex[:8]}"
    code = zip_dir(JOBS_DIR)
    digest = hashlib.sha256(code).hexdigest()
    key = layout.code_key(job_id, digest)
    s3.put_object(Bucket=bucket, Key=key, Body=code)
    submission = JobSubmission(
        job_id=job_id,
        spec=TrainingEnvVar(
            name="count",
            entry_point=entry_point,
            hyperparameters=hyperparameters,
            environment=environment or {},
            secrets=secrets or {},
            checkpoint_keep=checkpoint_keep,
            **spec_fields,
        ),
        code=CodeArtifact(s3_uri=f"s3://{bucket}/{key}", sha256=digest, size_bytes=len(code)),
        submitted_at=utcnow(),
    )
    s3.put_object(
        Bucket=bucket,
        Key=layout.submission_key(job_id),
        Body=submission.model_dump_json().encode(),
    )
    return submission


@dataclass
class Mailbox:
    """Everything the agents sent to one queue, in arrival order."""

    sqs: Any
    queue_url: str
    messages: list[AgentMessage] = field(default_factory=list)

    def poll(self) -> None:
        while True:
            resp = self.sqs.receive_message(
                QueueUrl=self.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0
            )
            batch = resp.get("Messages", [])
            if not batch:
                return
            for m in batch:
                self.messages.append(AgentMessage.model_validate_json(m["Body"]))
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=m["ReceiptHandle"])

    def wait_for(self, predicate: Callable[[AgentMessage], bool], timeout: float) -> AgentMessage:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.poll()
            for m in self.messages:
                if predicate(m):
                    return m
            time.sleep(0.1)
        raise AssertionError(f"no such message in {timeout}s; got {self.kinds()}")

    def of(self, attempt: int) -> list[AgentMessage]:
        return sorted((m for m in self.messages if m.attempt == attempt), key=lambda m: m.seq)

    def kinds(self, attempt: int | None = None) -> list[str]:
        ms = self.messages if attempt is None else self.of(attempt)
        return [m.body.kind for m in ms]


@dataclass
class AgentProcess:
    """A real `python -m respot.agent` with its own IMDS server."""

    process: subprocess.Popen[bytes]
    imds: ImdsServer
    log_path: Path

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise AssertionError(f"the agent did not exit in {timeout}s:\n{self.log()}") from None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, text: str, timeout: float) -> None:
        """Wait until the agent has logged `text` (an event, not a wall-clock budget: the
        timeout only bounds a test whose agent never gets there)."""
        deadline = time.monotonic() + timeout
        while text not in self.log():
            if time.monotonic() >= deadline or self.process.poll() is not None:
                if text in self.log():
                    return
                raise AssertionError(f"the agent did not log {text!r} in {timeout}s:\n{self.log()}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.imds.stop()


def start_agent(
    *,
    moto_url: str,
    bucket: str,
    queue_url: str,
    job_id: str,
    attempt: int,
    work_dir: Path,
    await_handoff: int | None = None,
    without: tuple[str, ...] = (),
    **env: str,
) -> AgentProcess:
    tags = {"respot:job-id": job_id, "respot:attempt": str(attempt)}
    if await_handoff is not None:
        tags["respot:await-handoff"] = str(await_handoff)
    imds = ImdsServer(
        instance_id=f"i-{uuid.uuid4().hex[:17]}",
        instance_type="g5.xlarge",
        availability_zone="us-east-1a",
        tags=tags,
    ).start()
    work_dir.mkdir(parents=True, exist_ok=True)
    log_path = work_dir / f"agent-{attempt}.log"
    settings = {
        "AWS_ENDPOINT_URL": moto_url,
        "AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.url,
        "RESPOT_BUCKET": bucket,
        "RESPOT_AGENT_QUEUE_URL": queue_url,
        "RESPOT_WORK_DIR": str(work_dir),
        "RESPOT_HEARTBEAT_SECONDS": "0.5",
        "RESPOT_IMDS_POLL_SECONDS": "0.1",
        "RESPOT_HANDOFF_WAIT_SECONDS": "10",
        "RESPOT_SHUTDOWN": "exit",
        **env,
    }
    with log_path.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "respot.agent"],
            env={k: v for k, v in child_env(**settings).items() if k not in without},
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    return AgentProcess(process, imds, log_path)
