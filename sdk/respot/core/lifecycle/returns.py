"""Returns to spot: when a job on on-demand asks for spot again, hands over, or is refused.

Begun by the tick (`_begin_return`), refused by a capacity result (`_refused_return`), and
handed over after whichever event first shows the spot instance (`_hand_over_return`, which
`decide` tries after every event).
"""

from __future__ import annotations

from datetime import timedelta

from respot.core.effects import StopAttempt
from respot.core.events import PlaceNow
from respot.core.job import Attempt, JobRecord, Market
from respot.core.lifecycle.attempts import _new_attempt
from respot.core.lifecycle.draft import Decision, _Draft
from respot.core.placement import ControlSettings, MarketChoice, candidates
from respot.core.states import Transition
from respot.core.transfer import region_of_attempt
from respot.policy.live_view import backoff_cap_ticks, return_backoff_ticks


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
