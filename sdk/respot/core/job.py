"""The job record: everything the control plane knows about one job, stored as one item."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from respot.core.states import JobState
from respot.spec.jobid import JobId
from respot.wire.gpu import GpuSample
from respot.wire.messages import JobSubmission

TIMELINE_LIMIT = 400  # entries kept on the record; the oldest progress entries go first


class Market(enum.StrEnum):
    """How an instance is bought."""

    SPOT = "spot"
    ON_DEMAND = "on-demand"


class Placement(BaseModel):
    """Where and how one attempt asks for an instance."""

    model_config = ConfigDict(frozen=True)

    market: Market
    instance_type: str
    subnet_id: str
    availability_zone: str
    max_price: float | None = None

    @property
    def key(self) -> str:
        """A short id of the capacity pool: market/type/az."""
        return f"{self.market.value}/{self.instance_type}/{self.availability_zone}"


class AttemptEnd(enum.StrEnum):
    """Why an attempt's instance life ended."""

    INTERRUPTED = "interrupted"  # spot interruption notice, then reclaimed
    LOST = "lost"  # the instance went away without notice (or heartbeats stopped)
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SUPERSEDED = "superseded"  # a newer attempt took over (e.g. the job finished elsewhere)
    BOOT_FAILED = "boot-failed"  # the boot script reported that it could not start the agent


class Attempt(BaseModel):
    """One instance life of a job: requested, (bound, started), ended."""

    number: int
    placement: Placement
    client_token: str
    requested_at: datetime
    tried: list[str] = Field(default_factory=list)  # "<pool>: <error code>" that failed first
    instance_id: str | None = None
    spot_request_id: str | None = None
    price_per_hour: float | None = None
    launched_at: datetime | None = None
    bound_at: datetime | None = None
    started_at: datetime | None = None
    restored_step: int | None = None
    restore_seconds: float | None = None
    last_heard_at: datetime | None = None  # the newest message of this attempt's agent
    first_step_at: datetime | None = None  # the session's first report() of this attempt
    last_step_at: datetime | None = None  # its last one, when the attempt was preempted
    # The send time of its newest heartbeat that carried a step (the session was training).
    last_progress_at: datetime | None = None
    notice_at: datetime | None = None  # when the control plane handled the notice
    notice_sent_at: datetime | None = None  # when EC2 emitted it (the event's `time`)
    # When the checkpoint saved on the interruption notice was complete in S3 (the agent's
    # send time of its AgentCheckpoint, right after the manifest was written).
    notice_checkpoint_at: datetime | None = None
    last_step: int | None = None
    checkpoint_step: int | None = None
    ended_at: datetime | None = None
    end: AttemptEnd | None = None
    # Why the instance never started training: its boot script's report, or how it vanished.
    boot_failure: str | None = None
    # EC2 ended the instance during its launch for capacity or a quota (its StateReason, e.g.
    # "Client.VolumeLimitExceeded: ..."): not a boot failure (`core.failures`).
    launch_failure: str | None = None
    # The checkpoint it restored was written in another region (respot.core.transfer).
    transfer_bytes: int | None = None
    transfer_from: str | None = None

    @property
    def is_open(self) -> bool:
        """True until the attempt's instance life has ended."""
        return self.end is None

    @property
    def never_started(self) -> bool:
        """True while the attempt's agent has not reported that training started."""
        return self.started_at is None and self.last_step is None and self.checkpoint_step is None


class Progress(BaseModel):
    """The latest the training reported."""

    step: int | None = None
    total_steps: int | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    at: datetime | None = None
    noted_step: int | None = None  # step and time of the last "progress" timeline note
    noted_at: datetime | None = None
    gpus: list[GpuSample] | None = None  # the newest heartbeat's GPU telemetry


class CheckpointInfo(BaseModel):
    """The newest complete checkpoint in S3."""

    step: int
    manifest_key: str
    attempt: int
    at: datetime
    size_bytes: int | None = None  # as the agent reported it (None: records from before)


class TimelineEntry(BaseModel):
    """One line of the job's story, for `respot status`, the demo and Slack."""

    at: datetime
    kind: str
    text: str
    data: dict[str, Any] = Field(default_factory=dict)


# A held job's wait (below): moves within the first QUEUE_TOP places are written at once, other
# changed details at most every QUEUE_REFRESH_SECONDS (QueueWait.same_as).
QUEUE_TOP = 10
QUEUE_REFRESH_SECONDS = 600.0


