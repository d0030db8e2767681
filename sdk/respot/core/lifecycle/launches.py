"""Submission, placement and EC2's answers to a launch: which attempt to open, where, or why not.

Events: `Submitted`, `PlaceNow`, `CapacityLaunched`, `CapacityUnavailable` (with the quota
that refused it, if any) and `LaunchRefused`; the team's queue's `Admitted` and
`AdmissionRefused` (a submission is HELD until admitted, `respot.queue`), and
`QueueWaitNoted` (why a held job waits, for the researcher's views).
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from respot.core.deadline import record_availability
from respot.core.effects import LookAgainLater
from respot.core.events import (
    AdmissionRefused,
    Admitted,
    CapacityLaunched,
    CapacityUnavailable,
    LaunchRefused,
    PlaceNow,
    QueueWaitNoted,
    Submitted,
)
from respot.core.failures import (
    MAX_PACED_LAUNCHES,
    MAX_THROTTLED_LAUNCHES,
    MAX_UNAUTHORIZED_LAUNCHES,
    launch_error_kind,
)
from respot.core.job import Attempt, AttemptEnd, JobRecord, Market, Placement, QueueWait
from respot.core.lifecycle.attempts import _launch_effect, _new_attempt
from respot.core.lifecycle.draft import Decision, _Draft, _finish, _unchanged, client_token
from respot.core.lifecycle.returns import _refused_return
from respot.core.placement import (
    ControlSettings,
    MarketChoice,
    MarketPolicy,
    candidates,
    disallowed_instance_types,
)
from respot.core.quotas import QuotaReading, quota_for
from respot.core.states import JobState, Transition
from respot.wire.messages import redacted, submission_digest


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
        team=event.team,
    )
    d = _Draft(record, now, settings)
    spec = sub.spec
    d.note(
        "queued",
        f"queued {spec.name} "
        f"({spec.entry_point or ' '.join(spec.command or [])[:200] or spec.image})",
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
    hold = settings.admission if event.hold is None else event.hold
    if hold or spec.after or spec.queue:
        # The team's queue decides when it may ask for capacity (respot.queue).
        d.go(Transition.HOLD)
        d.job.waiting_since = None
        d.note("held", _held_text(spec.after, spec.queue), after=spec.after, queue=spec.queue)
        return d.decision("created")
    d.job.admitted_at = now
    d.follow_up = PlaceNow("submitted")
    return d.decision("created")


def _held_text(after: list[str], queue: str | None) -> str:
    parts = ["waiting in the team's queue"]
    if queue:
        parts.append(f"queue {queue}")
    if after:
        parts.append("after " + ", ".join(after))
    return "; ".join(parts) + " (`respot queue` shows its position and what it waits for)"


def _admitted(d: _Draft, event: Admitted) -> Decision:
    """HELD -> QUEUED: the queue ledger holds its lease; capacity is asked for next.

    Only from HELD: a repeated or late admission changes nothing (a job is admitted once)."""
    if d.job.state is not JobState.HELD:
        return _unchanged(f"ignored: {d.job.state.value} is not held")
    d.go(Transition.ADMIT)
    d.job.queue_wait = None
    d.job.admitted_at = d.now
    d.job.waiting_since = d.now  # max_spot_wait counts from here, not from the submission
    d.note("admitted", f"admitted by the team's queue ({event.reason})")
    d.follow_up = PlaceNow("admitted")
    return d.decision()


def _admission_refused(d: _Draft, event: AdmissionRefused) -> Decision:
    """HELD -> FAILED: the queue can never admit it (its `after:` failed, a GPU limit)."""
    if d.job.state is not JobState.HELD:
        return _unchanged(f"ignored: {d.job.state.value} is not held")
    d.job.queue_wait = None
    _finish(d, Transition.FAIL, AttemptEnd.FAILED, event.reason)
    return d.decision()


def queue_wait_text(wait: QueueWait) -> str:
    """One line for the timeline: '#3 in the team's queue: <reason>; estimated start ...'."""
    where = f"#{wait.position} in the team's queue" if wait.position else "in the team's queue"
    when = wait.estimate.strftime("%Y-%m-%d %H:%M UTC") if wait.estimate else "unknown"
    return f"{where}: {wait.reason}; estimated start {when}"


def _queue_wait(d: _Draft, event: QueueWaitNoted) -> Decision:
    """Record why a HELD job waits (its position, what it waits for, its estimated start).

    Only while HELD, and only when it says something new (`QueueWait.same_as`): a pass that
    plans the same again writes nothing. Its timeline note replaces the previous one if that
    is the newest entry, so a job that waits long does not fill its timeline; the note only
    refreshes the job's Slack card (not a reply of its own)."""
    if d.job.state is not JobState.HELD:
        return _unchanged(f"ignored: {d.job.state.value} is not held")
    wait = QueueWait(
        kind=event.kind,
        reason=event.reason,
        position=event.position,
        estimate=event.estimate,
        at=d.now,
    )
    if wait.same_as(d.job.queue_wait):
        return _unchanged("ignored: the queue says the same")
    d.job.queue_wait = wait
    if d.job.timeline and d.job.timeline[-1].kind == "queue-wait":
        d.job.timeline.pop()
    d.note(
        "queue-wait",
        queue_wait_text(wait),
        waits_for=wait.kind,
        position=wait.position,
        estimate=wait.estimate.isoformat() if wait.estimate else None,
    )
    return d.decision()


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
    fixed = job.spec.market == Market.ON_DEMAND.value  # on-demand by the spec: no fallback
    first_on_demand = previous_market != Market.ON_DEMAND.value
    if choice.market is Market.ON_DEMAND and first_on_demand and not fixed:
        d.note("fallback", f"falling back to on-demand: {choice.reason}", reason=choice.reason)
        job.policy["market_reason"] = choice.reason
    job.policy["market"] = choice.market.value
    job.waiting_since = job.waiting_since or d.now
    _new_attempt(d, pools[0], Transition.REQUEST, reason)


