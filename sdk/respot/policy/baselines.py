"""The benchmark's anchor policies: on-demand only, Greedy and Uniform Progress.

Greedy and Uniform Progress follow *Can't Be Late* (Wu et al., NSDI 2024, sections 3.3-3.4
and 5.2); their Safety Net Rule is the tick-exact one of `respot.policy.safety`, shared by
every policy here, so that none of them can miss a feasible deadline. See docs/policy.md.
"""

from __future__ import annotations

from respot.policy.model import Choice, Observation
from respot.policy.safety import guard


class OnDemandPolicy:
    """Hold on-demand from the first tick until the work is done: the cost normalizer."""

    name = "on-demand"

    def choose(self, obs: Observation) -> Choice:
        """On-demand while work remains."""
        return Choice.ON_DEMAND if obs.remaining_seconds else Choice.NONE


class GreedyPolicy:
    """Spot whenever available, otherwise wait; on-demand until the end once at risk.

    The paper's Greedy: Exploitation Rule (stay on spot until preempted), idle while spot is
    unavailable, and the Safety Net Rule moves the job to on-demand *and keeps it there*.
    Greedy never chooses on-demand by itself, so holding on-demand means the net has fired.
    """

    name = "greedy"

    def choose(self, obs: Observation) -> Choice:
        """Spot if available, else none; the safety net decides on-demand."""
        if obs.held is Choice.ON_DEMAND:
            return guard(obs, Choice.ON_DEMAND)
        return guard(obs, Choice.SPOT if obs.spot_available else Choice.NONE)


class UniformProgressPolicy:
    """Uniform Progress with hysteresis (the paper's section 5.2.2), parameter-free.

    With cp = work done and ep(t) = t * C / D the uniform progress line at elapsed time t:
    1. Uniform Progress: idle and cp < ep(t): go on-demand to catch up.
    2. Taking Risks: take spot whenever it is available; stay on it until preempted.
    3. Hysteresis: on on-demand, stay on it until cp >= ep(t + 2d).
    4. Safety Net: never take a choice that could make the deadline unreachable.
    Rule 3 overrides rule 2 while on on-demand (that is the point of the hysteresis).
    """

    name = "uniform-progress"

    def choose(self, obs: Observation) -> Choice:
        """Apply rules 3, 2, 1 in that order, then the safety net."""
        if obs.remaining_seconds == 0:
            return Choice.NONE
        elapsed = obs.tick * obs.gap_seconds
        done_scaled = obs.done_seconds * obs.deadline_seconds  # cp * D, exact integers
        if obs.held is Choice.ON_DEMAND:
            horizon = elapsed + 2 * obs.changeover_seconds
            if done_scaled < horizon * obs.work_seconds:  # cp < ep(t + 2d)
                return guard(obs, Choice.ON_DEMAND)
        if obs.spot_available:
            return guard(obs, Choice.SPOT)
        if done_scaled < elapsed * obs.work_seconds:  # cp < ep(t)
            return guard(obs, Choice.ON_DEMAND)
        return guard(obs, Choice.NONE)
