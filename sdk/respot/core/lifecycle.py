"""The pure heart of the control plane: given a job record and an event, decide what changes.

`decide(job, event, ...)` returns a `Decision`: the new record to write (compare-and-set on
its version), the effects to run once the write has succeeded, and an optional follow-up
event to apply right after (so that every committed state, INTERRUPTED included, is one a
reader can see). It never talks to AWS, never sleeps and never reads the clock itself.

Every event may be a duplicate or arrive out of order; the rules below make those harmless:
- an instance event is matched to its attempt by instance id, else by the attempt number
  its tags carry; events of other attempts only touch that attempt;
- a second instance for one attempt, or an instance of a finished job, is terminated;
- a capacity result whose client token is not the current attempt's is stale and ignored;
- progress only moves forward (the highest step wins).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from respot.core.cost import job_cost
from respot.core.deadline import DeadlinePolicy, record_availability
from respot.core.effects import (
    Effect,
    LaunchInstance,
    ReleaseHandoff,
    StopAttempt,
    TerminateInstances,
)
from respot.core.events import (
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
    ReconcileTick,
    Submitted,
)
from respot.core.failures import boot_failures_in_a_row
from respot.core.job import (
    Attempt,
    AttemptEnd,
    CheckpointInfo,
    JobRecord,
    Market,
    Placement,
    TimelineEntry,
)
from respot.core.placement import (
    ControlSettings,
    MarketChoice,
    MarketPolicy,
    SwitchPolicy,
    candidates,
    disallowed_instance_types,
)
from respot.core.quotas import QuotaReading, quota_for
from respot.core.states import JobState, Transition, can, next_state
from respot.core.transfer import note_restore, region_of_attempt
from respot.policy.live_view import backoff_cap_ticks, return_backoff_ticks
from respot.wire.gpu import mean_utilization
from respot.wire.messages import (
    AgentBootFailed,
    AgentCheckpoint,
    AgentCompleted,
    AgentFailed,
    AgentPreempted,
    AgentProgress,
    AgentStarted,
    redacted,
    submission_digest,
)

JOB_TAG = "respot:job-id"
ATTEMPT_TAG = "respot:attempt"
HANDOFF_TAG = "respot:await-handoff"
MANAGED_TAG = "respot:managed"
# Every resource of a satellite stack (infra/satellite.py) carries this tag, its value the
# home stack's name: how the home grants and `respot doctor` tell one deployment's apart.
SATELLITE_TAG = "respot:satellite-of"
# Periodic checkpoint lines kept on the job record (the notifier still gets every one). The
# whole record is written on every heartbeat and DynamoDB bills each started KB: a timeline
# growing by a line per checkpoint made a day-old job's heartbeats 4-5x dearer (bench.cost).
CHECKPOINT_NOTES_KEPT = 3
PROGRESS_HISTORY_FRACTION = 0.02  # a "progress" timeline entry per 2% of the total steps
PROGRESS_HISTORY_SECONDS = 600.0  # or per ten minutes when the session sets no total
PROGRESS_HISTORY_METRICS = 8


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


def _unchanged(outcome: str, effects: list[Effect] | None = None) -> Decision:
    return Decision(None, effects or [], outcome)


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
    decision = _apply(d, event, settings, policy)
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
        case ReconcileTick():
            return _tick(d, event, settings, policy)
    raise TypeError(f"unknown event {event!r}")


# ---- submission and placement ----------------------------------------------------------------


def _submitted(
    job: JobRecord | None, event: Submitted, now: datetime, settings: ControlSettings
) -> Decision:
    if job is not None:
        return _unchanged("duplicate")
    sub = event.submission
    record = JobRecord(
        job_id=sub.job_id,
        state=JobState.QUEUED,
        created_at=now,
        updated_at=now,
        submission=redacted(sub),
        submission_digest=submission_digest(sub),
        waiting_since=now,
    )
    d = _Draft(record, now, settings)
    spec = sub.spec
    d.note(
        "queued",
        f"queued {spec.name} ({spec.entry_point or spec.image})",
        deadline=spec.deadline.isoformat() if spec.deadline else None,
        owner=sub.submitted_by,
    )
    problem = disallowed_instance_types(spec.instance_types, settings.allowed_instance_types)
    problems = [*event.refused, *([problem] if problem is not None else [])]
    if problems:
        # Refused before anything is spent (IAM would refuse the launch, or the instance
        # could not read what the spec names): FAILED with each field and its fix.
        _finish(d, Transition.FAIL, AttemptEnd.FAILED, "; ".join(problems))
        return d.decision("created")
    d.follow_up = PlaceNow("submitted")
    return d.decision("created")


def _handoff_from(job: JobRecord) -> int | None:
    """The newest earlier attempt whose instance is still up and hands over to the next: after
    a notice (still saving), or the on-demand attempt a return to spot leaves (it trains on
    until the spot instance has launched, then saves: `_hand_over_return`)."""
    leaving = job.policy.get("return_from")
    for a in reversed(job.attempts):
        if a.is_open and a.instance_id and (a.notice_at is not None or a.number == leaving):
            return a.number
    return None


def _request(d: _Draft, settings: ControlSettings, policy: MarketPolicy, reason: str) -> None:
    """From QUEUED or INTERRUPTED: request capacity for a new attempt, wait, or fail."""
    job = d.job
    switch_to = job.policy.pop("switch_to", None)
    job.policy.pop("switching", None)
    job.policy.pop("returning", None)  # records of the stop-first return (before warmret)
    job.policy.pop("return_attempt", None)  # a request of its own ends the last return's
    if switch_to is not None:
        market = Market(switch_to)
        ranked = tuple(_in_order(job, candidates(job, market, settings)))
        choice = MarketChoice(market, job.policy.get("market_reason", "switch"), pools=ranked)
    else:
        choice = policy.choose(job, d.now, settings)
    if choice.fail:
        _finish(d, Transition.FAIL, AttemptEnd.FAILED, choice.reason)
        return
    if choice.market is None:
        if job.state is JobState.INTERRUPTED:
            d.go(Transition.WAIT)
        job.waiting_since = job.waiting_since or d.now
        d.note("waiting", f"waiting for capacity: {choice.reason}")
        return
    pools = list(choice.pools) or candidates(job, choice.market, settings)
    job.policy["pool_order"] = [p.key for p in pools]
    if not pools:
        _finish(
            d,
            Transition.FAIL,
            AttemptEnd.FAILED,
            "no subnet or instance type is configured for this deployment",
        )
        return
    previous_market = job.policy.get("market")
    if choice.market is Market.ON_DEMAND and previous_market != Market.ON_DEMAND.value:
        d.note("fallback", f"falling back to on-demand: {choice.reason}", reason=choice.reason)
        job.policy["market_reason"] = choice.reason
    job.policy["market"] = choice.market.value
    job.waiting_since = job.waiting_since or d.now
    _new_attempt(d, pools[0], Transition.REQUEST, reason)


def _new_attempt(d: _Draft, placement: Placement, transition: Transition, reason: str) -> Attempt:
    """Open the next attempt in `placement`, move the job by `transition` and launch it."""
    job = d.job
    number = len(job.attempts) + 1
    launches = int(job.policy.get("launches", 0)) + 1
    job.policy["launches"] = launches
    attempt = Attempt(
        number=number,
        placement=placement,
        client_token=client_token(job.job_id, number, launches),
        requested_at=d.now,
    )
    job.attempts.append(attempt)
    d.go(transition)
    d.effects.append(_launch_effect(job, attempt))
    d.note(
        "requested",
        f"requested {attempt.placement.market.value} {attempt.placement.instance_type} "
        f"in {attempt.placement.availability_zone} (attempt {number}; {reason})",
        attempt=number,
        market=attempt.placement.market.value,
        instance_type=attempt.placement.instance_type,
        availability_zone=attempt.placement.availability_zone,
    )
    return attempt


def _in_order(job: JobRecord, pools: list[Placement]) -> list[Placement]:
    """The pools the policy ranked for this request, in its order (all if it ranked none)."""
    by_key = {p.key: p for p in pools}
    ranked = [by_key[k] for k in job.policy.get("pool_order", []) if k in by_key]
    return ranked or pools


def _launch_effect(job: JobRecord, attempt: Attempt) -> LaunchInstance:
    handoff = _handoff_from(job)
    if handoff == attempt.number:
        handoff = None
    return LaunchInstance(
        job_id=job.job_id,
        attempt=attempt.number,
        placement=attempt.placement,
        client_token=attempt.client_token,
        await_handoff_from=handoff,
        tags=dict(job.spec.tags),
    )


def _place_now(
    d: _Draft, event: PlaceNow, settings: ControlSettings, policy: MarketPolicy
) -> Decision:
    if d.job.state not in (JobState.QUEUED, JobState.INTERRUPTED):
        return _unchanged(f"ignored: {d.job.state.value} needs no placement")
    _request(d, settings, policy, event.reason)
    if not d.effects and not d.notes:
        return _unchanged("ignored: nothing to place")
    if d.job.state is JobState.QUEUED and not d.effects and _only_waiting_repeat(d):
        return _unchanged("ignored: still waiting")
    return d.decision()


def _only_waiting_repeat(d: _Draft) -> bool:
    """True if the only news is another 'waiting' note identical to the previous one."""
    if len(d.notes) != 1 or d.notes[0].kind != "waiting":
        return False
    earlier = [e for e in d.job.timeline[:-1] if e.kind == "waiting"]
    return bool(earlier) and earlier[-1].text == d.notes[0].text


def _launched(d: _Draft, event: CapacityLaunched) -> Decision:
    job = d.job
    att = job.attempt(event.attempt)
    if att is None or att.client_token != event.client_token:
        # A launch nobody records any more: its instance must not live on.
        d.terminate([event.instance_id], "launched for a superseded request")
        return _unchanged("ignored: stale launch", d.effects)
    if att.instance_id == event.instance_id and att.launched_at is not None:
        return _unchanged("duplicate")
    if att.instance_id not in (None, event.instance_id):
        d.terminate([event.instance_id], "a second instance for one attempt")
        return _unchanged("ignored: attempt already has an instance", d.effects)
    att.instance_id = event.instance_id
    att.spot_request_id = event.spot_request_id or att.spot_request_id
    att.price_per_hour = event.price_per_hour
    att.launched_at = d.now
    if att.placement.market is Market.SPOT:
        record_availability(job, d.now, d.settings, seen=True)
        if job.policy.get("return_attempt") == att.number:
            job.policy.pop("return_attempt")  # the return found spot
    if job.state.is_terminal() or att.end is not None:
        att.end = att.end or AttemptEnd.SUPERSEDED
        att.ended_at = att.ended_at or d.now
        d.terminate([event.instance_id], f"job is {job.state.value.lower()}")
    return d.decision()


def _unavailable(
    d: _Draft, event: CapacityUnavailable, settings: ControlSettings, policy: MarketPolicy
) -> Decision:
    job = d.job
    att = job.current
    if (
        att is None
        or att.number != event.attempt
        or att.client_token != event.client_token
        or att.instance_id is not None
        or job.state is not JobState.REQUESTED
    ):
        return _unchanged("ignored: stale capacity error")
    att.tried.append(f"{att.placement.key}: {event.error_code}")
    pools = _in_order(job, candidates(job, att.placement.market, settings))
    if event.quota is not None:
        _quota_refusal(d, att.placement.instance_type, event.quota)
    blocked = set(job.policy.get("quota_blocked", []))
    tried = {t.split(": ", 1)[0] for t in att.tried}
    remaining = [
        p
        for p in pools
        if p.key not in tried and _quota_class(p.instance_type, p.market) not in blocked
    ]
    if remaining:
        launches = int(job.policy.get("launches", 0)) + 1
        job.policy["launches"] = launches
        att.placement = remaining[0]
        att.client_token = client_token(job.job_id, att.number, launches)
        att.requested_at = d.now
        d.go(Transition.RETRY)
        d.effects.append(_launch_effect(job, att))
        d.note(
            "capacity",
            f"{event.error_code} for {att.tried[-1].split(': ')[0]}; trying "
            f"{att.placement.instance_type} in {att.placement.availability_zone}",
            error=event.error_code,
        )
        return d.decision()
    # Every pool of this market refused: give the attempt back and wait for the next tick.
    if att.placement.market is Market.SPOT:
        record_availability(job, d.now, settings, seen=False)
    if job.policy.get("return_attempt") == att.number:
        job.policy["last_capacity_errors"] = att.tried[-10:]
        return _refused_return(d, att, settings, f"no spot in any of {len(pools)} pools")
    if all(_quota_class(p.instance_type, p.market) in blocked for p in pools):
        return _quota_exhausted(d, att, job.policy.get("quota_reason", event.message))
    job.policy["last_capacity_errors"] = att.tried[-10:]
    job.policy["capacity_misses"] = int(job.policy.get("capacity_misses", 0)) + 1
    job.attempts.pop()
    d.go(Transition.WAIT)
    job.waiting_since = job.waiting_since or d.now
    d.note(
        "waiting",
        f"no {att.placement.market.value} capacity in any of {len(pools)} pools "
        f"({event.error_code}); trying again at the next tick",
        errors=att.tried[-10:],
    )
    # The wait may already be over (e.g. max_spot_wait spent): place again at once if so.
    choice = policy.choose(job, d.now, settings)
    if (choice.market is not None and choice.market is not att.placement.market) or choice.fail:
        d.follow_up = PlaceNow(choice.reason)
    return d.decision()


def _refused_return(d: _Draft, att: Attempt, settings: ControlSettings, why: str) -> Decision:
    """A return to spot that every pool refused: drop its attempt and back off before the next.

    The on-demand attempt it would have left was never stopped (`_begin_return`), so the job
    is RUNNING on it again and the refusal cost nothing but API calls; those are bounded:
    the next return waits 1, 2, 4, ... policy ticks, at most two changeovers
    (`return_backoff_ticks`), so a job asks the pools at most about once per two changeovers
    while it trains on on-demand (and moves back to spot at most `MAX_SPOT_RETURNS` times).
    If the on-demand instance went away meanwhile (lost, silent),
    the job waits and is placed again as after any loss.
    """
    job = d.job
    job.policy.pop("return_attempt", None)
    left = job.attempt(int(job.policy.pop("return_from", 0) or 0))
    refused = int(job.policy.get("refused_returns", 0)) + 1
    job.policy["refused_returns"] = refused
    tick = settings.policy_tick.total_seconds()
    cap = backoff_cap_ticks(settings.changeover_estimate.total_seconds(), tick)
    after = d.now + settings.policy_tick * return_backoff_ticks(refused, cap)
    job.policy["next_return_at"] = after.isoformat()
    job.attempts.pop()
    began = _fold_return_notes(job)
    why = f"{began}; {why}" if began else why
    backoff = f"no other return before {after:%H:%M:%S} UTC"
    if left is not None and left.is_open and left.instance_id and left.notice_at is None:
        d.go(Transition.RETURN_REFUSED)
        d.note(
            "return-refused",
            f"the return to spot found none ({why}; {refused} refused so far): "
            f"{left.instance_id} trained on on-demand, nothing was stopped; {backoff}",
            refused_returns=refused,
            next_return_at=after.isoformat(),
            attempt=left.number,
            errors=att.tried[-10:],
        )
        return d.decision()
    d.go(Transition.WAIT)
    job.waiting_since = d.now
    gone = left.instance_id if left is not None else "the on-demand instance"
    d.note(
        "return-refused",
        f"the return to spot found none ({why}; {refused} refused so far) and {gone} is "
        f"gone: placing the job again; {backoff}",
        refused_returns=refused,
        next_return_at=after.isoformat(),
        errors=att.tried[-10:],
    )
    d.follow_up = PlaceNow("the return found no spot and the on-demand instance is gone")
    return d.decision()


_RETURN_DETAIL = frozenset({"spot-return", "requested", "capacity"})


def _fold_return_notes(job: JobRecord) -> str | None:
    """Fold a refused return's own notes into the one `return-refused` note that follows.

    A job on on-demand in a long outage asks the pools every few minutes; its start, its
    request and each pool's refusal as lines of their own would be most of the timeline
    (and push out what matters past `TIMELINE_LIMIT`). What happened meanwhile (checkpoints,
    progress, a lost instance) stays. Returns the reason the return began with, if found.
    """
    starts = [i for i, e in enumerate(job.timeline) if e.kind == "spot-return"]
    if not starts:
        return None
    start = starts[-1]
    reason = job.timeline[start].data.get("reason")
    job.timeline[start:] = [e for e in job.timeline[start:] if e.kind not in _RETURN_DETAIL]
    return f"asked because {reason}" if reason else None


def _begin_return(
    d: _Draft, att: Attempt, switch: MarketChoice, settings: ControlSettings
) -> Decision:
    """On-demand -> spot, spot first: ask for spot while the on-demand attempt trains on.

    The on-demand attempt stays open and RUNNING's instance; the job is REQUESTED on a new
    spot attempt in the policy's ranked pools, whose launch awaits the on-demand attempt's
    hand-off (`_handoff_from`). Spot launched: `_hand_over_return` stops the on-demand
    attempt. Every pool refused: `_refused_return` drops the new attempt, nothing stopped.
    """
    job = d.job
    returns = int(job.policy.get("spot_returns", 0)) + 1
    pools = list(switch.pools) or candidates(job, Market.SPOT, settings)
    job.policy.update(
        spot_returns=returns,
        pool_order=[p.key for p in pools],
        return_from=att.number,
        market_reason=switch.reason,
    )
    d.note(
        "spot-return",
        f"moving to spot ({switch.reason}): asking for spot while {att.instance_id} trains "
        "on; it stops only once a spot instance has launched",
        reason=switch.reason,
        attempt=att.number,
    )
    new = _new_attempt(d, pools[0], Transition.RETURN, f"return {returns} to spot")
    job.policy["return_attempt"] = new.number
    return d.decision()


def return_hold(settings: ControlSettings) -> timedelta:
    """How long a return's on-demand agent may hold its stop for the spot successor's warm-up.

    The successor has boot_timeout to report before it is judged lost, so waiting longer for
    its warm-up is pointless; the agent then checkpoints and stops anyway.
    """
    return settings.boot_timeout


def _hand_over_return(d: _Draft) -> bool:
    """The return's spot instance exists: now stop the on-demand attempt it leaves.

    Whichever event first shows the spot attempt's instance (the launch result, EC2's
    running event or its agent's first report: any may come first, and each may repeat)
    asks the on-demand agent to checkpoint and stop, once (`notice_at` records the stop
    request: from then on the attempt is a notice's hand-off, and its final checkpoint is
    what the spot successor restores after `await-handoff`). The stop is held: the agent
    trains on until the spot successor is warm, at most `return_hold(settings)` (the spot
    instance's boot_timeout), as a spot notice is held. True if it did so now.
    """
    job = d.job
    number = job.policy.get("return_from")
    left = job.attempt(int(number)) if number else None
    new = job.current
    if left is None or new is None or new.number <= left.number or job.state.is_terminal():
        return False
    if not left.is_open or left.notice_at is not None or new.instance_id is None:
        return False
    left.notice_at = d.now
    job.policy["market"] = Market.SPOT.value
    reason = f"spot {new.instance_id} launched for the return (attempt {new.number})"
    # Held only within one region: the successor's warm marker stays in its own region's
    # bucket, so an on-demand agent in another would hold to the limit while its successor,
    # ready, waits only RESPOT_HANDOFF_WAIT_SECONDS for the hand-off and then trains too.
    same_region = region_of_attempt(left) == region_of_attempt(new)
    hold = return_hold(d.settings).total_seconds() if same_region else None
    d.effects.append(StopAttempt(job.job_id, left.number, reason, hold_seconds=hold))
    d.note(
        "returned",
        f"back to spot: {new.instance_id} launched in "
        f"{new.placement.instance_type} {new.placement.availability_zone}; "
        f"{left.instance_id} checkpoints and stops, {new.instance_id} restores that checkpoint",
        reason=job.policy.get("market_reason"),
        attempt=new.number,
        from_attempt=left.number,
        instance_id=new.instance_id,
    )
    return True


def _quota_class(instance_type: str, market: Market) -> str | None:
    quota = quota_for(instance_type, market)
    return f"{market.value}/{quota.quota_class}" if quota else None


def _quota_refusal(d: _Draft, instance_type: str, reading: QuotaReading) -> None:
    """Name the quota, its value and the fix; a quota too small for one instance blocks its class.

    A blocking quota is not retried in other pools of the same class (they share it), and
    waiting cannot raise it: when every pool is blocked, `_quota_exhausted` decides.
    """
    job = d.job
    text = reading.describe()
    key = _quota_class(instance_type, reading.quota.market)
    if reading.blocks_one_instance and key is not None:
        blocked = list(job.policy.get("quota_blocked", []))
        if key not in blocked:
            blocked.append(key)
        job.policy["quota_blocked"] = blocked
        job.policy["quota_reason"] = text
    if not any(e.kind == "quota" and e.text == text for e in job.timeline):
        d.note(
            "quota",
            text,
            quota_code=reading.quota.code,
            quota_name=reading.quota.name,
            quota_value=reading.value,
            command=reading.increase_command(),
        )


def _quota_exhausted(d: _Draft, att: Attempt, reason: str) -> Decision:
    """No pool of this market fits its quota: the fallback market, or fail (as a long spot wait)."""
    job = d.job
    job.attempts.pop()
    if att.placement.market is Market.SPOT and job.spec.on_demand_fallback:
        d.go(Transition.WAIT)
        job.policy["switch_to"] = Market.ON_DEMAND.value
        job.policy["market_reason"] = f"spot quota: {reason}"
        d.follow_up = PlaceNow("spot quota too small")
        return d.decision()
    fallback = " and on_demand_fallback is off" if att.placement.market is Market.SPOT else ""
    _finish(
        d,
        Transition.FAIL,
        AttemptEnd.FAILED,
        f"no {att.placement.market.value} instance fits the account's quota{fallback}: {reason}",
    )
    return d.decision()


def _refused(d: _Draft, event: LaunchRefused, settings: ControlSettings) -> Decision:
    """EC2 refused the launch for good (not capacity, not quota): fail with AWS's words.

    Not a return's spot launch: the on-demand attempt trains on, and the refusal is noted."""
    job = d.job
    att = job.current
    if (
        att is None
        or att.number != event.attempt
        or att.client_token != event.client_token
        or att.instance_id is not None
        or job.state is not JobState.REQUESTED
    ):
        return _unchanged("ignored: stale launch error")
    p = att.placement
    if job.policy.get("return_attempt") == att.number:
        att.tried.append(f"{p.key}: {event.error_code}")
        why = f"EC2 refused {p.market.value} {p.instance_type} in {p.availability_zone}: "
        return _refused_return(d, att, settings, f"{why}{event.error_code}: {event.message}")
    _finish(
        d,
        Transition.FAIL,
        AttemptEnd.FAILED,
        f"EC2 refused to launch {p.market.value} {p.instance_type} in {p.availability_zone}: "
        f"{event.error_code}: {event.message}".strip(),
    )
    return d.decision()


# ---- instance events -------------------------------------------------------------------------


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


def _interrupt(d: _Draft, att: Attempt, why: str, *, noticed: bool) -> None:
    """The attempt's instance is going (noticed) or gone: mark it and ask for a replacement."""
    job = d.job
    if noticed:
        att.notice_at = d.now
    if att is not job.current or not can(job.state, Transition.INTERRUPT):
        return
    if not noticed and att.instance_id is None and job.state is JobState.REQUESTED:
        return
    planned = job.policy.get("switching") == att.number
    if not planned:
        job.interruptions += 1
    d.go(Transition.INTERRUPT)
    job.waiting_since = d.now
    checkpoint_step = job.checkpoint.step if job.checkpoint else None
    # Heartbeats lag: the step reached is at least the newest checkpoint's.
    step = max(job.progress.step or 0, checkpoint_step or 0) if job.progress.step else None
    if planned:
        d.note(
            "switched",
            f"{att.instance_id} stopped at step {step} for the switch to "
            f"{job.policy.get('switch_to')}",
            attempt=att.number,
            instance_id=att.instance_id,
            step=step,
            checkpoint_step=checkpoint_step,
        )
        d.follow_up = PlaceNow("switching market")
        return
    d.note(
        "interrupted",
        f"{why} for {att.instance_id} at step {step}; newest checkpoint step {checkpoint_step}",
        attempt=att.number,
        instance_id=att.instance_id,
        step=step,
        checkpoint_step=checkpoint_step,
        noticed=noticed,
        interruptions=job.interruptions,
    )
    d.follow_up = PlaceNow(f"replacing {why}")


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
    att.ended_at = d.now
    if job.state.is_terminal():
        att.end = _end_for(job.state)
    elif att.notice_at is not None:
        att.end = AttemptEnd.INTERRUPTED
    else:
        att.end = AttemptEnd.LOST
    d.effects.append(ReleaseHandoff(job.job_id, att.number))
    live = job.state in (JobState.REQUESTED, JobState.STARTING, JobState.RUNNING)
    if att is job.current and live and att.end is AttemptEnd.LOST and att.never_started:
        why = f"{event.instance_id} was {event.state} before its agent reported (no boot report)"
        _boot_failure(d, att, why)
    elif att is job.current and live:
        _interrupt(d, att, f"instance {event.state} without notice", noticed=False)
    else:
        d.note(
            "instance-gone",
            f"{event.instance_id} is {event.state}",
            attempt=att.number,
            instance_id=event.instance_id,
        )
    return d.decision()


def _started_note(
    d: _Draft, att: Attempt, instance_id: str, body: AgentStarted, *, late: bool
) -> None:
    previous = d.job.attempt(att.number - 1)
    started = att.started_at or d.now
    paused_at = _paused_at(previous, started) if previous else None
    downtime = max((started - paused_at).total_seconds(), 0.0) if paused_at else None
    if body.restored_step is not None:
        text = f"resumed from step {body.restored_step} on {instance_id}"
    else:
        text = f"started on {instance_id} (no checkpoint yet)"
    if downtime is not None:
        text += f"; {downtime:.1f}s since the previous attempt stopped training"
    if body.warm_failure:
        text += f"; warm-up failed ({body.warm_failure}), started cold"
    elif body.warm:
        text += "; warm start"
    if late:
        text += " (reported after the job ended)"
    d.note(
        "resumed" if body.restored_step is not None else "started",
        text,
        attempt=att.number,
        instance_id=instance_id,
        restored_step=body.restored_step,
        restore_seconds=body.restore_seconds,
        downtime_seconds=downtime,
        warm=body.warm,
    )


def _paused_at(previous: Attempt, started: datetime) -> datetime | None:
    """When training paused for a changeover (its downtime counts from here to `started`):
    the later of the previous attempt's notice (or its end, without one) and the last time it
    was seen training (its session's last report(), its newest heartbeat with a step), no
    later than `started`. One definition for both moves: a spot notice's clock starts at the
    notice unless the old instance trained on through it (the warm start's hold), and a
    return's (`_hand_over_return`: `notice_at` is the stop request, held while spot boots)
    at the on-demand attempt's last step, not at the request (docs/lifecycle.md, "Downtime").
    """
    gone_at = previous.notice_at or previous.ended_at
    seen = [t for t in (previous.last_step_at, previous.last_progress_at) if t and t <= started]
    return max([gone_at, *seen]) if gone_at else None


def _end_for(state: JobState) -> AttemptEnd:
    return {
        JobState.COMPLETED: AttemptEnd.SUPERSEDED,
        JobState.FAILED: AttemptEnd.FAILED,
        JobState.CANCELLED: AttemptEnd.CANCELLED,
    }.get(state, AttemptEnd.SUPERSEDED)


# ---- agent reports ---------------------------------------------------------------------------


def _agent(d: _Draft, event: AgentReport, settings: ControlSettings) -> Decision:
    job = d.job
    msg = event.message
    att = job.attempt(msg.attempt)
    if att is None or att.instance_id not in (None, msg.instance_id):
        return _unchanged("ignored: message from no attempt of this job")
    body = msg.body
    if job.state.is_terminal():
        if (
            isinstance(body, AgentCompleted | AgentFailed | AgentPreempted | AgentBootFailed)
            or att.end is None
        ):
            d.terminate([msg.instance_id], f"job is {job.state.value.lower()}")
        if isinstance(body, AgentStarted) and att.started_at is None:
            # Delivered after the job ended (SQS does not keep order, and a failed delivery
            # comes back later): what the attempt restored is still part of its history.
            att.instance_id = msg.instance_id
            att.started_at = msg.sent_at
            att.restored_step = body.restored_step
            att.restore_seconds = body.restore_seconds
            _started_note(d, att, msg.instance_id, body, late=True)
            return d.decision()
        return _unchanged("ignored: job is over", d.effects)
    if isinstance(body, AgentBootFailed):
        return _boot_failed(d, att, msg.instance_id, body)
    att.instance_id = msg.instance_id
    heard_before, state_before, timeline_before = att.last_heard_at, job.state, len(job.timeline)
    job.last_heartbeat_at = max(job.last_heartbeat_at or msg.sent_at, msg.sent_at)
    att.last_heard_at = max(att.last_heard_at or msg.sent_at, msg.sent_at)
    current = att is job.current

    match body:
        case AgentStarted():
            if att.started_at is not None:
                return _unchanged("duplicate")
            att.started_at = d.now
            att.restored_step = body.restored_step
            att.restore_seconds = body.restore_seconds
            note_restore(job, att)
            if current and job.state in (JobState.REQUESTED, JobState.STARTING):
                att.bound_at = att.bound_at or d.now
                job.waiting_since = None
                d.go(Transition.START)
            _started_note(d, att, msg.instance_id, body, late=False)
        case AgentProgress():
            first_step = att.first_step_at is None and body.first_step_at is not None
            if first_step:
                att.first_step_at = body.first_step_at
            if body.gpus is not None and current:
                job.progress.gpus = list(body.gpus)
            if body.step is not None:
                att.last_step = max(att.last_step or 0, body.step)
                att.last_progress_at = max(att.last_progress_at or msg.sent_at, msg.sent_at)
                if job.progress.step is None or body.step >= job.progress.step:
                    job.progress.step = body.step
                    job.progress.total_steps = body.total_steps or job.progress.total_steps
                    job.progress.metrics = dict(body.metrics)
                    job.progress.at = msg.sent_at
                    _progress_history(d, att.number, d.now)
            if current and job.state in (JobState.REQUESTED, JobState.STARTING):
                att.bound_at = att.bound_at or d.now
                d.go(Transition.START)
            if current and job.state is JobState.RUNNING and body.step is not None:
                _progress_note(d, att, settings)
            material = (
                job.state is not state_before
                or d.notes
                or len(job.timeline) != timeline_before
                or first_step
            )
            if (
                not material
                and heard_before is not None
                and msg.sent_at - heard_before < settings.heartbeat_write_interval
            ):
                # A heartbeat that changes nothing anyone acts on is not worth rewriting the
                # record for: one write per interval keeps liveness (and the step shown) fresh.
                return _unchanged("coalesced: heartbeat")
        case AgentCheckpoint():
            att.checkpoint_step = max(att.checkpoint_step or 0, body.step)
            first_notice = body.reason == "notice" and att.notice_checkpoint_at is None
            if first_notice:
                att.notice_checkpoint_at = msg.sent_at
            if job.checkpoint is None or body.step >= job.checkpoint.step:
                if job.checkpoint and job.checkpoint.manifest_key == body.manifest_key:
                    return d.decision() if first_notice else _unchanged("duplicate")
                job.checkpoint = CheckpointInfo(
                    step=body.step,
                    manifest_key=body.manifest_key,
                    attempt=att.number,
                    at=d.now,
                    size_bytes=body.size_bytes,
                )
                if body.reason == "periodic":
                    _drop_old_checkpoint_notes(job)
                d.note(
                    "checkpoint",
                    f"checkpoint at step {body.step} complete in S3 "
                    f"({body.uploaded_bytes:,} of {body.size_bytes:,} bytes sent, "
                    f"{body.upload_seconds:.2f}s, {body.reason})",
                    attempt=att.number,
                    step=body.step,
                    reason=body.reason,
                    upload_seconds=body.upload_seconds,
                    uploaded_bytes=body.uploaded_bytes,
                    size_bytes=body.size_bytes,
                )
            elif not first_notice:
                return _unchanged("ignored: older checkpoint")
        case AgentPreempted():
            if att.end is not None:
                # The instance-gone event came first: still keep where and when training
                # stopped. The agent trains on through its notice (the warm-start hold), so
                # its stop report can be ahead of the last heartbeat recorded.
                later = body.step is not None and (att.last_step or 0) < body.step
                late_at = att.last_step_at is None and body.last_step_at is not None
                newer_ckpt = (body.checkpoint_step or 0) > (att.checkpoint_step or 0)
                if not (later or late_at or newer_ckpt):
                    return _unchanged("duplicate")
                if later:
                    att.last_step = body.step
                    att.last_step_at = body.last_step_at or att.last_step_at
                else:
                    att.last_step_at = att.last_step_at or body.last_step_at
                att.checkpoint_step = max(att.checkpoint_step or 0, body.checkpoint_step or 0)
                return d.decision()
            if body.step is not None:  # none: stopped before training began
                att.last_step = max(att.last_step or 0, body.step)
            att.last_step_at = body.last_step_at
            att.checkpoint_step = max(att.checkpoint_step or 0, body.checkpoint_step or 0)
            lost = (att.last_step or 0) - (body.checkpoint_step or 0)
            lost = max(lost, (body.step or 0) - (body.checkpoint_step or 0), 0)
            d.note(
                "preempted",
                f"{msg.instance_id} stopped at step {body.step} with a checkpoint at step "
                f"{body.checkpoint_step} ({lost} steps lost)",
                attempt=att.number,
                step=body.step,
                checkpoint_step=body.checkpoint_step,
                lost_steps=lost,
                notice=body.notice,
            )
            if att.notice_at is None:
                _interrupt(d, att, f"{body.notice} notice seen by the agent", noticed=True)
            elif att is not job.current and job.policy.get("return_from") == att.number:
                d.note(
                    "switched",
                    f"{msg.instance_id} stopped at step {body.step} for the return to spot; "
                    f"attempt {job.current.number if job.current else '?'} restores its "
                    f"checkpoint at step {body.checkpoint_step}",
                    attempt=att.number,
                    instance_id=msg.instance_id,
                    step=body.step,
                    checkpoint_step=body.checkpoint_step,
                )
            att.end = AttemptEnd.INTERRUPTED
            att.ended_at = d.now
            d.terminate([msg.instance_id], "stopped after its interruption checkpoint")
        case AgentCompleted():
            att.last_step = max(att.last_step or 0, body.step or 0)
            if body.step is not None:
                job.progress.step = max(job.progress.step or 0, body.step)
            if body.metrics:
                job.progress.metrics = {**job.progress.metrics, **body.metrics}
            job.outputs_prefix = body.outputs_prefix
            _finish(
                d,
                Transition.COMPLETE,
                AttemptEnd.COMPLETED,
                f"completed at step {body.step}",
                by=att,
            )
        case AgentFailed():
            _finish(d, Transition.FAIL, AttemptEnd.FAILED, body.reason, by=att, log=body.log_tail)
    return d.decision()


def _boot_failed(d: _Draft, att: Attempt, instance_id: str, body: AgentBootFailed) -> Decision:
    """The boot script reported that it could not start the agent, just before power-off."""
    if not att.never_started:
        return _unchanged("ignored: the attempt already started training")
    if att.boot_failure == body.reason:
        return _unchanged("duplicate")
    att.instance_id = instance_id
    d.note(
        "boot-failed",
        f"{instance_id} failed to boot: {body.reason}",
        attempt=att.number,
        instance_id=instance_id,
        reason=body.reason,
        log_tail=body.log_tail[-20:],
    )
    d.terminate([instance_id], "its boot failed")
    if att.end is None:
        att.end = AttemptEnd.BOOT_FAILED
        att.ended_at = d.now
        d.effects.append(ReleaseHandoff(d.job.job_id, att.number))
        _boot_failure(d, att, body.reason, body.log_tail)
    else:
        # Its disappearance was counted first (the report came late): keep the better reason.
        att.end = AttemptEnd.BOOT_FAILED
        att.boot_failure = body.reason
    return d.decision()


def _boot_failure(d: _Draft, att: Attempt, why: str, log_tail: list[str] | None = None) -> None:
    """An attempt ended before training started: replace it, or fail after too many in a row."""
    job = d.job
    att.boot_failure = why
    count = boot_failures_in_a_row(job)
    limit = d.settings.max_boot_failures
    if att is not job.current or job.state.is_terminal():
        return
    if count >= limit:
        _finish(
            d,
            Transition.FAIL,
            AttemptEnd.FAILED,
            f"{count} instances in a row never started training (max_boot_failures={limit}); "
            f"the last: {why}",
            log=(log_tail or [])[-20:],
        )
        return
    if not can(job.state, Transition.INTERRUPT):
        return
    d.go(Transition.INTERRUPT)
    job.waiting_since = d.now
    d.note(
        "boot-retry",
        f"attempt {att.number} never started training ({why}); replacing it "
        f"({count} of {limit} before the job fails)",
        attempt=att.number,
        instance_id=att.instance_id,
        boot_failures=count,
    )
    d.follow_up = PlaceNow("replacing an instance that never started training")


def _drop_old_checkpoint_notes(job: JobRecord) -> None:
    """Keep room for one more periodic checkpoint line within CHECKPOINT_NOTES_KEPT."""
    periodic = [
        i
        for i, e in enumerate(job.timeline)
        if e.kind == "checkpoint" and e.data.get("reason") == "periodic"
    ]
    for i in reversed(periodic[: max(len(periodic) - CHECKPOINT_NOTES_KEPT + 1, 0)]):
        del job.timeline[i]


def _progress_note(d: _Draft, att: Attempt, settings: ControlSettings) -> None:
    """Tell the notifier of the training's progress at most once per `progress_note_interval`.

    Throttled here, at the source, so that a heartbeat costs the notifier nothing; remembered
    on the record (`progress.noted_*`). The note goes to the notifier only: the timeline keeps
    its own sparse history (`_progress_history`). It carries where the rate is measured
    from: the previous note, or this attempt's first report if the attempt began after that
    note (so that neither downtime nor the session's start-up skews the ETA).
    """
    job = d.job
    progress = job.progress
    interval = settings.progress_note_interval
    step = att.last_step  # this attempt's: the job's can be higher after a resume from behind
    if interval <= timedelta(0) or step is None or att.started_at is None:
        return
    first = next((a.started_at for a in job.attempts if a.started_at is not None), att.started_at)
    if d.now - (progress.noted_at or first) < interval:
        return
    if progress.noted_at is not None and progress.noted_at >= att.started_at:
        since_at, since_step = progress.noted_at, progress.noted_step or 0
    else:
        # This attempt's first report, when training really began (after the session's own
        # start-up); the attempt's start if the history no longer has it.
        first_report = next(
            (
                e
                for e in job.timeline
                if e.kind == "progress" and e.data.get("attempt") == att.number
            ),
            None,
        )
        since_at, since_step = att.started_at, att.restored_step or 0
        if first_report is not None and first_report.data.get("step") is not None:
            since_at, since_step = first_report.at, int(first_report.data["step"])
    if step <= since_step:
        return  # no rate yet: the next report will do
    total = f"/{progress.total_steps}" if progress.total_steps else ""
    data = {
        "attempt": att.number,
        "step": step,
        "total_steps": progress.total_steps,
        "metrics": dict(progress.metrics),
        "since_step": since_step,
        "since_at": since_at.isoformat(),
    }
    d.notes.append(TimelineEntry(at=d.now, kind="progress", text=f"step {step}{total}", data=data))
    progress.noted_step = step
    progress.noted_at = d.now


def _progress_history(d: _Draft, attempt: int, at: datetime) -> None:
    """Keep a sparse history of progress on the timeline (for `respot timeline`), not notified.

    One entry per `PROGRESS_HISTORY_FRACTION` of the total steps, or per
    `PROGRESS_HISTORY_SECONDS` when the session sets no total, and the first report of
    each attempt (when training really resumed, after the session's own start-up).
    """
    job = d.job
    step, total = job.progress.step, job.progress.total_steps
    if step is None:
        return
    last = next((e for e in reversed(job.timeline) if e.kind == "progress"), None)
    if last is not None and last.data.get("attempt") == attempt:
        moved = step - int(last.data.get("step") or 0)
        quiet = (at - last.at).total_seconds()
        due = (total and moved >= total * PROGRESS_HISTORY_FRACTION) or (
            quiet >= PROGRESS_HISTORY_SECONDS
        )
        if moved <= 0 or not due:
            return
    metrics = dict(list(job.progress.metrics.items())[:PROGRESS_HISTORY_METRICS])
    shown = " ".join(f"{k}={v:.4g}" for k, v in metrics.items())
    of = f"/{total}" if total else ""
    data: dict[str, Any] = {"attempt": attempt, "step": step, "total_steps": total}
    data["metrics"] = metrics
    gpu_util = mean_utilization(job.progress.gpus or [])
    if gpu_util is not None:
        data["gpu_util_pct"] = gpu_util  # the timeline picture's GPU line
    # Only on the record: the notifier gets the throttled notes of `_progress_note` instead.
    job.add_timeline(
        TimelineEntry(at=at, kind="progress", text=f"step {step}{of} {shown}".strip(), data=data)
    )


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


def _cancel(d: _Draft, event: CancelRequested) -> Decision:
    if d.job.state.is_terminal():
        return _unchanged("ignored: job is over")
    who = f" by {event.command.requested_by}" if event.command.requested_by else ""
    _finish(d, Transition.CANCEL, AttemptEnd.CANCELLED, f"{event.command.reason}{who}")
    return d.decision()


# ---- the scheduled look ----------------------------------------------------------------------


def _tick(
    d: _Draft, event: ReconcileTick, settings: ControlSettings, policy: MarketPolicy
) -> Decision:
    job = d.job
    now = event.at
    spec = job.spec
    if job.state.is_terminal():
        return _unchanged("ignored: job is over")
    if spec.max_runtime is not None and now - job.created_at > spec.max_runtime:
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
        _interrupt(
            d, att, f"no heartbeat for {int((now - silent_since).total_seconds())}s", noticed=False
        )
        return d.decision()
    if (
        spec.deadline is not None
        and job.state is JobState.RUNNING
        and "switching" not in job.policy
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
