"""The pipe protocol between the agent (parent) and the session process (child).

The child writes one JSON object per line to its events pipe; the parent writes one JSON
object per line to the child's control pipe. Neither is the child's stdout/stderr, which
carry only what the researcher's code prints (the parent logs them to a file).

    child -> parent   {"type": "report", "step": 12, "total_steps": 900, "metrics": {...}}
                      {"type": "checkpoint", "step": 12, "path": "/.../staging/000003-...",
                       "reason": "periodic" | "notice"}
                      {"type": "done", "step": 12, "interrupted": false, "notice": null}
                      {"type": "failed", "error": "ValueError: boom", "step": 12}
    parent -> child   {"type": "interrupt", "notice": "spot-interruption" | "stop"}
                      {"type": "checkpoint"}            (a rebalance recommendation)
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


ChildLine = Annotated[
    ReportLine | CheckpointLine | DoneLine | FailedLine, Field(discriminator="type")
]
CHILD_LINE: TypeAdapter[ReportLine | CheckpointLine | DoneLine | FailedLine] = TypeAdapter(
    ChildLine
)


class InterruptLine(_Line):
    """An interruption notice: checkpoint and return from train()."""

    type: Literal["interrupt"] = "interrupt"
    notice: Notice


class CheckpointRequestLine(_Line):
    """A rebalance recommendation: checkpoint soon, keep training."""

    type: Literal["checkpoint"] = "checkpoint"


ParentLine = Annotated[InterruptLine | CheckpointRequestLine, Field(discriminator="type")]
PARENT_LINE: TypeAdapter[InterruptLine | CheckpointRequestLine] = TypeAdapter(ParentLine)


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
    # Multi-process and container sessions: every rank watches this file for the notice (the
    # control pipe reaches rank 0 only). Absent: the control pipe alone.
    notice_file: str | None = None


def line(message: BaseModel) -> str:
    """One protocol line (JSON and a newline)."""
    return message.model_dump_json() + "\n"
