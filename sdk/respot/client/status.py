"""`JobStatus`: a snapshot of a job, what `JobHandle.status()` returns and the views draw."""

from __future__ import annotations

from dataclasses import dataclass

from respot.core.job import JobRecord
from respot.core.states import JobState


@dataclass(frozen=True)
class JobStatus:
    """A snapshot of a job as the control plane records it."""

    job_id: str
    state: str  # a JobState value, or "SUBMITTED" while the message is on its way
    step: int | None
    total_steps: int | None
    interruptions: int
    attempts: int
    reason: str | None
    record: JobRecord | None

    @property
    def is_terminal(self) -> bool:
        """True once the job is COMPLETED, FAILED or CANCELLED."""
        return self.state in {s.value for s in JobState if s.is_terminal()}
