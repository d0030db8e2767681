"""Wire messages: what the laptop publishes to the jobs topic and what the agent sends back.

Each message is versioned JSON (`schema_version`) and small: SNS and SQS refuse bodies over
256 KiB, so `encode` checks the size before anything is sent.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, TypeAdapter, field_validator

from respot.exceptions import MessageTooLargeError
from respot.spec.jobid import JobId, check_job_id
from respot.spec.training import TrainingEnvVar
from respot.wire.gpu import MAX_GPUS, GpuSample
from respot.wire.limits import BoundedLines, BoundedText
from respot.wire.urls import without_credentials

MESSAGE_SCHEMA_VERSION: Literal[1] = 1
# SNS and SQS accept at most 262,144 bytes per message, attributes included; keep room for them.
MAX_MESSAGE_BYTES = 256 * 1024 - 4 * 1024


def utcnow() -> datetime:
    """The current time, timezone-aware, in UTC."""
    return datetime.now(UTC)


def new_job_id(name: str, now: datetime | None = None) -> str:
    """A job id that is readable, sortable by time and unique: `<name>-<yyyymmddhhmmss>-<hex6>`."""
    stamp = (now or utcnow()).strftime("%Y%m%d%H%M%S")
    ascii_ok = "abcdefghijklmnopqrstuvwxyz0123456789-"
    slug = "".join(c if c in ascii_ok else "-" for c in name.lower()).strip("-")[:40].strip("-")
    return check_job_id(f"{slug or 'job'}-{stamp}-{secrets.token_hex(3)}")


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CodeArtifact(_Message):
    """The researcher's code, zipped and put in S3 by `run()`."""

    s3_uri: str
    sha256: str
    size_bytes: int


class Provenance(_Message):
    """What is needed to reproduce the run, captured on the laptop."""

    git_commit: str | None = None
    git_dirty: bool | None = None
    git_remote: str | None = None
    python_version: str | None = None
    respot_version: str | None = None
    packages: dict[str, str] = Field(default_factory=dict)
    host: str | None = None
    user: str | None = None
    image_digest: str | None = None
    rerun_of: str | None = None

    @field_validator("git_remote")
    @classmethod
    def _no_credentials(cls, value: str | None) -> str | None:
        # Recorded for every researcher to read: never a token a remote URL carries, however
        # the provenance arrives (the SDK, a raw message, an older SDK).
        return None if value is None else without_credentials(value)


class TrialRef(_Message):
    """On a trial job's submission: the sweep and the trial number the job runs.

    Set only by the sweep Lambda, which submits trial jobs in-process; the commands Lambda
    refuses a published submission that carries one.
    """

    sweep_id: JobId
    trial: int = Field(ge=0)


class IdentityProof(_Message):
    """A signed, unsent `sts:GetCallerIdentity` request (see respot.identity.proofs)."""

    method: Literal["POST"] = "POST"
    url: str = Field(max_length=512)
    body: str = Field(max_length=256)
    headers: dict[str, str] = Field(max_length=16)


class JobSubmission(_Message):
    """A researcher's `run()`: the validated spec plus what respot adds on the laptop."""

    schema_version: Literal[1] = MESSAGE_SCHEMA_VERSION
    command: Literal["submit"] = "submit"
    job_id: JobId
    spec: TrainingEnvVar
    code: CodeArtifact | None = None
    provenance: Provenance | None = None
    submitted_at: datetime
    submitted_by: str | None = None  # the control plane sets it to the caller STS verified
    # ... and this to that caller's `UserId` (IAM's `aws:userid`): the instances' owner tag
    submitted_by_id: str | None = Field(default=None, max_length=256)
    proof: IdentityProof | None = None
    sweep: TrialRef | None = None


class CancelCommand(_Message):
    """A researcher's `cancel()`."""

    schema_version: Literal[1] = MESSAGE_SCHEMA_VERSION
    command: Literal["cancel"] = "cancel"
    job_id: JobId
    reason: BoundedText = "cancelled by user"
    requested_at: datetime
    requested_by: str | None = None  # the control plane sets it to the caller STS verified
    proof: IdentityProof | None = None
    # True: a job training now is asked to checkpoint and stop first, then ends CANCELLED with
    # that checkpoint kept (`respot notebook stop`, `respot cancel --checkpoint`; the path of a
    # platform rule's stop, core.lifecycle.stops); a job not training is cancelled at once.
    # Only `true`/`false` (never "yes" or 1); absent (None) when not asked, so a plain cancel's
    # JSON is what it always was (a control plane without the field still reads it).
    checkpoint_first: StrictBool | None = None


Command = Annotated[JobSubmission | CancelCommand, Field(discriminator="command")]
COMMAND_ADAPTER: TypeAdapter[JobSubmission | CancelCommand] = TypeAdapter(Command)


# ---- agent -> control plane ------------------------------------------------------------------


MAX_REFUSED_REPORTED = 20


class RefusedCheckpoint(_Message):
    """A checkpoint the restore passed over as unusable: which step, which manifest, why."""

    step: int | None = None
    manifest_key: str = Field(max_length=1024)
    reason: BoundedText


class AgentStarted(_Message):
    """The agent is up, the data is in place and the newest complete checkpoint is restored."""

    kind: Literal["started"] = "started"
    restored_step: int | None = None
    restored_manifest: str | None = None
    restore_seconds: float = 0.0
    setup_seconds: float = 0.0
    # Warm start (docs/agent.md): True if the session process was started and its entry point
    # imported before the restore; None if not tried (opted out). Why it fell back to cold.
    warm: bool | None = None
    warm_failure: BoundedText | None = None
    # Newer checkpoints the restore refused (a file missing, or not the size or SHA-256 its
    # manifest says), newest first; None when none was (kept out of the JSON then).
    refused_checkpoints: list[RefusedCheckpoint] | None = Field(
        default=None, max_length=MAX_REFUSED_REPORTED
    )


