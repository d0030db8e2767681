"""A budget alert on the notifications queue becomes one message in the deployment's channel
(issue 26): the notify Lambda tells it from a job's news by its `kind`; a malformed one is
dead-lettered with the reason."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

import lambdas._runtime as runtime
from lambdas import notify
from respot.queue.budgets import BudgetAction, BudgetAlert, alert_message
from tests.notify.conftest import CHANNEL, Bench
from tests.notify.test_notify_lambda import CONTEXT, fifo_event


@pytest.fixture
def letters(bench: Bench) -> Iterator[list[tuple[str, str, str]]]:
    found: list[tuple[str, str, str]] = []
    runtime.install(None, lambda body, reason, source: found.append((body, reason, source)))
    notify.install(bench.notifier)
    yield found
    notify.install(None)
    runtime.install(None)


def _team() -> str:
    return f"nlp-{secrets.token_hex(3)}"


def _posted(bench: Bench, text: str) -> list[Any]:
    return [m for m in bench.slack.workspace.top_level(CHANNEL) if text in m.text]


def test_an_alert_is_posted_once_in_the_deployment_s_channel(
    bench: Bench, letters: list[Any]
) -> None:
    team = _team()
    alert = BudgetAlert(f"team:{team}", 80, 4012.5, 5000.0, "2026-11")
    body = json.dumps(alert_message(alert, BudgetAction.HARD))
    response = notify.handler(fifo_event(("budget-alerts", body)), CONTEXT)
    assert response == {"batchItemFailures": []} and letters == []
    (message,) = _posted(bench, f"team {team}")
    assert "Budget 80%" in message.text and "$4,012.50 of $5,000.00" in message.text
    # the blocks say what happens at 100% under `hard`
    blocks = json.dumps(message.blocks)
    assert "checkpointed and stopped" in blocks


def test_a_malformed_alert_is_dead_lettered_with_the_reason(
    bench: Bench, letters: list[Any]
) -> None:
    team = _team()
    doc = alert_message(BudgetAlert(f"team:{team}", 50, 1.0, 2.0, "2026-11"), BudgetAction.HOLD)
    doc["threshold"] = 75
    response = notify.handler(fifo_event(("budget-alerts", json.dumps(doc))), CONTEXT)
    assert response == {"batchItemFailures": []}
    assert len(letters) == 1 and "threshold 75" in letters[0][1]
    assert _posted(bench, f"team {team}") == []
