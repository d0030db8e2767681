"""Budgets, pure (issue 26): which alerts are due (50/80/100%, each once a month), and which
running jobs the `hard` action stops; the setting `budget_action` checked with the field named."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from respot.queue.budgets import (
    MAX_TRIES,
    RETRY_AFTER,
    AlertsSent,
    BudgetAction,
    Running,
    alert_from_message,
    alert_message,
    confirmed,
    due_alerts,
    hard_stops,
)
from respot.queue.settings import QueueSettingsError, parse_settings, settings_dict

ANN = "researcher:arn:aws:iam::123456789012:user/ann"
NOV = datetime(2026, 11, 20, 12, tzinfo=UTC)


def _walk(spends: list[float], budget: float = 100.0) -> list[int]:
    """The thresholds alerted as ann's spend moves through `spends`, the record carried over."""
    sent, out = AlertsSent(), []
    for spend in spends:
        alerts, sent = due_alerts(
            {ANN: spend}, {ANN: budget}, AlertsSent.from_doc(sent.to_doc()), NOV
        )
        out += [a.threshold for a in alerts]
    return out


def test_each_threshold_is_alerted_once_as_the_spend_crosses_it() -> None:
    assert _walk([10, 49.99, 50, 51, 79, 80, 95, 100, 130, 130]) == [50, 80, 100]


def test_a_spend_that_jumps_past_several_thresholds_gives_one_alert_for_the_highest() -> None:
    assert _walk([10, 85, 90, 99]) == [80]
    assert _walk([0, 120]) == [100]


def test_the_same_pass_repeated_alerts_nothing_new() -> None:
    # GIVEN a pass that alerted 80% and recorded it
    alerts, sent = due_alerts({ANN: 81}, {ANN: 100}, AlertsSent(), NOV)
    assert [a.threshold for a in alerts] == [80]
    # WHEN the same event runs the pass again (a duplicate delivery) on the recorded state
    again, sent_again = due_alerts({ANN: 81}, {ANN: 100}, sent, NOV)
    # THEN nothing is due and the record is the same (no write)
    assert again == [] and sent_again == sent


def test_a_new_month_starts_with_nothing_sent() -> None:
    _, sent = due_alerts({ANN: 100}, {ANN: 100}, AlertsSent(), NOV)
    assert sent.month == "2026-11" and sent.sent == {ANN: 100}
    december = datetime(2026, 12, 1, 0, 5, tzinfo=UTC)
    alerts, sent = due_alerts({ANN: 60}, {ANN: 100}, sent, december)
    assert [a.threshold for a in alerts] == [50]
    assert sent.month == "2026-12" and sent.sent == {ANN: 50}


def test_each_budget_is_counted_on_its_own_and_a_raised_budget_does_not_repeat() -> None:
    team = "team:nlp"
    alerts, sent = due_alerts({ANN: 60, team: 400}, {ANN: 100, team: 500}, AlertsSent(), NOV)
    assert sorted((a.key, a.threshold) for a in alerts) == [(ANN, 50), (team, 80)]
    # the platform team raises ann's budget: 60 of 200 is 30%, nothing; then 170 of 200: 80%
    alerts, sent = due_alerts({ANN: 60, team: 400}, {ANN: 200, team: 500}, sent, NOV)
    assert alerts == []
    alerts, _ = due_alerts({ANN: 170, team: 400}, {ANN: 200, team: 500}, sent, NOV)
    assert [(a.key, a.threshold) for a in alerts] == [(ANN, 80)]


def test_no_budget_no_alert_and_a_zero_budget_with_nothing_spent_is_quiet() -> None:
    assert due_alerts({ANN: 1000}, {}, AlertsSent(), NOV)[0] == []
    assert due_alerts({}, {ANN: 0}, AlertsSent(), NOV)[0] == []
    assert [a.threshold for a in due_alerts({ANN: 0.5}, {ANN: 0}, AlertsSent(), NOV)[0]] == [100]


def test_an_alert_crosses_the_queue_and_a_malformed_one_is_named() -> None:
    (alert,), _ = due_alerts({"team:nlp": 4100}, {"team:nlp": 5000}, AlertsSent(), NOV)
    back, action = alert_from_message(alert_message(alert, BudgetAction.HARD))
    assert back == alert and action is BudgetAction.HARD and back.name == "nlp"
    with pytest.raises(ValueError, match="threshold 70"):
        alert_from_message({**alert_message(alert, BudgetAction.HOLD), "threshold": 70})
    with pytest.raises(ValueError, match="without spent"):
        doc = alert_message(alert, BudgetAction.HOLD)
        del doc["spent"]
        alert_from_message(doc)


