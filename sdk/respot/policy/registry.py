"""Policies by name: what `make_policy` and `respot bench policy` know."""

from __future__ import annotations

from collections.abc import Callable

from respot.policy.baselines import GreedyPolicy, OnDemandPolicy, UniformProgressPolicy
from respot.policy.exceptions import UnknownPolicyError
from respot.policy.model import Policy
from respot.policy.respot_policy import RespotPolicy

_FACTORIES: dict[str, Callable[[], Policy]] = {
    OnDemandPolicy.name: OnDemandPolicy,
    GreedyPolicy.name: GreedyPolicy,
    UniformProgressPolicy.name: UniformProgressPolicy,
    RespotPolicy.name: RespotPolicy,
}

POLICY_NAMES: tuple[str, ...] = tuple(_FACTORIES)


def make_policy(name: str) -> Policy:
    """A fresh policy object: "on-demand", "greedy", "uniform-progress" or "respot"."""
    try:
        factory = _FACTORIES[name]
    except KeyError:
        known = ", ".join(POLICY_NAMES)
        raise UnknownPolicyError(f"unknown policy {name!r} (known: {known})") from None
    return factory()
