"""The decision and the draft it is made on: what every family's rule fills in and returns.

Also what several families decide the same way at the end (`_finish`: a terminal state), the
tags respot puts on what it launches, and the client token of each launch. This module
imports no other module of the lifecycle.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime

from respot.core.effects import Effect, TerminateInstances
from respot.core.events import PlaceNow
from respot.core.job import Attempt, AttemptEnd, JobRecord, TimelineEntry
from respot.core.placement import ControlSettings
from respot.core.states import Transition, next_state

JOB_TAG = "respot:job-id"
ATTEMPT_TAG = "respot:attempt"
HANDOFF_TAG = "respot:await-handoff"
MANAGED_TAG = "respot:managed"
# Who submitted the job: the `UserId` STS answered for the proof (`AROA...:session-name` for a
# role's session, `AIDA...` for an IAM user), which is what IAM's `${aws:userid}` reads. The
# researcher policy lets a researcher open a Session Manager tunnel only to instances whose tag
# equals their own `aws:userid` (infra/constructs/workspaces.py); set by the control plane
# alone (a spec's tags may not use `respot:`), absent when no verified id is known.
OWNER_TAG = "respot:owner"
# Every resource of a satellite stack (infra/satellite.py) carries this tag, its value the
# home stack's name: how the home grants and `respot doctor` tell one deployment's apart.
SATELLITE_TAG = "respot:satellite-of"


@dataclass
class Decision:
    """The outcome of applying one event to one job."""

    record: JobRecord | None  # the record to write; None when nothing changed
    effects: list[Effect] = field(default_factory=list)
    outcome: str = "applied"  # applied | created | duplicate | ignored: <why>
    follow_up: PlaceNow | None = None
    notes: list[TimelineEntry] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        """True when the record must be written."""
        return self.record is not None


def client_token(job_id: str, attempt: int, launch: int) -> str:
    """EC2 idempotency token of one launch: the same launch asked twice yields one instance."""
    h = hashlib.sha256(f"{job_id}/{attempt}/{launch}".encode()).hexdigest()[:32]
    return f"rs-{h}-{attempt}-{launch}"


class _Draft:
    """A mutable copy of a record plus what the decision collects while it is being made."""

    def __init__(self, job: JobRecord, now: datetime, settings: ControlSettings) -> None:
        self.job = job.model_copy(deep=True)
        self.now = now
        self.settings = settings
        self.effects: list[Effect] = []
        self.notes: list[TimelineEntry] = []
        self.follow_up: PlaceNow | None = None

    def go(self, transition: Transition) -> None:
        self.job.state = next_state(self.job.state, transition)

    def note(self, kind: str, text: str, **data: object) -> None:
        entry = TimelineEntry(at=self.now, kind=kind, text=text, data=dict(data))
        self.job.add_timeline(entry)
        self.notes.append(entry)

    def terminate(self, instance_ids: list[str], reason: str) -> None:
        ids = tuple(sorted({i for i in instance_ids if i}))
        if ids:
            self.effects.append(TerminateInstances(ids, reason))

    def decision(self, outcome: str = "applied") -> Decision:
        return Decision(self.job, self.effects, outcome, self.follow_up, self.notes)


def at_step(step: int | None) -> str:
    """'at step 10', or 'before its first reported step': a note never reads 'at step None'."""
    return f"at step {step}" if step is not None else "before its first reported step"


def checkpoint_text(step: int | None) -> str:
    """'a checkpoint at step 10', or 'no checkpoint yet'."""
    return f"a checkpoint at step {step}" if step is not None else "no checkpoint yet"


def _unchanged(outcome: str, effects: list[Effect] | None = None) -> Decision:
    return Decision(None, effects or [], outcome)


def _finish(
    d: _Draft,
    transition: Transition,
    end: AttemptEnd,
    reason: str,
    *,
    by: Attempt | None = None,
    log: list[str] | None = None,
) -> None:
    """Move to a terminal state, end every open attempt and terminate its instance."""
    job = d.job
    d.go(transition)
    job.reason = reason
    job.finished_at = d.now
    job.waiting_since = None
    for a in job.attempts:
        if a.end is None:
            a.end = end if (by is None or a is by) else AttemptEnd.SUPERSEDED
            a.ended_at = d.now
    d.terminate([a.instance_id for a in job.attempts if a.instance_id], reason)
    kind = {
        Transition.COMPLETE: "completed",
        Transition.FAIL: "failed",
        Transition.CANCEL: "cancelled",
    }[transition]
    d.note(kind, reason, reason=reason, log_tail=log or [], step=job.progress.step)
