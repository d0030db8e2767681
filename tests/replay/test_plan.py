"""`respot replay`'s pure parts: the plan's checks, the prediction, the live ledger's units."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from respot.cli import app
from respot.policy.bench import Cell
from respot.policy.exceptions import JobSpecError
from respot.policy.model import Job
from respot.policy.placement_bench import evaluate
from respot.policy.pools import load_pool_set
from respot.replay import LiveCost, ReplayPlan, compare, predict
from respot.replay.live import LiveRun
from respot.replay.plan import LiveAttempt
from tests.conftest import TRACES

AWS_2022 = sorted((TRACES / "aws-2022-10-26").glob("*_1.json"))
AWS_2023_08 = [TRACES / "aws-2023-08-27"]
JOB = Job(3600, 9000, 1800)  # C = 1 h, D = 2.5 h, d = 0.5 h: 15 ticks of 600 s


def plan_of(paths: list[Path], job: Job = JOB, **kw: object) -> ReplayPlan:
    options: dict[str, object] = {"window_start": 266, **kw}
    return ReplayPlan.build(load_pool_set(paths), job, **options)  # type: ignore[arg-type]


def test_the_prediction_is_the_benchmarks_figure_for_that_window() -> None:
    plan = plan_of(AWS_2022)
    cell = Cell(1.0, 2.5, 0.5)
    costs, misses = evaluate(plan.pool_set, cell, [plan.start], "respot")
    assert predict(plan).respot.normalized_cost == pytest.approx(costs[0]) and misses == 0
    omniscient, _ = evaluate(plan.pool_set, cell, [plan.start], "omniscient")
    assert predict(plan).omniscient == pytest.approx(omniscient[0])


def test_window_k_is_the_benchmarks_window_k() -> None:
    pool_set = load_pool_set(AWS_2022)
    plan = ReplayPlan.build(pool_set, JOB, window=3, windows=20)
    assert plan.start == pool_set.window_starts(JOB.window_ticks(600), 20)[3]


@pytest.mark.parametrize(
    ("options", "names"),
    [
        ({"window_start": None}, "--window-start N and --window K"),
        ({"window": 2}, "--window-start N and --window K"),
        ({"window_start": None, "window": 20}, "--window 20"),
        ({"window_start": 10**6}, "--window-start"),
        ({"time_scale": 7.0}, "--time-scale"),
        ({"time_scale": 1200.0}, "--time-scale"),
    ],
)
def test_bad_options_name_the_option_and_the_fix(options: dict[str, object], names: str) -> None:
    with pytest.raises(JobSpecError, match=names.replace("-", r"\-")):
        plan_of(AWS_2022, **options)


def test_an_infeasible_deadline_is_refused_before_anything_runs() -> None:
    with pytest.raises(JobSpecError, match="--deadline-hours"):
        plan_of(AWS_2022, Job(3600, 3600, 1800))


def test_the_time_scale_makes_a_tick_last_whole_seconds() -> None:
    plan = plan_of(AWS_2022, time_scale=200.0)
    assert plan.tick_seconds == 3
    assert plan.live_seconds() == {"work": 18.0, "deadline": 45.0, "changeover": 9.0}
    assert plan.rounding() == []
    odd = plan_of(AWS_2022, Job(3600, 9000, 2000))
    assert odd.rounding() == ["changeover 6.67 s is seen live as 6 s"]


def test_the_live_ledger_is_converted_to_trace_hours_at_the_benchmarks_prices() -> None:
    plan = plan_of(AWS_2022)  # 2 s real per 600 s tick
    live = LiveCost.of(
        plan,
        [
            LiveAttempt("spot", "us-east-1a", 12.0, "interrupted", 0.001),  # 6 ticks: 1 h
            LiveAttempt("on-demand", "us-east-1a", 6.0, "completed", 0.002),  # 0.5 h
        ],
    )
    assert (live.spot_hours, live.on_demand_hours, live.transfers) == (1.0, 0.5, 0)
    assert live.cost_usd == pytest.approx(0.9731 + 0.5 * 3.06)
    # on-demand only: ceil((C + d) / G) = 9 ticks of 600 s at $3.06/h
    assert live.normalized == pytest.approx(live.cost_usd / (9 * 3.06 / 6))
    assert live.ledger_usd == pytest.approx(0.003)


def test_transfers_are_counted_from_the_zones_as_the_rules_count_them() -> None:
    # pools: us-east-2b (zone a), us-west-2a (zone b), us-west-2c (zone c); home us-east-2
    plan = ReplayPlan.build(load_pool_set(AWS_2023_08), Job(1800, 4500, 900), window_start=84)
    attempts = [
        LiveAttempt("spot", "us-east-1a", 2.0, "interrupted", 0.0),  # home: no move
        LiveAttempt("spot", "us-east-1b", 2.0, "interrupted", 0.0),  # to us-west-2: 1
        LiveAttempt("spot", "us-east-1c", 2.0, "interrupted", 0.0),  # same region: none
        LiveAttempt("spot", "us-east-1c", 2.0, "interrupted", 0.0),  # again: none
        LiveAttempt("on-demand", "us-east-1a", 2.0, "completed", 0.0),  # runs in home: none
        LiveAttempt("spot", "us-east-1a", 2.0, "completed", 0.0),  # back to us-east-2: 2
    ]
    live = LiveCost.of(plan, attempts)
    assert live.transfers == 2
    assert live.cost_usd == pytest.approx((10 * 0.9731 + 2 * 3.06) * 150 / 3600 + 2 * 10 * 0.02)


def _run(plan: ReplayPlan, attempts: list[LiveAttempt], finish: float, starts: float) -> LiveRun:
    return LiveRun(
        job_id="j",
        state="COMPLETED",
        attempts=tuple(attempts),
        spans=tuple((a.market, 0.0, 1.0) for a in attempts),
        changeovers=(6.0,),
        launches=(0.1,),
        agent_starts=(starts,),
        finish_ticks=finish,
        deadline_met=finish <= plan.job.deadline_seconds / plan.gap,
        timeline=(),
    )


def test_the_verdict_fails_outside_the_tolerance_and_on_a_missed_deadline() -> None:
    plan = plan_of(AWS_2022)
    prediction = predict(plan)  # 8 ticks of pool 0, then 4 of pool 1: 12 spot ticks
    same = [LiveAttempt("spot", "us-east-1a", 24.0, "completed", 0.0)]
    assert compare(plan, _run(plan, same, 12.0, 2.0), prediction, 0.1).verdict == "OK"
    dearer = [LiveAttempt("on-demand", "us-east-1a", 24.0, "completed", 0.0)]
    drift = compare(plan, _run(plan, dearer, 12.0, 2.0), prediction, 0.1)
    assert drift.verdict == "DRIFT" and drift.difference > drift.tolerance
    late = compare(plan, _run(plan, same, 15.5, 2.0), prediction, 0.1)
    assert late.verdict == "DEADLINE MISSED"
    busy = compare(plan, _run(plan, dearer, 12.0, 7.0), prediction, 0.1)
    assert busy.verdict == "INCONCLUSIVE" and "too busy" in (busy.inconclusive or "")


def test_the_command_refuses_bad_options_before_anything_runs() -> None:
    result = CliRunner().invoke(
        app,
        [
            "replay", "--traces", *map(str, AWS_2022), "--window-start", "266",
            "--work-hours", "1", "--deadline-hours", "2.5", "--changeover-hours", "0.5",
            "--time-scale", "7",
        ],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "--time-scale 7.0" in result.output and "300" in result.output


def test_the_command_predicts_without_running() -> None:
    result = CliRunner().invoke(
        app,
        [
            "replay", "--traces", *map(str, AWS_2022), "--window-start", "266",
            "--work-hours", "1", "--deadline-hours", "2.5", "--changeover-hours", "0.5",
            "--predict-only",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "respot: 0.424" in result.output and "omniscient: 0.318" in result.output
