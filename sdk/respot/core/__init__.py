"""The pure core: job states, the job record, the lifecycle rules, placement and cost.

Nothing in this package imports boto3 or talks to the network.
"""

from respot.core.job import Attempt, AttemptEnd, JobRecord, Market, Placement, TimelineEntry
from respot.core.lifecycle import Decision, decide
from respot.core.placement import ControlSettings, SubnetRef
from respot.core.states import TRANSITIONS, JobState, Transition, next_state

__all__ = [
    "TRANSITIONS",
    "Attempt",
    "AttemptEnd",
    "ControlSettings",
    "Decision",
    "JobRecord",
    "JobState",
    "Market",
    "Placement",
    "SubnetRef",
    "TimelineEntry",
    "Transition",
    "decide",
    "next_state",
]
