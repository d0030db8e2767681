"""Properties that must hold on any trace: no missed deadline, decisions from the observation."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from respot.policy import (
    Choice,
    Job,
    Observation,
    RespotPolicy,
    is_safe,
    make_policy,
    simulate,
)


@st.composite
def feasible_cases(draw):
    """A job that on-demand alone finishes in time, and a window of spot availability."""
    gap = draw(st.integers(1, 900))
    changeover = draw(st.integers(0, 3 * gap))  # includes d > G
    ticks = draw(st.integers(1, 80))
    deadline = ticks * gap + draw(st.integers(0, gap - 1))  # G need not divide D
    # On-demand from the start needs ceil((C + d) / G) <= floor(D / G) ticks.
    most_work = ticks * gap - changeover
    if most_work < 1:
        changeover = draw(st.integers(0, ticks * gap - 1))
        most_work = ticks * gap - changeover
    work = draw(st.integers(1, most_work))
    # Availability as runs, so that long and short runs both occur.
    runs = draw(st.lists(st.tuples(st.booleans(), st.integers(1, 12)), min_size=1, max_size=30))
    window = [int(up) for up, length in runs for _ in range(length)]
    window = (window * (ticks // len(window) + 2))[: ticks + 1]
    return Job(work, deadline, changeover), gap, window


@settings(max_examples=400, deadline=None)
@given(feasible_cases())
def test_no_policy_misses_a_feasible_deadline(case):
    job, gap, window = case
    assert job.feasible(gap)
    for name in ["respot", "uniform-progress", "greedy", "on-demand"]:
        out = simulate(make_policy(name), window, job, gap)
        assert not out.missed, name


@settings(max_examples=150, deadline=None)
@given(feasible_cases())
def test_respot_decisions_depend_on_the_observation_alone(case):
    # GIVEN one policy object reused over a window (incremental caches) ...
    job, gap, window = case

    class FreshEachTick:
        name = "fresh"

        def __init__(self) -> None:
            self.decisions: list[Choice] = []

        def choose(self, obs: Observation) -> Choice:
            # ... and a fresh object per tick fed a plain tuple (what a Lambda would do)
            plain = replace(obs, history=tuple(obs.history))
            choice = RespotPolicy().choose(plain)
            self.decisions.append(choice)
            return choice

    cached = RespotPolicy()
    recorded: list[Choice] = []

    class Recording:
        name = "recording"

        def choose(self, obs: Observation) -> Choice:
            choice = cached.choose(obs)
            recorded.append(choice)
            return choice

    fresh = FreshEachTick()
    simulate(Recording(), window, job, gap)
    simulate(fresh, window, job, gap)
    # THEN both make exactly the same decisions
    assert recorded == fresh.decisions


def test_reusing_a_policy_across_windows_recomputes_its_statistics():
    job = Job.from_hours(work=2, deadline=3, changeover=0.1)
    windows = [[1, 0] * 10, [0, 0, 1] * 7, [1] * 19]
    reused = make_policy("respot")
    for window in windows:
        expected = simulate(make_policy("respot"), window, job, 600).choices
        assert simulate(reused, window, job, 600).choices == expected


def test_safe_choices_keep_on_demand_able_to_finish():
    # GIVEN slack of exactly d + G: one more idle tick is still safe, spot too
    obs = Observation(
        tick=0,
        gap_seconds=600,
        work_seconds=2700,
        deadline_seconds=3600,
        changeover_seconds=300,
        done_seconds=0,
        remaining_changeover_seconds=0,
        held=Choice.NONE,
        spot_available=True,
        history=(),
    )
    assert obs.slack_seconds == 900
    assert is_safe(obs, Choice.NONE) and is_safe(obs, Choice.SPOT)
    # WHEN a second less slack is left, idling is no longer safe, spot still is
    tighter = replace(obs, work_seconds=2701)
    assert not is_safe(tighter, Choice.NONE) and is_safe(tighter, Choice.SPOT)


def test_importing_the_policy_package_does_not_import_numpy():
    code = "import sys, respot.policy; print('numpy' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"
