"""The demo's claim, as a test: the PyTorch digits job, interrupted twice through the local
runtime, ends with bit-identical weights to the same job trained without interruption."""

from __future__ import annotations

import json

import pytest

from infra.local.demo import run_demo, summary_json

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_interrupted_digits_job_matches_the_uninterrupted_weights() -> None:
    # GIVEN a smaller model than the demo's, so that the test is quick, trained for twice the
    # epochs so that the notice holds (a few seconds each) cannot finish it, interrupted twice
    result = run_demo(
        hyperparameters={"hidden": 256, "checkpoint_every": 200, "epochs": 140},
        interruptions=2,
        timeout_seconds=150.0,
        echo=False,
    )
    # THEN it completes, resumed twice from the step it stopped at, with identical weights
    summary = json.loads(summary_json(result))
    assert summary["state"] == "COMPLETED", summary
    assert summary["interruptions"] == 2
    assert len(summary["resumed_from_steps"]) == 2, f"{summary}\n{result.slack_thread}"
    assert summary["resumed_from_steps"] == sorted(summary["resumed_from_steps"])
    assert summary["lost_steps"] == 0
    assert summary["weights_identical_to_uninterrupted"] is True
    for changeover in summary["changeovers"]:
        # The replacement was asked for on the notice (EC2's, or the agent's report of it),
        # not once the instance died (how many seconds that took is a figure of
        # bench/interruptions.py, not of a test).
        assert changeover["replaced_on_notice"] is True, summary
    # AND the team's Slack thread tells it: the final card, then the news down to the cost
    card, *replies = result.slack_thread.splitlines()
    assert card == "*:white_check_mark: digits-demo: COMPLETED*"
    assert sum("Resumed" in line for line in replies) == 2
    assert "% saved" in replies[-2]  # the completed reply, above its context line
