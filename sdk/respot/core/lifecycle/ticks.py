"""The scheduled look and cancellation: limits, silent instances, relaunches and market moves.

Events: `ReconcileTick` (max_runtime, budget, a launch whose result was lost, silent or
stuck instances, the on-demand attempt a return leaves, the deadline policy's moves, a rule's
stop not carried out in time), `CancelRequested` and `PlatformStop` (`stops`).
"""

from __future__ import annotations

from datetime import datetime

from respot.core.cost import job_cost
from respot.core.effects import ReleaseHandoff, StopAttempt
from respot.core.events import CancelRequested, PlaceNow, PlatformStop, ReconcileTick
from respot.core.job import Attempt, AttemptEnd, Market
from respot.core.lifecycle.attempts import (
    _boot_failure,
    _interrupt,
    _launch_effect,
    _note_never_checkpointed,
)
from respot.core.lifecycle.draft import Decision, _Draft, _finish, _unchanged, at_step
from respot.core.lifecycle.returns import _begin_return, return_hold
from respot.core.lifecycle.stops import STOPPING, admitted_before, begin_stop, stop_overdue
from respot.core.placement import ControlSettings, MarketPolicy, SwitchPolicy
from respot.core.states import JobState, Transition


def _cancel(d: _Draft, event: CancelRequested) -> Decision:
    """A cancel. `checkpoint_first` (`respot notebook stop`, `respot cancel --checkpoint`): a
    job training now takes a platform rule's path (`stops.begin_stop`: its agent checkpoints
    and stops, then the job is CANCELLED with the checkpoint kept, bounded by `stop_overdue`);
    one not training is cancelled at once; a repeat while stopping changes nothing. One that
    comes while a platform rule's stop is under way takes that stop over (the same attempt
    and clock): the job ends CANCELLED, by its owner's word, whatever the rule would have done
    with it (a preemption queues it again). A plain cancel finishes the job at once, also
    one that is stopping (its owner insists)."""
    if d.job.state.is_terminal():
        return _unchanged("ignored: job is over")
    command = event.command
    reason = command.reason
    if command.requested_by:
        # "cancelled by user" (the SDK's default) names the user: not "by user by <arn>".
        reason = f"{reason.removesuffix(' by user')} by {command.requested_by}"
    if command.checkpoint_first and d.job.state is not JobState.HELD:
        cause = _who_cancels(d, command.requested_by)
        stop = d.job.policy.get(STOPPING)
        if stop is None:
            begin_stop(d, reason, cause)
            return d.decision()
        if stop.get("cause") in ("owner", "admin"):
            return _unchanged("ignored: already checkpointing and stopping")
        d.job.policy[STOPPING] = {**stop, "reason": reason, "cause": cause}
        d.note(
            "stopping",
            f"{reason}: the stop under way ({stop.get('cause')}) now ends the job",
            reason=reason,
            cause=cause,
            attempt=stop.get("attempt"),
        )
        return d.decision()
    _finish(d, Transition.CANCEL, AttemptEnd.CANCELLED, reason)
    return d.decision()


def _who_cancels(d: _Draft, requested_by: str | None) -> str:
    """The stop's cause: its owner's (or an unverified test's) cancel, or an admin's."""
    owner = d.job.submission.submitted_by
    if requested_by is None or owner is None or requested_by == owner:
        return "owner"
    return "admin"


def _platform_stop(d: _Draft, event: PlatformStop) -> Decision:
    """A platform rule (a budget paid in full, `hard`) stops the job, keeping its checkpoint."""
    if not begin_stop(d, event.reason, event.cause):
        return _unchanged("ignored: over, held or already stopping")
    return d.decision()


