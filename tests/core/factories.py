"""Small builders of records and messages for the core's tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from respot.core.job import JobRecord
from respot.core.placement import ControlSettings, SubnetRef
from respot.spec.training import TrainingEnvVar
from respot.wire.messages import AgentMessage, JobSubmission

T0 = datetime(2026, 11, 21, 9, 0, tzinfo=UTC)
SETTINGS = ControlSettings(
    subnets=(SubnetRef("subnet-a", "us-east-1a"), SubnetRef("subnet-b", "us-east-1b")),
    default_instance_types=("g5.xlarge", "g4dn.xlarge"),
)


def at(seconds: float) -> datetime:
    """T0 plus `seconds`."""
    return T0 + timedelta(seconds=seconds)


def submission(job_id: str = "job-1", **spec: Any) -> JobSubmission:
    """A valid submission."""
    fields = {"name": "demo", "entry_point": "pkg.mod:Session", **spec}
    return JobSubmission(job_id=job_id, spec=TrainingEnvVar(**fields), submitted_at=T0)


def agent(
    job: JobRecord | str, attempt: int, instance_id: str, body: Any, seq: int = 1, sent: float = 0.0
) -> AgentMessage:
    """An agent message."""
    job_id = job if isinstance(job, str) else job.job_id
    return AgentMessage(
        job_id=job_id,
        attempt=attempt,
        instance_id=instance_id,
        seq=seq,
        sent_at=at(sent),
        body=body,
    )
