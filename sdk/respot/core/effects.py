"""Effects: what the control plane must do in the world after a decision is committed.

A decision is first written (compare-and-set), then its effects run. Each effect is safe to
run twice: launches carry an EC2 client token, terminations treat "already gone" as done.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from respot.core.job import Placement


@dataclass(frozen=True)
class LaunchInstance:
    """Ask EC2 for one instance for an attempt."""

    job_id: str
    attempt: int
    placement: Placement
    client_token: str
    await_handoff_from: int | None = None  # the previous attempt still saving its checkpoint
    tags: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TerminateInstances:
    """Terminate these instances; the job no longer needs them."""

    instance_ids: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class ReleaseHandoff:
    """Tell a waiting replacement that attempt `attempt` will write no more checkpoints."""

    job_id: str
    attempt: int


@dataclass(frozen=True)
class StopAttempt:
    """Ask an attempt's agent to checkpoint and stop (a planned move to another market)."""

    job_id: str
    attempt: int
    reason: str
    # A return's stop: the agent may keep training until its spot successor is warm (its
    # successor marker), at most this long, then checkpoints and stops. None: stop at once.
    hold_seconds: float | None = None


@dataclass(frozen=True)
class LookAgainLater:
    """Apply the job's tick again in `delay_seconds` (a paced launch whose reserved token is
    due then: the tick launches it again). Delivered late or never, the minute's tick does
    the same at most a tick later."""

    job_id: str
    attempt: int
    delay_seconds: int
    reason: str


Effect = LaunchInstance | TerminateInstances | ReleaseHandoff | StopAttempt | LookAgainLater
