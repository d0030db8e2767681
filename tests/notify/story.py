"""A job's life driven through the pure core, keeping each commit's record and notes.

`Story` applies events the way `ControlPlane.apply` does (decide, commit with version + 1,
follow up) and records, per commit that noted something, the `JobNotification` the control
plane would have queued: the notifier's tests deliver exactly what production would send.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from respot.core.effects import LaunchInstance
from respot.core.events import (
    AgentReport,
    CancelRequested,
    CapacityLaunched,
    CapacityUnavailable,
    InstanceUp,
    InterruptionNotice,
    JobEvent,
    PlaceNow,
    Submitted,
)
from respot.core.job import JobRecord
from respot.core.lifecycle import decide
from respot.core.placement import ControlSettings
from respot.core.states import JobState
from respot.notify import JobNotification
from respot.wire.messages import (
    AgentCheckpoint,
    AgentCompleted,
    AgentFailed,
    AgentPreempted,
    AgentProgress,
    AgentStarted,
    CancelCommand,
)
from tests.core.factories import SETTINGS, agent, at, submission


class Story:
    """One job, event by event, with the notifications its commits produce."""

    def __init__(
        self,
        job_id: str = "job-1",
        *,
        settings: ControlSettings = SETTINGS,
        submitted_by: str | None = "ana",
        **spec: Any,
    ) -> None:
        self.job_id = job_id
        self.settings = settings
        self.job: JobRecord | None = None
        self.launches: list[LaunchInstance] = []
        # per commit: the record written and the notification queued (None: nothing noted)
        self.commits: list[tuple[JobRecord, JobNotification | None]] = []
        self._seq = 0
        self._spec = spec
        self._submitted_by = submitted_by

    @property
    def records(self) -> list[JobRecord]:
        """The record after each commit."""
        return [record for record, _ in self.commits]

    @property
    def notifications(self) -> list[JobNotification]:
        """What the control plane would have queued, in order."""
        return [note for _, note in self.commits if note is not None]

    @property
    def record(self) -> JobRecord:
        assert self.job is not None
        return self.job

    def apply(self, event: JobEvent, t: float) -> None:
        decision = decide(self.job, event, now=at(t), settings=self.settings)
        if decision.record is not None:
            decision.record.version = (self.job.version if self.job else 0) + 1
            decision.record.updated_at = at(t)
            self.job = decision.record
            note = None
            if decision.notes:
                note = JobNotification(
                    job_id=self.job.job_id,
                    state=self.job.state.value,
                    version=self.job.version,
                    entries=decision.notes,
                )
            self.commits.append((self.job.model_copy(deep=True), note))
        self.launches.extend(e for e in decision.effects if isinstance(e, LaunchInstance))
        if decision.follow_up is not None:
            self.apply(decision.follow_up, t)

    def _agent(self, attempt: int, instance_id: str, body: Any, t: float) -> None:
        self._seq += 1
        self.apply(
            AgentReport(agent(self.record, attempt, instance_id, body, seq=self._seq, sent=t)), t
        )

    # ---- steps ---------------------------------------------------------------------------

    def submit(self, t: float = 0.0) -> Story:
        sub = submission(self.job_id, **self._spec)
        self.apply(Submitted(sub.model_copy(update={"submitted_by": self._submitted_by})), t)
        return self

    def place(self, instance_id: str, t: float, price: float = 0.3) -> Story:
        last = self.launches[-1]
        self.apply(
            CapacityLaunched(last.attempt, last.client_token, instance_id, "sir-1", None, price), t
        )
        self.apply(InstanceUp(instance_id, last.attempt, "fulfillment", "sir-1"), t)
        return self

    def start(self, instance_id: str, attempt: int, t: float, restored: int | None = None) -> Story:
        self._agent(
            attempt, instance_id, AgentStarted(restored_step=restored, restore_seconds=0.4), t
        )
        return self

    def progress(
        self,
        instance_id: str,
        attempt: int,
        step: int,
        t: float,
        total: int | None = None,
        **metrics: float,
    ) -> Story:
        self._agent(
            attempt, instance_id, AgentProgress(step=step, total_steps=total, metrics=metrics), t
        )
        return self

    def checkpoint(
        self, instance_id: str, attempt: int, step: int, t: float, reason: str = "periodic"
    ) -> Story:
        body = AgentCheckpoint(
            step=step,
            manifest_key=f"m{step}",
            size_bytes=1000,
            uploaded_bytes=100,
            upload_seconds=0.2,
            reason=reason,  # type: ignore[arg-type]
        )
        self._agent(attempt, instance_id, body, t)
        return self

    def notice(self, instance_id: str, attempt: int, t: float) -> Story:
        self.apply(InterruptionNotice(instance_id, attempt, "interruption", "terminate"), t)
        return self

    def preempted(self, instance_id: str, attempt: int, step: int, t: float) -> Story:
        body = AgentPreempted(step=step, checkpoint_step=step, notice="spot-interruption")
        self._agent(attempt, instance_id, body, t)
        return self

    def complete(self, instance_id: str, attempt: int, step: int, t: float) -> Story:
        body = AgentCompleted(step=step, outputs_prefix="out/", train_seconds=t)
        self._agent(attempt, instance_id, body, t)
        return self

    def fail(self, instance_id: str, attempt: int, t: float, log_tail: list[str]) -> Story:
        body = AgentFailed(reason="RuntimeError: the loss is NaN", exit_code=1, log_tail=log_tail)
        self._agent(attempt, instance_id, body, t)
        return self

    def cancel(self, t: float, by: str = "ana") -> Story:
        cmd = CancelCommand(job_id=self.job_id, requested_at=at(t), requested_by=by)
        self.apply(CancelRequested(cmd), t)
        return self

    def refuse_all(self, t: float) -> Story:
        """Every pool answers InsufficientInstanceCapacity: the job waits."""
        for _ in range(10):
            if self.record.state is not JobState.REQUESTED:
                break
            last = self.launches[-1]
            self.apply(
                CapacityUnavailable(
                    last.attempt, last.client_token, "InsufficientInstanceCapacity"
                ),
                t,
            )
        return self

    def place_now(self, t: float, reason: str = "tick") -> Story:
        self.apply(PlaceNow(reason), t)
        return self


def every_second(seconds: float) -> ControlSettings:
    """The test settings with progress notes at most every `seconds`."""
    return replace(SETTINGS, progress_note_interval=timedelta(seconds=seconds))


def interrupted_story(job_id: str = "job-1", **spec: Any) -> Story:
    """Queued, placed, trained to 100 of 300, interrupted (checkpoint at 100), resumed, done."""
    s = Story(job_id, settings=every_second(60), **spec).submit(0).place("i-1", 5)
    s.start("i-1", 1, 40)
    for n in range(1, 5):
        s.progress("i-1", 1, 25 * n, 40 + 30 * n, total=300, loss=1.0 / n)
    s.checkpoint("i-1", 1, 100, 165)
    s.notice("i-1", 1, 170)
    s.checkpoint("i-1", 1, 104, 175, reason="notice")
    s.preempted("i-1", 1, 104, 176)
    s.place("i-2", 200, price=0.35).start("i-2", 2, 240, restored=104)
    for n in range(1, 4):
        s.progress("i-2", 2, 104 + 60 * n, 240 + 60 * n, total=300, loss=0.1 / n)
    s.complete("i-2", 2, 300, 500)
    return s
