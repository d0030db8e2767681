"""EC2 instance events: which attempt an instance's start, notice or end is about, and what follows.

Events: `InstanceUp`, `InterruptionNotice` (interruption or rebalance) and `InstanceDown`; a
late event (stamped before its attempt, or a warning the instance outlived) is noted, not
applied. An instance that goes down carries its `StateReason` when the control plane could
read it: one that never reported is classified by it (capacity or quota: placed again, not a
boot failure; KMS: the job fails with AWS's text), and one whose own operating system shut it
down waits for its agent's final report instead of being replaced at once.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from respot.core.deadline import record_availability
from respot.core.effects import ReleaseHandoff
from respot.core.events import InstanceDown, InstanceUp, InterruptionNotice, PlaceNow
from respot.core.failures import (
    MAX_LAUNCH_FAILURES,
    describe_state_reason,
    launch_failures_in_a_row,
    state_reason_kind,
)
from respot.core.job import Attempt, AttemptEnd, JobRecord, Market
from respot.core.lifecycle.attempts import _boot_failure, _interrupt, _note_never_checkpointed
from respot.core.lifecycle.draft import Decision, _Draft, _finish, _unchanged, at_step
from respot.core.states import JobState, Transition, can


def _resolve(job: JobRecord, instance_id: str, attempt: int | None) -> Attempt | None:
    found = job.attempt_of_instance(instance_id)
    if found is None and attempt is not None:
        found = job.attempt(attempt)
    return found


# EventBridge and Lambda clocks agree to well within this; an event stamped earlier than this
# before its attempt was requested cannot be about that attempt's instance.
EVENT_CLOCK_SKEW = timedelta(seconds=60)
# A spot interruption warning comes two minutes before the reclaim; an agent still heard from
# well after that (plus the skew) shows the instance outlived the warning: it is stale.
NOTICE_WINDOW = timedelta(minutes=2)


def _stale(att: Attempt, at: datetime | None, *, notice: bool) -> str | None:
    """Why an EC2 event stamped `at` must not act on `att` (None: it may)."""
    if at is None:
        return None
    if at < att.requested_at - EVENT_CLOCK_SKEW:
        return f"its time {at.isoformat()} is before attempt {att.number} was requested"
    heard = att.last_heard_at
    if notice and heard is not None and heard > at + NOTICE_WINDOW + EVENT_CLOCK_SKEW:
        return (
            f"its time {at.isoformat()} is long before the agent was last heard from "
            f"({heard.isoformat()}): the instance outlived the warning"
        )
    return None


def _record_stale(d: _Draft, att: Attempt, instance_id: str, what: str, why: str) -> Decision:
    """Note a stale event on the job's timeline (once per kind and attempt) and do nothing."""
    key = f"stale-{what}-{att.number}"
    if d.job.policy.get(key):
        return _unchanged("ignored: stale event (already recorded)")
    d.job.policy[key] = d.now.isoformat()
    d.note(
        "stale-event",
        f"ignored a late {what} event for {instance_id}: {why}",
        attempt=att.number,
        instance_id=instance_id,
    )
    return d.decision("recorded: stale event")


def _instance_up(d: _Draft, event: InstanceUp) -> Decision:
    job = d.job
    att = _resolve(job, event.instance_id, event.attempt)
    if att is None:
        return _unchanged("ignored: instance of no attempt")
    if (why := _stale(att, event.at, notice=False)) is not None:
        return _record_stale(d, att, event.instance_id, event.source, why)
    if att.instance_id not in (None, event.instance_id):
        d.terminate([event.instance_id], "a second instance for one attempt")
        return _unchanged("ignored: attempt already has an instance", d.effects)
    if job.state.is_terminal() or att.end is not None:
        d.terminate([event.instance_id], "the job no longer needs it")
        return _unchanged("ignored: attempt is over", d.effects)
    att.instance_id = event.instance_id
    att.spot_request_id = event.spot_request_id or att.spot_request_id
    if att is not job.current or att.bound_at is not None:
        return _unchanged("duplicate") if att.launched_at else d.decision()
    att.bound_at = d.now
    if job.state is JobState.REQUESTED:
        d.go(Transition.BIND)
        job.waiting_since = None
        price = f" at ${att.price_per_hour:.4f}/h" if att.price_per_hour is not None else ""
        d.note(
            "placed",
            f"placed on {att.placement.market.value} {att.placement.instance_type} "
            f"{event.instance_id} in {att.placement.availability_zone}{price}",
            attempt=att.number,
            instance_id=event.instance_id,
            market=att.placement.market.value,
            instance_type=att.placement.instance_type,
            availability_zone=att.placement.availability_zone,
            price_per_hour=att.price_per_hour,
        )
    return d.decision()


def _notice(d: _Draft, event: InterruptionNotice) -> Decision:
    job = d.job
    att = _resolve(job, event.instance_id, event.attempt)
    if att is None or att.instance_id not in (None, event.instance_id):
        return _unchanged("ignored: instance of no attempt")
    if job.state.is_terminal() or att.end is not None:
        return _unchanged("ignored: attempt is over")
    if (why := _stale(att, event.at, notice=event.kind == "interruption")) is not None:
        return _record_stale(d, att, event.instance_id, event.kind, why)
    if event.kind == "rebalance":
        if job.policy.get(f"rebalance-{att.number}"):
            return _unchanged("duplicate")
        job.policy[f"rebalance-{att.number}"] = d.now.isoformat()
        d.note(
            "rebalance",
            f"rebalance recommendation for {event.instance_id}: the agent checkpoints now",
            attempt=att.number,
            instance_id=event.instance_id,
        )
        return d.decision()
    if att.notice_at is not None:
        return _unchanged("duplicate")
    att.instance_id = event.instance_id
    att.notice_sent_at = event.at
    record_availability(job, d.now, d.settings, seen=False)
    _interrupt(d, att, "interruption notice", noticed=True)
    return d.decision()


