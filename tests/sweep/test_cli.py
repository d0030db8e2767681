"""`respot sweep`: a file argument starts a sweep, a bad file fails before anything is spent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


def test_start_wait_off_a_terminal_prints_each_change_as_it_happens(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 23, item 15: `sweep start --wait` piped (a CI log) printed nothing until the end.
    import sys
    from datetime import UTC, datetime
    from types import SimpleNamespace

    import respot.cli.sweep as cli_sweep
    from respot.sweep import client
    from respot.sweep.model import SweepRecord, SweepState, Trial, TrialState
    from tests.sweep.conftest import submission

    sub = submission(n_trials=2, parallelism=2)
    now = datetime.now(UTC)

    def record(states: list[str], value: float | None = None, sweep: str = "RUNNING") -> Any:
        trials = [
            Trial(
                number=i,
                job_id=f"{sub.sweep_id}-t{i:03d}-0123456789",
                params={"lr": 0.01 * (i + 1)},
                state=TrialState(state),
                value=value if state == "COMPLETE" else None,
                started_at=now,
            )
            for i, state in enumerate(states)
        ]
        return SweepRecord(
            sweep_id=sub.sweep_id,
            created_at=now,
            updated_at=now,
            submission=sub,
            trials=trials,
            state=SweepState(sweep),
        )

    polls = iter(
        [
            None,
            record(["RUNNING", "RUNNING"]),
            record(["RUNNING", "RUNNING"]),
            record(["COMPLETE", "RUNNING"], 0.25),
            record(["COMPLETE", "COMPLETE"], 0.25, "COMPLETED"),
        ]
    )
    printed_before_the_end: list[str] = []

    def next_record(self: Any) -> Any:
        # What has been written to stdout by the time of this poll: lines come as they happen.
        printed_before_the_end.append(sys.stdout.buffer.getvalue().decode())  # type: ignore[attr-defined]
        return next(polls)

    monkeypatch.setattr(client.SweepHandle, "record", next_record)
    monkeypatch.setattr(client.time, "sleep", lambda seconds: None)
    monkeypatch.setattr(
        cli_sweep, "connect", lambda local: SimpleNamespace(deployment=None, session=None)
    )
    monkeypatch.setattr(
        client, "sweep", lambda spec, **kw: client.SweepHandle(sub.sweep_id, kw["deployment"])
    )
    path = tmp_path / "sweep.yaml"
    path.write_text(
        "name: s\nmetric: val_loss\nn_trials: 2\nparallelism: 2\n"
        "search_space:\n  lr: {type: float, low: 0.001, high: 0.1}\njob: {entry_point: 'm:S'}\n"
    )
    result = runner.invoke(cli_sweep.app, ["start", str(path), "--wait"])
    assert result.exit_code == 0, result.output
    # THEN a line for each change, in order: trials started, trial 0 ended, the sweep ended
    assert "trial 0 started (lr=0.01)" in result.output
    assert "trial 0 COMPLETE val_loss=0.25" in result.output
    assert f"sweep {sub.sweep_id} COMPLETED: 2/2 trials ended, 0 running" in result.output
    assert result.output.count("trial 0 started") == 1  # an unchanged poll prints nothing
    # AND each was on stdout before the sweep ended, not held back for the end
    assert "trial 0 started" in printed_before_the_end[3]
    assert "trial 0 COMPLETE" in printed_before_the_end[4]
