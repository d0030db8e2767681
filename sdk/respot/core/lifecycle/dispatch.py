"""`decide`: which family's module decides an event, and the return hand-over after any event.

The only module of the lifecycle that imports the family modules.
"""

from __future__ import annotations

from datetime import datetime

from respot.core.deadline import DeadlinePolicy
from respot.core.events import (
    AdmissionRefused,
    Admitted,
    AgentReport,
    CancelRequested,
    CapacityLaunched,
    CapacityUnavailable,
    InstanceDown,
    InstanceUp,
    InterruptionNotice,
    JobEvent,
    LaunchRefused,
    PlaceNow,
    PlatformStop,
    QueueWaitNoted,
    ReconcileTick,
    Submitted,
)
from respot.core.job import JobRecord
from respot.core.lifecycle.draft import Decision, _Draft, _unchanged
from respot.core.lifecycle.instances import _instance_down, _instance_up, _notice
from respot.core.lifecycle.launches import (
    _admission_refused,
    _admitted,
    _launched,
    _place_now,
    _queue_wait,
    _refused,
    _submitted,
    _unavailable,
)
from respot.core.lifecycle.reports import _agent
from respot.core.lifecycle.returns import _hand_over_return
from respot.core.lifecycle.ticks import _cancel, _platform_stop, _tick
from respot.core.placement import ControlSettings, MarketPolicy, policy_for


def decide(
    job: JobRecord | None,
    event: JobEvent,
    *,
    now: datetime,
    settings: ControlSettings,
    market_policy: MarketPolicy | None = None,
) -> Decision:
    """Apply `event` to `job` (None if the job is not recorded yet) at time `now`."""
    policy = market_policy or DeadlinePolicy()
    if isinstance(event, Submitted):
        return _submitted(job, event, now, settings)
    if job is None:
        return _unchanged("ignored: unknown job")
    d = _Draft(job, now, settings)
    decision = _apply(d, event, settings, policy_for(job, policy))
    if decision.record is d.job and _hand_over_return(d):
        decision = Decision(d.job, d.effects, decision.outcome, decision.follow_up, d.notes)
    return decision


def _apply(d: _Draft, event: JobEvent, settings: ControlSettings, policy: MarketPolicy) -> Decision:
    match event:
        case PlaceNow():
            return _place_now(d, event, settings, policy)
        case CapacityLaunched():
            return _launched(d, event)
        case CapacityUnavailable():
            return _unavailable(d, event, settings, policy)
        case LaunchRefused():
            return _refused(d, event, settings)
        case InstanceUp():
            return _instance_up(d, event)
        case InterruptionNotice():
            return _notice(d, event)
        case InstanceDown():
            return _instance_down(d, event)
        case AgentReport():
            return _agent(d, event, settings)
        case CancelRequested():
            return _cancel(d, event)
        case PlatformStop():
            return _platform_stop(d, event)
        case ReconcileTick():
            return _tick(d, event, settings, policy)
        case Admitted():
            return _admitted(d, event)
        case AdmissionRefused():
            return _admission_refused(d, event)
        case QueueWaitNoted():
            return _queue_wait(d, event)
    raise TypeError(f"unknown event {event!r}")