class QueueWait(BaseModel):
    """Why a HELD job waits, as the team's queue last planned it (respot.queue): what
    `respot ls`, `respot status` and the job's Slack card show, in `respot queue`'s words.

    `kind`: after, queue, limit, quota, turn or budget; `position`: its place among the jobs
    that wait (None: not a candidate, e.g. waiting for `after:`); `estimate`: when it may
    start (None: unknown)."""

    kind: str
    reason: str
    position: int | None = None
    estimate: datetime | None = None
    at: datetime  # when the pass that said so planned

    def same_as(self, other: QueueWait | None, slack_seconds: float = 600.0) -> bool:
        """True if writing this over `other` (the job's last written wait) tells the
        researcher nothing they need now, so the record and its Slack card stay as they are.

        News is written at once: what it waits for (`kind`), whether it has a position, a
        move within the first QUEUE_TOP places ("#2 -> #1"), an estimate becoming known or
        unknown. The details that every admission or ending changes for every waiting job
        (the free room in a reason, a place far back, an estimate drifting by more than
        `slack_seconds`) are written at most every QUEUE_REFRESH_SECONDS: they cost each held
        job at most one write (and card edit) per refresh, not one on every admission.
        `respot queue` reads the ledger, whose plan is fresh at every pass."""
        if other is None or self.kind != other.kind:
            return False
        if self.position != other.position and (
            self.position is None
            or other.position is None
            or min(self.position, other.position) <= QUEUE_TOP
        ):
            return False
        if (self.estimate is None) != (other.estimate is None):
            return False
        drifted = (
            self.estimate is not None
            and other.estimate is not None
            and (abs((self.estimate - other.estimate).total_seconds()) >= slack_seconds)
        )
        if (self.reason, self.position) == (other.reason, other.position) and not drifted:
            return True
        return (self.at - other.at).total_seconds() < QUEUE_REFRESH_SECONDS


class JobRecord(BaseModel):
    """The control plane's record of a job; every change is a compare-and-set on `version`."""

    job_id: JobId
    state: JobState
    version: int = 0
    created_at: datetime
    updated_at: datetime
    submission: JobSubmission  # environment values redacted (respot.wire.messages.redacted)
    submission_digest: str | None = None  # SHA-256 of the full submission, to spot duplicates
    # The submitter's team from their IAM principal tag `respot:team`, read at submission
    # (respot.aws.teamtags); the platform team's mapping wins (respot.queue.settings.team_of).
    team: str | None = None
    attempts: list[Attempt] = Field(default_factory=list)
    interruptions: int = 0
    waiting_since: datetime | None = None  # when the job last began to wait for capacity
    # When the team's queue admitted it (respot.queue; at submission when no queue holds it).
    admitted_at: datetime | None = None
    # While HELD: why it waits, its position and estimated start (the queue's last pass).
    queue_wait: QueueWait | None = None
    progress: Progress = Field(default_factory=Progress)
    checkpoint: CheckpointInfo | None = None
    last_heartbeat_at: datetime | None = None
    reason: str | None = None
    outputs_prefix: str | None = None
    # SHA-256 of outputs.json as the job's own agent reported it (AgentCompleted/AgentFailed)
    outputs_sha256: str | None = None
    finished_at: datetime | None = None
    notify: dict[str, Any] = Field(default_factory=dict)  # e.g. the Slack thread ts
    policy: dict[str, Any] = Field(default_factory=dict)  # placement policy memory
    timeline: list[TimelineEntry] = Field(default_factory=list)

    @property
    def spec(self):
        """The researcher's spec."""
        return self.submission.spec

    @property
    def current(self) -> Attempt | None:
        """The newest attempt, if any."""
        return self.attempts[-1] if self.attempts else None

    def attempt(self, number: int) -> Attempt | None:
        """The attempt with this number."""
        if 1 <= number <= len(self.attempts):
            return self.attempts[number - 1]
        return None

    def attempt_of_instance(self, instance_id: str) -> Attempt | None:
        """The attempt whose instance this is."""
        for a in reversed(self.attempts):
            if a.instance_id == instance_id:
                return a
        return None

    def open_instances(self) -> list[str]:
        """Instance ids of attempts that have not ended."""
        return [a.instance_id for a in self.attempts if a.instance_id and a.is_open]

    def add_timeline(self, entry: TimelineEntry) -> None:
        """Append to the timeline, keeping it within `TIMELINE_LIMIT` entries."""
        self.timeline.append(entry)
        if len(self.timeline) > TIMELINE_LIMIT:
            for i, old in enumerate(self.timeline):
                if old.kind == "progress":
                    del self.timeline[i]
                    break
            else:
                del self.timeline[0]