def test_hard_stops_the_jobs_of_whoever_paid_the_whole_budget() -> None:
    jobs = [
        Running("a1", "arn:ann", "vision"),
        Running("b1", "arn:bo", "nlp"),
        Running("c1", "arn:cy", "vision"),
    ]
    paid = {"researcher:arn:ann": 10.0, "team:vision": 10.0, "team:nlp": 99.0}
    budgets = {"researcher:arn:ann": 10.0, "team:nlp": 100.0}
    stops = hard_stops(jobs, paid, budgets)
    # ann paid her $10 of $10: her job stops; nlp paid 99 of 100: bo's goes on; cy has no
    # budget and vision none
    assert [j for j, _ in stops] == ["a1"]
    assert "researcher arn:ann has paid $10.00 of its $10.00" in stops[0][1]
    assert "budget_action is hard" in stops[0][1]
    budgets["team:vision"] = 5.0
    assert [j for j, _ in hard_stops(jobs, paid, budgets)] == ["a1", "c1"]


def test_budget_action_is_hold_by_default_and_a_bad_one_is_named() -> None:
    _, limits = parse_settings({"enabled": True})
    assert limits.budget_action is BudgetAction.HOLD
    _, limits = parse_settings({"budget_action": "hard"})
    assert limits.budget_action is BudgetAction.HARD
    assert parse_settings(settings_dict(True, limits))[1] == limits
    for bad in ("stop", 1, ["hard"]):
        with pytest.raises(QueueSettingsError, match=r"budget_action: .* is not hold or hard"):
            parse_settings({"budget_action": bad})


def test_a_pending_alert_is_claimed_again_once_its_claim_is_old_until_confirmed() -> None:
    # GIVEN a pass claimed the 80% alert (its write won) but never confirmed it was queued
    (alert,), record = due_alerts({ANN: 81}, {ANN: 100}, AlertsSent(), NOV)
    record = AlertsSent.from_doc(record.to_doc())  # through the ledger's JSON
    assert record.pending[ANN]["threshold"] == 80 and record.pending[ANN]["tries"] == 1
    # WHEN a pass runs before RETRY_AFTER: its claimant may be sending it; nothing
    soon = NOV + RETRY_AFTER - timedelta(seconds=1)
    again, same = due_alerts({ANN: 81}, {ANN: 100}, record, soon)
    assert again == [] and same == record
    # WHEN one runs after it: the same alert, claimed again at its time
    later = NOV + RETRY_AFTER
    (retry,), record2 = due_alerts({ANN: 81}, {ANN: 100}, record, later)
    assert retry == alert and retry.claimed_at == later.isoformat()
    assert record2.pending[ANN]["tries"] == 2 and record2.sent == {ANN: 80}
    # AND confirming the first claim changes nothing (the second claimant confirms its own)
    assert confirmed(record2, [alert]) == record2
    done = confirmed(record2, [retry])
    assert done.pending == {} and done.sent == {ANN: 80}
    assert due_alerts({ANN: 81}, {ANN: 100}, done, later + timedelta(hours=1))[0] == []


def test_a_newer_alert_replaces_a_pending_one_and_a_pending_one_outlives_the_month() -> None:
    _, record = due_alerts({ANN: 60}, {ANN: 100}, AlertsSent(), NOV)
    (alert,), record = due_alerts({ANN: 90}, {ANN: 100}, record, NOV + timedelta(hours=1))
    assert alert.threshold == 80 and record.pending[ANN]["threshold"] == 80
    # the month turns with it still pending, nothing new spent: it is sent (it names its month)
    december = datetime(2026, 12, 1, 0, 5, tzinfo=UTC)
    (old,), record = due_alerts({}, {ANN: 100}, record, december)
    assert (old.threshold, old.month) == (80, "2026-11")
    assert record.month == "2026-12" and record.sent == {}


def test_a_pending_alert_is_dropped_after_max_tries() -> None:
    (alert,), record = due_alerts({ANN: 81}, {ANN: 100}, AlertsSent(), NOV)
    stale = AlertsSent(record.month, record.sent, {ANN: alert.pending_doc(MAX_TRIES)})
    alerts, after = due_alerts({ANN: 81}, {ANN: 100}, stale, NOV + RETRY_AFTER)
    assert alerts == [] and after.pending == {} and after.sent == {ANN: 80}
