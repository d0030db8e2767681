"""`respot sweep`: a file argument starts a sweep, a bad file fails before anything is spent."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from respot.cli import app


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def test_a_bad_search_space_fails_on_the_laptop_naming_the_parameter(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN no deployment at all: a bad file must fail before any AWS call
    monkeypatch.setenv("RESPOT_TOPIC_ARN", "arn:aws:sns:us-east-1:123456789012:nowhere")
    bad = tmp_path / "sweep.yaml"
    bad.write_text(
        "name: s\nmetric: val_loss\nn_trials: 3\n"
        "search_space:\n  lr: {type: float, low: 0.5, high: 0.1}\n"
        "job: {entry_point: 'm:S'}\n"
    )
    # WHEN it is started the short way (`respot sweep FILE`)
    result = runner.invoke(app, ["sweep", str(bad)])
    # THEN the error names the parameter and the fix, with no traceback
    assert result.exit_code == 1
    assert "search_space.lr" in result.output and "must be below high" in result.output
    assert "Traceback" not in result.output


def test_subcommands_are_not_taken_for_files(runner: CliRunner) -> None:
    result = runner.invoke(app, ["sweep", "status", "--help"])
    assert result.exit_code == 0 and "best so far" in result.output
