"""A sweep's record and the messages that drive it.

The record is one item of the job table (`pk=SWEEP#<id>`, `sk=SWEEP`), written by
compare-and-set like a job record. It maps trial numbers to respot jobs and keeps what
`respot sweep status` and Slack show; the study itself (parameters, intermediate values,
the sampler's history) is the Optuna journal beside it (`respot.sweep.journal`).
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from respot.spec.jobid import JobId
from respot.sweep.spec import SweepSpec
from respot.wire.limits import BoundedText
from respot.wire.messages import CodeArtifact, IdentityProof, Provenance, TrialRef

__all__ = [
    "SweepKick",
    "SweepRecord",
    "SweepState",
    "SweepStop",
    "SweepStopCommand",
    "SweepSubmission",
    "Trial",
    "TrialEvent",
    "TrialRef",
    "TrialState",
]


class SweepState(enum.StrEnum):
    """Where a sweep is."""

    RUNNING = "RUNNING"  # trials are being run or asked for
    COMPLETED = "COMPLETED"  # every trial has ended (terminal)
    STOPPED = "STOPPED"  # stopped by its owner; running trials were cancelled (terminal)

    def is_terminal(self) -> bool:
        """True for states a sweep never leaves."""
        return self is not SweepState.RUNNING


class TrialState(enum.StrEnum):
    """A trial's state, as Optuna names them."""

    RUNNING = "RUNNING"
    COMPLETE = "COMPLETE"
    PRUNED = "PRUNED"
    FAIL = "FAIL"


class Trial(BaseModel):
    """One trial: its Optuna number, its respot job and how it ended."""

    number: int
    job_id: str
    params: dict[str, Any]
    state: TrialState = TrialState.RUNNING
    value: float | None = None
    reason: str | None = None
    last_step: int | None = None  # newest intermediate value told to the study
    started_at: datetime
    finished_at: datetime | None = None


class SweepSubmission(BaseModel):
    """A researcher's `sweep()`: the validated spec plus what respot adds on the laptop."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = 1
    command: Literal["sweep"] = "sweep"
    sweep_id: JobId
    spec: SweepSpec
    code: CodeArtifact | None = None
    provenance: Provenance | None = None
    submitted_at: datetime
    submitted_by: str | None = None  # the control plane sets it to the caller STS verified
    proof: IdentityProof | None = None

    @property
    def job_id(self) -> str:
        """The id an identity proof is bound to (respot.identity.proofs): the sweep's."""
        return self.sweep_id


class SweepRecord(BaseModel):
    """Everything respot keeps about one sweep besides its study."""

    sweep_id: JobId
    state: SweepState = SweepState.RUNNING
    version: int = 0
    created_at: datetime
    updated_at: datetime
    submission: SweepSubmission
    trials: list[Trial] = Field(default_factory=list)
    reason: str | None = None
    finished_at: datetime | None = None
    slack: dict[str, str] = Field(default_factory=dict)  # channel id and thread ts

    @property
    def spec(self) -> SweepSpec:
        """The sweep's specification."""
        return self.submission.spec

    def trial_of(self, job_id: str) -> Trial | None:
        """The trial run by job `job_id`, if any."""
        return next((t for t in self.trials if t.job_id == job_id), None)

    def running(self) -> list[Trial]:
        """Trials whose job has not ended."""
        return [t for t in self.trials if t.state is TrialState.RUNNING]

    def best(self) -> Trial | None:
        """The best completed trial so far."""
        done = [t for t in self.trials if t.state is TrialState.COMPLETE and t.value is not None]
        if not done:
            return None
        sign = 1.0 if self.spec.direction == "minimize" else -1.0
        return min(done, key=lambda t: (sign * (t.value or 0.0), t.number))


class TrialEvent(BaseModel):
    """What the control plane tells a sweep about one of its trial jobs (FIFO per sweep)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["trial"] = "trial"
    sweep_id: JobId
    job_id: str
    trial: int
    state: str  # the job's state (JobState value)
    step: int | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    reason: BoundedText | None = None


class SweepKick(BaseModel):
    """Start (or repair) a sweep: ask for trials up to its parallelism."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["kick"] = "kick"
    sweep_id: JobId


class SweepStop(BaseModel):
    """The owner stops a sweep: no new trials; running trials are cancelled."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["stop"] = "stop"
    sweep_id: JobId
    reason: BoundedText = "stopped by its owner"


class SweepStopCommand(BaseModel):
    """A researcher's `respot sweep stop`: published on the jobs topic (command=sweep-stop)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = 1
    command: Literal["sweep-stop"] = "sweep-stop"
    sweep_id: JobId
    reason: str = Field(default="stopped by its owner", max_length=500)
    requested_at: datetime
    requested_by: str | None = None  # the control plane sets it to the caller STS verified
    proof: IdentityProof | None = None

    @property
    def job_id(self) -> str:
        """The id an identity proof is bound to (respot.identity.proofs): the sweep's."""
        return self.sweep_id