def _in_order(job: JobRecord, pools: list[Placement]) -> list[Placement]:
    """The pools the policy ranked for this request, in its order (all if it ranked none)."""
    by_key = {p.key: p for p in pools}
    ranked = [by_key[k] for k in job.policy.get("pool_order", []) if k in by_key]
    return ranked or pools


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
    if launch_error_kind(event.error_code) in ("throttle", "unauthorized", "paced"):
        return _retry_same_pool(d, att, event)
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


def _retry_same_pool(d: _Draft, att: Attempt, event: CapacityUnavailable) -> Decision:
    """A refusal that says nothing of the pool: EC2 throttled RunInstances (the account's API
    rate), or IAM refused it while a deploy moves the functions to a new launch template
    version (`UnauthorizedOperation`), or respot's own launch pacing had no token for it
    (`PACED_ERRORS`: it was not sent). The same pool is launched again by the tick after
    `launch_timeout` (a paced one at the next tick), same client token, never marked tried;
    after the bound of its kind (`MAX_THROTTLED_LAUNCHES`, `MAX_UNAUTHORIZED_LAUNCHES`,
    `MAX_PACED_LAUNCHES`) the job fails with AWS's text or the pacing's."""
    job = d.job
    p = att.placement
    if launch_error_kind(event.error_code) == "paced":
        return _paced(d, att, event)
    throttle = launch_error_kind(event.error_code) == "throttle"
    limit = MAX_THROTTLED_LAUNCHES if throttle else MAX_UNAUTHORIZED_LAUNCHES
    key = f"{'throttled' if throttle else 'unauthorized'}-{att.number}"
    count = int(job.policy.get(key, 0)) + 1
    job.policy[key] = count
    said = f"{event.error_code}: {event.message}" if event.message else event.error_code
    verb = "throttled" if throttle else "refused"
    what = f"EC2 {verb} the launch of {p.market.value} {p.instance_type} in {p.availability_zone} "
    what += f"({said})"
    if count >= limit:
        why = (
            "the account's EC2 API request rate is spent (CloudTrail shows by whom): submit "
            "again later"
            if throttle
            else "longer than a deploy that changes the AMI takes: check the control "
            "functions' ec2:RunInstances grant (docs/decisions.md)"
        )
        _finish(
            d,
            Transition.FAIL,
            AttemptEnd.FAILED,
            f"{what} {count} times in a row (at most {limit}); {why}",
        )
        return d.decision()
    att.requested_at = d.now  # the tick launches again once launch_timeout has passed
    wait = int(d.settings.launch_timeout.total_seconds())
    d.note(
        "throttled" if throttle else "launch-refused",
        f"{what}; the same pool is tried again in {wait}s ({count} of {limit} before the "
        "job fails)",
        attempt=att.number,
        error=event.error_code,
    )
    return d.decision()


def _paced(d: _Draft, att: Attempt, event: CapacityUnavailable) -> Decision:
    """respot's launch pacing held the launch back (not EC2, not the pool): ask again when
    its reserved token is due (`retry_after`: a delayed look, `LookAgainLater`, and the
    tick from then on), else at the next tick; at most `MAX_PACED_LAUNCHES` times for one
    attempt."""
    job = d.job
    p = att.placement
    key = f"paced-{att.number}"
    count = int(job.policy.get(key, 0)) + 1
    job.policy[key] = count
    what = (
        f"launch of {p.market.value} {p.instance_type} in {p.availability_zone} paced: "
        f"{event.message or 'no launch token'}"
    )
    if count >= MAX_PACED_LAUNCHES:
        _finish(
            d,
            Transition.FAIL,
            AttemptEnd.FAILED,
            f"{what}; {count} times in a row (at most {MAX_PACED_LAUNCHES}): more launches "
            "than the stack setting launch_pacing allows keep coming; raise its "
            "rate_per_second, or submit again later",
        )
        return d.decision()
    # The tick launches again once launch_timeout has passed since requested_at: date it so
    # that this happens when the launch's reserved token is due (never later than
    # launch_timeout from now: requested_at is never in the future; a token due later makes
    # that launch paced again, with what is left), else at the next tick.
    timeout = d.settings.launch_timeout
    if event.retry_after is not None and event.retry_after > 0:
        delay = min(max(math.ceil(event.retry_after), 1), int(timeout.total_seconds()))
        att.requested_at = d.now - timeout + timedelta(seconds=delay)
        d.effects.append(LookAgainLater(d.job.job_id, att.number, delay, "its launch token is due"))
        when = f"in {delay}s, when its launch token is due"
    else:
        att.requested_at = d.now - max(timeout - d.settings.policy_tick, timedelta(0))
        when = "at the next tick"
    d.note(
        "paced",
        f"{what}; the same pool is tried again {when} ({count} of "
        f"{MAX_PACED_LAUNCHES} before the job fails); not a lack of capacity",
        attempt=att.number,
        error=event.error_code,
    )
    return d.decision()


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