def _tick(
    d: _Draft, event: ReconcileTick, settings: ControlSettings, policy: MarketPolicy
) -> Decision:
    job = d.job
    now = event.at
    spec = job.spec
    if job.state.is_terminal():
        return _unchanged("ignored: job is over")
    if job.state is JobState.HELD:
        return _unchanged("ignored: held in the team's queue")  # respot.control.admission
    if stop_overdue(d, now):
        return d.decision()  # a rule's stop the agent did not carry out in time
    if (
        spec.max_runtime is not None
        and now - (job.admitted_at or job.created_at) + admitted_before(job) > spec.max_runtime
    ):
        _finish(
            d,
            Transition.FAIL,
            AttemptEnd.FAILED,
            f"max_runtime of {spec.max_runtime} exceeded; the newest checkpoint is kept in S3",
        )
        return d.decision()
    if spec.budget_usd is not None:
        spent = job_cost(job, now, settings.on_demand_prices).paid_usd
        if spent >= spec.budget_usd:
            _finish(
                d,
                Transition.FAIL,
                AttemptEnd.FAILED,
                f"budget of ${spec.budget_usd:.2f} spent (${spent:.2f}); the newest checkpoint is "
                "kept in S3: raise budget_usd and run again to continue",
            )
            return d.decision()
    if _watch_return_leaves(d, now, settings):
        # Lost while a return was asked for: the return goes on (its spot attempt restores
        # the newest checkpoint), or, if refused, the job is placed again.
        return d.decision()
    if job.state in (JobState.QUEUED, JobState.INTERRUPTED):
        return Decision(None, [], "follow-up", PlaceNow("scheduled tick"))
    att = job.current
    if att is None:
        return _unchanged("ignored: no attempt")
    if job.state is JobState.REQUESTED and att.instance_id is None:
        if now - att.requested_at >= settings.launch_timeout:
            # The launch's result was never recorded (a crash after the write): ask again with
            # the same client token, which returns the same instance if there is one.
            att.requested_at = now
            d.effects.append(_launch_effect(job, att))
            return d.decision()
        return _unchanged("ignored: launch in flight")
    # Silent instances: a RUNNING agent that stopped reporting, or an instance that never got
    # as far as its agent's first report (stuck pending, broken boot).
    silent_since = _silent_since(att)
    limit = settings.heartbeat_timeout if job.state is JobState.RUNNING else settings.boot_timeout
    watched = (JobState.REQUESTED, JobState.STARTING, JobState.RUNNING)
    if job.state in watched and att.instance_id and now - silent_since >= limit:
        _lose(d, att, "no heartbeat", now)
        if att.never_started and att.notice_at is None:
            silent = int((now - silent_since).total_seconds())
            _boot_failure(d, att, f"no report from {att.instance_id}'s agent for {silent}s")
            return d.decision()
        silent = int((now - silent_since).total_seconds())
        _interrupt(d, att, f"no heartbeat for {silent}s", noticed=False)
        how = f"went silent {at_step(att.last_step)} (no heartbeat for {silent}s)"
        _note_never_checkpointed(d, att, att.instance_id, how)
        return d.decision()
    if (
        spec.deadline is not None
        and job.state is JobState.RUNNING
        and "switching" not in job.policy
        and STOPPING not in job.policy  # a rule's stop: no move, no new instance
        and isinstance(policy, SwitchPolicy)
    ):
        # Across pools, the deadline policy may move a job on on-demand back to spot (a job
        # training on spot is never moved to on-demand: respot.core.deadline says why).
        switch = policy.switch_running(job, now, settings)
        if switch is not None and switch.market is Market.SPOT:
            return _begin_return(d, att, switch, settings)
        if switch is not None and switch.market is not None:
            job.policy.update(
                pool_order=[p.key for p in switch.pools],
                switching=att.number,
                switch_to=switch.market.value,
                market=switch.market.value,
                market_reason=switch.reason,
            )
            d.effects.append(StopAttempt(job.job_id, att.number, switch.reason))
            d.note(
                "fallback",
                f"moving to {switch.market.value} to keep the deadline "
                f"({switch.reason}): {att.instance_id} checkpoints and stops",
                reason=switch.reason,
                attempt=att.number,
            )
            return d.decision()
    return _unchanged("ignored: healthy")


def _watch_return_leaves(d: _Draft, now: datetime, settings: ControlSettings) -> bool:
    """Heartbeats of the on-demand attempt a return leaves, which is not `job.current`.

    Silent for `heartbeat_timeout` (as a RUNNING job's current attempt), or still up
    `heartbeat_timeout` past the hold after it was asked to stop (its agent holds the stop
    until the spot successor is warm, at most `return_hold`, then gives the stop 60 s):
    terminate it so that it bills no longer. True if it was ended now.
    """
    job = d.job
    number = job.policy.get("return_from")
    left = job.attempt(int(number)) if number else None
    if left is None or left is job.current or not left.is_open or not left.instance_id:
        return False
    silent_since = _silent_since(left)
    if now - silent_since >= settings.heartbeat_timeout:
        why = f"no heartbeat for {int((now - silent_since).total_seconds())}s"
    elif (
        left.notice_at is not None
        and now - left.notice_at >= return_hold(settings) + settings.heartbeat_timeout
    ):
        why = f"still up {int((now - left.notice_at).total_seconds())}s after it was asked to stop"
    else:
        return False
    _lose(d, left, why, now)
    d.note(
        "instance-lost",
        f"{left.instance_id}, the on-demand attempt the return to spot leaves, is lost ({why}); "
        "terminated",
        attempt=left.number,
        instance_id=left.instance_id,
    )
    return True


def _silent_since(att: Attempt) -> datetime:
    """Since when nothing has been heard of an attempt's instance (its agent, or its start)."""
    return att.last_heard_at or att.bound_at or att.launched_at or att.requested_at


def _lose(d: _Draft, att: Attempt, why: str, at: datetime) -> None:
    """Terminate a silent (or stuck) attempt's instance: it ends LOST, its hand-off released."""
    d.terminate([att.instance_id or ""], why)
    att.end = AttemptEnd.LOST
    att.ended_at = at
    d.effects.append(ReleaseHandoff(d.job.job_id, att.number))
