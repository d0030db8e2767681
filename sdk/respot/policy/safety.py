"""The deadline guarantee: which choices keep on-demand able to finish whatever spot does next.

Slack s = (ticks left) * G - (work left) is the time that waiting and changeovers may still
use. On-demand from the next tick finishes in time exactly when s >= d (or, already on
on-demand with r still to pay, s >= r). The invariant every policy here keeps is therefore

    s >= d, or held is on-demand and s >= r

at the start of every tick. A choice is *safe* when the worst case for the next tick
(spot lost at the tick boundary) keeps the invariant:

- NONE costs a whole tick of slack: safe iff s - G >= d;
- SPOT costs min(r', G) of slack, where r' = d for a new instance (r when continuing):
  safe iff s - min(r', G) >= d, or the tick finishes the job;
- ON_DEMAND keeps the invariant whenever it holds now (s stays, r shrinks with it).

If on-demand alone from the start finishes (s0 = floor(D/G) * G - C >= d) and every tick's
choice is safe, the job never misses its deadline: that is the whole proof, by induction.
"""

from __future__ import annotations

from respot.policy.model import Choice, Observation


def is_safe(obs: Observation, choice: Choice) -> bool:
    """Whether `choice` keeps the deadline guarantee for every possible next tick."""
    remaining = obs.remaining_seconds
    if remaining == 0:
        return True
    slack = obs.slack_seconds
    gap = obs.gap_seconds
    changeover = obs.changeover_seconds
    if choice is Choice.SPOT and not obs.spot_available:
        choice = Choice.NONE
    if choice is Choice.NONE:
        return slack - gap >= changeover
    held_same = obs.held is choice
    pending = obs.remaining_changeover_seconds if held_same else changeover
    if choice is Choice.ON_DEMAND:
        return slack >= pending
    if gap - pending >= remaining:
        return True  # this tick finishes the job: a preemption after it cannot hurt
    return slack - min(pending, gap) >= changeover


def guard(obs: Observation, wanted: Choice) -> Choice:
    """`wanted` if it is safe, else on-demand (the safety net)."""
    if obs.remaining_seconds == 0:
        return Choice.NONE
    return wanted if is_safe(obs, wanted) else Choice.ON_DEMAND
