"""Sweep files are checked on the laptop: every problem names its field and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from respot.exceptions import SpecError
from respot.sweep.client import load_sweep_file
from respot.sweep.spec import validate_sweep

ROOT = Path(__file__).resolve().parents[2]


def base(**changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": "s",
        "metric": "val_loss",
        "n_trials": 4,
        "search_space": {"lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True}},
        "job": {"entry_point": "m:S"},
    }
    spec.update(changes)
    return spec


def problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as info:
        validate_sweep(data)
    return info.value.problems


def test_a_good_spec_names_its_trials_after_the_sweep() -> None:
    spec = validate_sweep(base())
    assert spec.job.name == "s"
    assert spec.trial_hyperparameters({"lr": 0.01}) == {"lr": 0.01}


@pytest.mark.parametrize(
    ("param", "expected"),
    [
        ({"type": "float", "low": 1.0, "high": 0.5}, "search_space.lr: Value error, low (1.0)"),
        ({"type": "float", "low": 0.0, "high": 1.0, "log": True}, "log: true needs low > 0"),
        ({"type": "int", "low": 0, "high": 10, "log": True}, "log: true needs low >= 1"),
        ({"type": "categorical", "choices": []}, "search_space.lr.choices"),
        ({"type": "categorical", "choices": ["a", "a"]}, "lists 'a' twice"),
        ({"type": "normal", "low": 0, "high": 1}, "search_space.lr"),
        ({"type": "float", "low": 0, "high": 1, "stepp": 0.1}, "stepp: unknown field"),
    ],
)
def test_a_bad_parameter_is_named(param: dict[str, Any], expected: str) -> None:
    found = problems(base(search_space={"lr": param}))
    assert any(expected.replace("Value error, ", "") in p for p in found), found
    assert all(p.startswith("search_space.lr") for p in found), found


def test_bad_names_metric_and_budget_are_refused() -> None:
    found = problems(
        base(
            metric="val loss!",
            n_trials=0,
            parallelism=1000,
            search_space={"bad name": {"type": "int", "low": 1, "high": 2}},
        )
    )
    text = "\n".join(found)
    assert "n_trials" in text and "parallelism" in text
    found = problems(base(search_space={"bad name": {"type": "int", "low": 1, "high": 2}}))
    assert any("search_space.bad name: not a parameter name" in p for p in found), found
    assert any("is not a metric name" in p for p in problems(base(metric="val loss!")))


def test_the_job_block_is_checked_like_respot_run() -> None:
    found = problems(base(job={"entry_point": "m:S", "deadline": "tomorrow"}))
    assert any(p.startswith("job.deadline") for p in found), found


def test_the_grid_sampler_needs_steps_for_floats() -> None:
    found = problems(base(sampler={"name": "grid"}))
    assert any("grid sampler needs a step" in p for p in found), found


def test_the_example_sweep_file_is_valid(tmp_path: Path) -> None:
    spec = load_sweep_file(ROOT / "examples" / "sweep" / "sweep.yaml")
    assert spec.n_trials == 20 and spec.metric == "val_loss"
    assert spec.job.source_dir == str((ROOT / "examples" / "sweep").resolve())


def test_a_deep_or_broken_file_is_a_clear_error(tmp_path: Path) -> None:
    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * 2000 + "]" * 2000)
    with pytest.raises(SpecError):
        load_sweep_file(deep)
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_sweep_file(broken)


def test_a_name_with_a_trailing_newline_is_refused() -> None:
    assert any(p.startswith("name") for p in problems(base(name="ok\n")))


# ---- ranges the samplers cannot draw from, non-finite values (issue 24, item 7) ------------


@pytest.mark.parametrize(
    ("param", "sampler", "expected"),
    [
        # a grid over a range whose width overflows: OverflowError before, in the validator
        (
            {"type": "float", "low": -1e308, "high": 1e308, "step": 1},
            "grid",
            "too wide to draw from",
        ),
        # random and TPE draw low + u * (high - low): an infinite width cannot be drawn
        ({"type": "float", "low": -1e308, "high": 1e308}, "random", "too wide to draw from"),
        ({"type": "float", "low": -1e308, "high": 1e308}, "tpe", "too wide to draw from"),
        ({"type": "float", "low": 0, "high": 1, "step": float("inf")}, "tpe", "finite"),
        ({"type": "float", "low": 0, "high": 1, "step": float("nan")}, "tpe", "step"),
        ({"type": "float", "low": 0, "high": float("inf")}, "tpe", "finite"),
        ({"type": "float", "low": 0, "high": 1, "step": 2}, "tpe", "larger than the range"),
        ({"type": "float", "low": 0, "high": 1e300, "step": 1e-300}, "grid", "steps"),
        ({"type": "float", "low": 0, "high": 1, "step": 1e-300}, "tpe", "steps"),
        ({"type": "float", "low": 0, "high": 1, "step": 1e-7}, "grid", "more than 100,000"),
        ({"type": "int", "low": -(10**30), "high": 10**30}, "tpe", "2**53"),
        ({"type": "int", "low": 0, "high": 5, "step": 10}, "tpe", "larger than the range"),
        ({"type": "categorical", "choices": [1.0, float("nan")]}, "tpe", "not .nan or .inf"),
        ({"type": "categorical", "choices": [float("inf")]}, "grid", "not .nan or .inf"),
        ({"type": "categorical", "choices": [10**400]}, "tpe", "2**53"),
    ],
)
def test_a_range_no_sampler_can_draw_from_is_refused_naming_the_parameter(
    param: dict[str, Any], sampler: str, expected: str
) -> None:
    found = problems(base(search_space={"lr": param}, sampler={"name": sampler}))
    assert any(expected in p for p in found), found
    assert all(p.startswith("search_space.lr") for p in found), found


def test_non_finite_values_in_a_sweep_file_are_refused(tmp_path: Path) -> None:
    # `.nan` and `.inf` are YAML's spellings; the CLI used to say "2 trials" for such a file.
    for text in (
        "search_space:\n  lr: {type: categorical, choices: [0.1, .nan]}\n",
        "search_space:\n  lr: {type: float, low: 0, high: 1, step: .inf}\n",
        "search_space:\n  lr: {type: float, low: -.inf, high: 1}\n",
    ):
        path = tmp_path / "sweep.yaml"
        path.write_text("name: s\nmetric: m\nn_trials: 2\njob: {entry_point: 'm:S'}\n" + text)
        with pytest.raises(SpecError) as info:
            load_sweep_file(path)
        assert any(p.startswith("search_space.lr") for p in info.value.problems), text
