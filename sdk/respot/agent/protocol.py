"""The pipe protocol between the agent (parent) and the session process (child).

The child writes one JSON object per line to its events pipe; the parent writes one JSON
object per line to the child's control pipe. Neither is the child's stdout/stderr, which
carry only what the researcher's code prints (the parent logs them to a file).

    child -> parent   {"type": "report", "step": 12, "total_steps": 900, "metrics": {...}}
                      {"type": "checkpoint", "step": 12, "path": "/.../staging/000003-...",
                       "reason": "periodic" | "notice"}
                      {"type": "done", "step": 12, "interrupted": false, "notice": null}
                      {"type": "failed", "error": "ValueError: boom", "step": 12}
                      {"type": "ready", "seconds": 3.2}  (warm start: imported, prepared)
    parent -> child   {"type": "interrupt", "notice": "spot-interruption" | "stop"}
                      {"type": "checkpoint"}            (a rebalance recommendation)
                      {"type": "resume", "resume_step": 1200 | null}  (warm start: go)
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

# The child forwards at most one report per this interval (the first one at once).
REPORT_INTERVAL_SECONDS = 0.5

Notice = Literal["spot-interruption", "stop"]


class _Line(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ReportLine(_Line):
    """The session's latest step and metrics."""

    type: Literal["report"] = "report"
    step: int
    total_steps: int | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    at: float | None = None  # time.time() when report() was called (a held-back one keeps it)


class CheckpointLine(_Line):
    """A snapshot of the checkpoint directory is complete at `path`, ready to upload."""

    type: Literal["checkpoint"] = "checkpoint"
    step: int
    path: str
    reason: Literal["periodic", "notice"] = "periodic"


class DoneLine(_Line):
    """`train()` returned; `interrupted` if a notice had arrived by then."""

    type: Literal["done"] = "done"
    step: int | None = None
    checkpoint_step: int | None = None
    interrupted: bool = False
    notice: Notice | None = None


class FailedLine(_Line):
    """`train()` (or loading the session) raised."""

    type: Literal["failed"] = "failed"
    error: str
    step: int | None = None


class ReadyLine(_Line):
    """Warm start: the entry point is imported and `prepare()` returned; waiting to resume."""

    type: Literal["ready"] = "ready"
    seconds: float = 0.0  # from the process start


ChildLine = Annotated[
    ReportLine | CheckpointLine | DoneLine | FailedLine | ReadyLine, Field(discriminator="type")
]
CHILD_LINE: TypeAdapter[ReportLine | CheckpointLine | DoneLine | FailedLine | ReadyLine] = (
    TypeAdapter(ChildLine)
)


class InterruptLine(_Line):
    """An interruption notice: checkpoint and return from train()."""

    type: Literal["interrupt"] = "interrupt"
    notice: Notice


class CheckpointRequestLine(_Line):
    """A rebalance recommendation: checkpoint soon, keep training."""

    type: Literal["checkpoint"] = "checkpoint"


class ResumeLine(_Line):
    """Warm start: the checkpoint is restored (or there is none): call train()."""

    type: Literal["resume"] = "resume"
    resume_step: int | None = None


ParentLine = Annotated[
    InterruptLine | CheckpointRequestLine | ResumeLine, Field(discriminator="type")
]
PARENT_LINE: TypeAdapter[InterruptLine | CheckpointRequestLine | ResumeLine] = TypeAdapter(
    ParentLine
)


class SessionLaunch(BaseModel):
    """Everything the child needs to build the session (written as JSON next to the log)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    entry_point: str
    code_dir: str
    checkpoint_dir: str
    data_dir: str
    output_dir: str
    staging_dir: str
    hyperparameters: dict[str, Any] = Field(default_factory=dict)
    seed: int = 0
    job_id: str
    attempt: int
    resume_step: int | None = None
    report_interval_seconds: float = REPORT_INTERVAL_SECONDS
    # Warm start: import and prepare at once, then wait for a ResumeLine (resume_step then).
    warm: bool = False
    # Multi-process and container sessions: every rank watches this file for the notice (the
    # control pipe reaches rank 0 only). Absent: the control pipe alone.
    notice_file: str | None = None


def line(message: BaseModel) -> str:
    """One protocol line (JSON and a newline)."""
    return message.model_dump_json() + "\n"
