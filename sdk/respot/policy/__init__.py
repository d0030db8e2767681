"""Deadline-aware placement: which instance a job should hold, tick by tick.

The live control plane calls, on every reconcile tick of a job with a deadline,

    make_policy("respot").decide(observation)   # or .choose(observation) for the Choice

with an `Observation` built from the job record and the stored availability history.
Everything importable from here is pure Python (no numpy), cheap for a Lambda cold start.
The simulator's omniscient optimum and the benchmark live in `respot.policy.omniscient`
and `respot.policy.bench` (numpy), imported only by the `respot bench policy` command.
"""

from respot.policy.baselines import GreedyPolicy, OnDemandPolicy, UniformProgressPolicy
from respot.policy.exceptions import (
    JobSpecError,
    PolicyError,
    TraceError,
    UnknownPolicyError,
)
from respot.policy.model import (
    ON_DEMAND_PRICE_PER_HOUR,
    SPOT_PRICE_PER_HOUR,
    Choice,
    HistoryView,
    Job,
    Observation,
    Policy,
    Trace,
    load_trace,
    load_traces,
    on_demand_cost,
)
from respot.policy.registry import POLICY_NAMES, make_policy
from respot.policy.respot_policy import Decision, Mode, RespotParameters, RespotPolicy
from respot.policy.safety import guard, is_safe
from respot.policy.simulator import Outcome, simulate

__all__ = [
    "ON_DEMAND_PRICE_PER_HOUR",
    "POLICY_NAMES",
    "SPOT_PRICE_PER_HOUR",
    "Choice",
    "Decision",
    "GreedyPolicy",
    "HistoryView",
    "Job",
    "JobSpecError",
    "Mode",
    "Observation",
    "OnDemandPolicy",
    "Outcome",
    "Policy",
    "PolicyError",
    "RespotParameters",
    "RespotPolicy",
    "Trace",
    "TraceError",
    "UniformProgressPolicy",
    "UnknownPolicyError",
    "guard",
    "is_safe",
    "load_trace",
    "load_traces",
    "make_policy",
    "on_demand_cost",
    "simulate",
]
