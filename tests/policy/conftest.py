"""Fixtures shared by the policy tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from respot.policy.model import Choice, Observation


class ScriptedPolicy:
    """Plays a fixed sequence of choices, one per tick (NONE past its end)."""

    name = "scripted"

    def __init__(self, choices: Sequence[Choice]) -> None:
        self.choices = list(choices)
        self.seen: list[Observation] = []

    def choose(self, obs: Observation) -> Choice:
        self.seen.append(obs)
        return self.choices[obs.tick] if obs.tick < len(self.choices) else Choice.NONE


@pytest.fixture
def scripted() -> type[ScriptedPolicy]:
    """The class of a policy that plays a given sequence of choices."""
    return ScriptedPolicy


@pytest.fixture
def tick_price() -> Callable[[Choice, int], float]:
    """Dollars for one tick of a choice at the benchmark's prices, written out independently."""

    def price(choice: Choice, gap: int) -> float:
        per_hour = {Choice.SPOT: 0.9731, Choice.ON_DEMAND: 3.06, Choice.NONE: 0.0}[choice]
        return per_hour * gap / 3600

    return price