class AgentProgress(_Message):
    """A heartbeat, with the latest step and metrics the session reported (if any)."""

    kind: Literal["progress"] = "progress"
    step: int | None = None
    total_steps: int | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    # When the session's first report() of this attempt was made (its first training step).
    first_step_at: datetime | None = None
    # Per GPU, means since the previous heartbeat (respot.agent.telemetry); None: no GPU.
    gpus: list[GpuSample] | None = Field(default=None, max_length=MAX_GPUS)


class AgentCheckpoint(_Message):
    """A checkpoint is complete in S3: its manifest is written."""

    kind: Literal["checkpoint"] = "checkpoint"
    step: int
    manifest_key: str
    size_bytes: int
    uploaded_bytes: int
    upload_seconds: float
    reason: Literal["periodic", "notice", "final"] = "periodic"


class AgentPreempted(_Message):
    """The session stopped on an interruption notice after saving; the instance may now go."""

    kind: Literal["preempted"] = "preempted"
    step: int | None = None
    checkpoint_step: int | None = None
    notice: Literal["spot-interruption", "rebalance", "stop"]
    last_step_at: datetime | None = None  # when the session's last report() was made


class AgentCompleted(_Message):
    """The session returned normally; outputs are uploaded."""

    kind: Literal["completed"] = "completed"
    step: int | None = None
    outputs_prefix: str
    # SHA-256 of the `outputs.json` this attempt wrote: the job record keeps it, and
    # `respot pull` checks the manifest (so every file's SHA-256) against it, not against S3.
    outputs_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    train_seconds: float
    # The newest value of each metric the session reported (its final result, e.g. for a
    # sweep): the last heartbeat may be older than the session's last report.
    metrics: dict[str, float] = Field(default_factory=dict)


class AgentFailed(_Message):
    """The session raised or its process died; the job cannot go on by itself."""

    kind: Literal["failed"] = "failed"
    reason: BoundedText
    outputs_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")  # as completed
    exit_code: int | None = None
    log_tail: BoundedLines = Field(default_factory=list)
    step: int | None = None
    # "environment": the job's environment could not be built (pip refused the requirements,
    # the image could not be pulled). The job's own input is at fault, so a new instance would
    # fail the same way: the control plane fails the job at once, as for any AgentFailed.
    stage: Literal["setup", "environment", "session"] | None = None


class AgentBootFailed(_Message):
    """The instance's boot script failed before the agent ran; the instance powers off next.

    Sent by `infra/bootstrap/agent-bootstrap.sh` (not by the agent), in the same envelope
    (`AgentMessage`, `seq` 0). `reason` says which step failed; `log_tail` is the end of the
    boot script's log. An attempt that ends this way never started training.
    """

    kind: Literal["boot_failed"] = "boot_failed"
    reason: BoundedText
    log_tail: BoundedLines = Field(default_factory=list)


AgentBody = Annotated[
    AgentStarted
    | AgentProgress
    | AgentCheckpoint
    | AgentPreempted
    | AgentCompleted
    | AgentFailed
    | AgentBootFailed,
    Field(discriminator="kind"),
]


class AgentMessage(_Message):
    """Envelope of everything an agent sends; `seq` grows by one per message of one agent run.

    The boot script's `AgentBootFailed` uses the same envelope with `seq` 0.
    """

    schema_version: Literal[1] = MESSAGE_SCHEMA_VERSION
    job_id: JobId
    attempt: int
    instance_id: str
    seq: int
    sent_at: datetime
    body: AgentBody


def encode(message: BaseModel) -> str:
    """JSON text of `message`, refused with `MessageTooLargeError` if SNS/SQS would refuse it."""
    text = message.model_dump_json(exclude_none=True)
    size = len(text.encode())
    if size > MAX_MESSAGE_BYTES:
        raise MessageTooLargeError(
            f"the message is {size:,} bytes; SNS and SQS accept at most "
            f"{MAX_MESSAGE_BYTES:,} here. "
            "Move large hyperparameters or environment values into a file in S3 and pass its URI"
        )
    return text


REDACTED = "<redacted>"


def stored_submission(submission: JobSubmission) -> str:
    """The JSON the control plane stores as `submission.json` for the agent (no proof)."""
    return submission.model_dump_json(exclude={"proof"}, exclude_none=True)


def submission_digest(submission: JobSubmission) -> str:
    """SHA-256 of the submission as stored: equal digests mean the very same submission."""
    return hashlib.sha256(stored_submission(submission).encode()).hexdigest()


def redacted(submission: JobSubmission) -> JobSubmission:
    """The submission as every researcher may read it: environment values replaced.

    The job record (DynamoDB, readable by every researcher for `respot ls`/`status`) keeps
    only the names of the environment variables; their values travel to the instance in
    `submission.json`, which researchers cannot read (`RespotResearcherPolicy`).
    """
    submission = submission.model_copy(update={"proof": None})
    if not submission.spec.environment:
        return submission
    spec = submission.spec.model_copy(
        update={"environment": dict.fromkeys(submission.spec.environment, REDACTED)}
    )
    return submission.model_copy(update={"spec": spec})


def digest(data: bytes) -> str:
    """Hex SHA-256 of `data`."""
    return hashlib.sha256(data).hexdigest()


def as_dict(message: BaseModel) -> dict[str, Any]:
    """JSON-compatible dict of a message."""
    return message.model_dump(mode="json", exclude_none=True)
