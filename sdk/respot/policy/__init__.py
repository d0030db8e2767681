"""Deadline-aware placement: which instance a job should hold, tick by tick.

The live control plane calls, on every reconcile tick of a job with a deadline,

    make_policy("respot").decide(observation)   # or .choose(observation) for the Choice

with an `Observation` built from the job record and the stored availability history.
Everything importable from here is pure Python (no numpy), cheap for a Lambda cold start.
Across several spot pools (zones, instance types, regions) the same policy is

    MultiPoolPolicy().decide(pools_observation)   # .placement: a pool's spot, on-demand, nothing

with a `PoolsObservation` (every pool's availability now and its past, where the checkpoint is).
The simulators' omniscient optima and the benchmarks live in `respot.policy.omniscient`,
`respot.policy.omniscient_pools`, `respot.policy.bench` and `respot.policy.placement_bench`
(numpy), imported only by the `respot bench policy|placement` commands.
"""

from respot.policy.baselines import GreedyPolicy, OnDemandPolicy, UniformProgressPolicy
from respot.policy.exceptions import (
    JobSpecError,
    PolicyError,
    TraceError,
    UnknownPolicyError,
)
from respot.policy.history import RunLengths
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
from respot.policy.multipool import MultiPoolPolicy, PoolsDecision
from respot.policy.pools import (
    CHECKPOINT_GB,
    NOTHING,
    ON_DEMAND,
    TRANSFER_PRICE_PER_GB,
    Placement,
    Pool,
    PoolSet,
    PoolsObservation,
    PoolsOutcome,
    PoolsPolicy,
    load_pool_set,
    region_of,
    simulate_pools,
)
from respot.policy.registry import POLICY_NAMES, make_policy
from respot.policy.respot_policy import Decision, Mode, RespotParameters, RespotPolicy
from respot.policy.safety import guard, is_safe
from respot.policy.simulator import Outcome, simulate

__all__ = [
    "CHECKPOINT_GB",
    "NOTHING",
    "ON_DEMAND",
    "ON_DEMAND_PRICE_PER_HOUR",
    "POLICY_NAMES",
    "SPOT_PRICE_PER_HOUR",
    "TRANSFER_PRICE_PER_GB",
    "Choice",
    "Decision",
    "GreedyPolicy",
    "HistoryView",
    "Job",
    "JobSpecError",
    "Mode",
    "MultiPoolPolicy",
    "Observation",
    "OnDemandPolicy",
    "Outcome",
    "Placement",
    "Policy",
    "PolicyError",
    "Pool",
    "PoolSet",
    "PoolsDecision",
    "PoolsObservation",
    "PoolsOutcome",
    "PoolsPolicy",
    "RespotParameters",
    "RespotPolicy",
    "RunLengths",
    "Trace",
    "TraceError",
    "UniformProgressPolicy",
    "UnknownPolicyError",
    "guard",
    "is_safe",
    "load_pool_set",
    "load_trace",
    "load_traces",
    "make_policy",
    "on_demand_cost",
    "region_of",
    "simulate",
    "simulate_pools",
]