def _instance_down(d: _Draft, event: InstanceDown) -> Decision:
    job = d.job
    att = _resolve(job, event.instance_id, event.attempt)
    if att is None or att.instance_id not in (None, event.instance_id):
        return _unchanged("ignored: instance of no attempt")
    if att.end is not None:
        return _unchanged("duplicate")
    if (why := _stale(att, event.at, notice=False)) is not None:
        return _record_stale(d, att, event.instance_id, event.state, why)
    att.instance_id = event.instance_id
    live = job.state in (JobState.REQUESTED, JobState.STARTING, JobState.RUNNING)
    kind = state_reason_kind(event.reason)
    said = describe_state_reason(event.reason, event.reason_message)
    if (
        att is job.current
        and live
        and kind == "os-shutdown"
        and att.notice_at is None
        and not att.never_started
    ):
        return _await_final_report(d, att, event, said)
    att.ended_at = d.now
    if job.state.is_terminal():
        att.end = _end_for(job.state)
    elif att.notice_at is not None:
        att.end = AttemptEnd.INTERRUPTED
    else:
        att.end = AttemptEnd.LOST
    d.effects.append(ReleaseHandoff(job.job_id, att.number))
    ec2_says = f"; EC2 says {said}" if said else ""
    if att is job.current and live and att.end is AttemptEnd.LOST and att.never_started:
        if kind in ("capacity", "quota"):
            _launch_failed(d, att, event, said)
        elif kind == "refused":
            p = att.placement
            _finish(
                d,
                Transition.FAIL,
                AttemptEnd.FAILED,
                f"EC2 ended {event.instance_id} ({p.market.value} {p.instance_type} in "
                f"{p.availability_zone}) during its launch: {said}",
            )
        else:
            why = (
                f"{event.instance_id} was {event.state} before its agent reported "
                f"(no boot report{ec2_says})"
            )
            _boot_failure(d, att, why)
    elif att is job.current and live:
        _interrupt(d, att, f"instance {event.state} without notice{ec2_says}", noticed=False)
    else:
        d.note(
            "instance-gone",
            f"{event.instance_id} is {event.state}{ec2_says}",
            attempt=att.number,
            instance_id=event.instance_id,
        )
    if att.end in (AttemptEnd.INTERRUPTED, AttemptEnd.LOST) and not att.never_started:
        # Lost without its agent's report (that one says it itself; a late one is a duplicate)
        how = f"was {event.state} {at_step(att.last_step)} with no report from its agent"
        _note_never_checkpointed(d, att, event.instance_id, how)
    return d.decision()


def _await_final_report(d: _Draft, att: Attempt, event: InstanceDown, said: str) -> Decision:
    """The instance's own operating system shut it down (`Client.InstanceInitiatedShutdown`):
    its agent does that after its final report (completed, failed), which may be handled after
    this event (SQS and EventBridge keep no common order). Nothing is replaced now: the report
    ends the attempt; if none comes, the tick's heartbeat timeout replaces it."""
    key = f"down-{att.number}"
    if d.job.policy.get(key):
        return _unchanged("duplicate: waiting for the agent's final report")
    d.job.policy[key] = f"{event.state} at {d.now.isoformat()}"
    wait = int(d.settings.heartbeat_timeout.total_seconds())
    d.note(
        "instance-down",
        f"{event.instance_id} was shut down from its own operating system ({said}); waiting up "
        f"to {wait}s for its agent's final report before replacing it",
        attempt=att.number,
        instance_id=event.instance_id,
        reason=event.reason,
    )
    return d.decision()


def _launch_failed(d: _Draft, att: Attempt, event: InstanceDown, said: str) -> None:
    """EC2 ended the instance during its launch for capacity or a quota: not a boot failure;
    place the job again, at most `MAX_LAUNCH_FAILURES` times in a row."""
    job = d.job
    p = att.placement
    att.launch_failure = said
    if p.market is Market.SPOT and state_reason_kind(event.reason) == "capacity":
        record_availability(job, d.now, d.settings, seen=False)
    count = launch_failures_in_a_row(job)
    what = f"EC2 ended {event.instance_id} ({p.market.value} {p.instance_type} in "
    what += f"{p.availability_zone}) during its launch: {said}"
    if count >= MAX_LAUNCH_FAILURES:
        _finish(
            d,
            Transition.FAIL,
            AttemptEnd.FAILED,
            f"{count} launches in a row ended by EC2 (at most {MAX_LAUNCH_FAILURES}); the last: "
            f"{what}",
        )
        return
    if not can(job.state, Transition.INTERRUPT):
        return
    d.go(Transition.INTERRUPT)
    job.waiting_since = d.now
    d.note(
        "capacity",
        f"{what}; placing the job again ({count} of {MAX_LAUNCH_FAILURES} in a row before it "
        "fails; not a boot failure)",
        attempt=att.number,
        instance_id=event.instance_id,
        error=event.reason,
    )
    d.follow_up = PlaceNow(f"EC2 ended the launch ({event.reason})")


def _end_for(state: JobState) -> AttemptEnd:
    return {
        JobState.COMPLETED: AttemptEnd.SUPERSEDED,
        JobState.FAILED: AttemptEnd.FAILED,
        JobState.CANCELLED: AttemptEnd.CANCELLED,
    }.get(state, AttemptEnd.SUPERSEDED)
