"""Budgets act with the team's queue off (issue 26), on the moto server: the reconcile tick's
handler runs a pass whenever a budget is set, whatever the queue's state, so the spend is
counted, the 50/80/100% alerts go out and `budget_action: hard` stops; with no budget set (and
the queue off, nothing held) the tick runs no pass at all."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from lambdas import reconcile
from respot.aws.queueledger import QueueLedger
from respot.core.states import JobState
from tests.control.test_budget_alerts import ANN, Spy, _billed, _settings
from tests.control.test_budget_hard import _control_object, _running_and_paid
from tests.handlers.test_handlers import CONTEXT, Env, env

__all__ = ["env"]

TICK = {"source": "aws.events", "detail-type": "Scheduled Event"}


class Passes:
    """Counts the admission passes the control plane runs."""

    def __init__(self, env: Env) -> None:
        self.count = 0
        real = env.control.admission.run

        def run(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return real(*args, **kwargs)

        env.control.admission.run = run  # type: ignore[method-assign]


def test_with_the_queue_off_the_tick_counts_the_spend_and_alerts(env: Env) -> None:
    # GIVEN the queue off (the stack's default, and the admin's setting) and ann's budget $10
    spy = Spy(env.control)
    _settings(env, {"enabled": False, "researcher_budgets": {"ann": 10}})
    assert not env.control._queue_on(read=True)
    # AND she billed $8.50 since (80%), with no pass after it
    _billed(env, 8.5)
    assert spy.sent == []
    # WHEN the minute's tick runs (the Lambda handler the schedule invokes)
    reconcile.handler(TICK, CONTEXT)
    # THEN the spend is counted (what `respot budget` reads) and the 80% alert is queued once
    key = f"researcher:{ANN}"
    ledger = QueueLedger(env.local.table_name, env.clients["dynamodb"]).read()
    assert ledger.spend.get(key) == 8.5 and ledger.budgets.get(key) == 10
    assert spy.sent == [(key, 80)]
    # AND the next ticks send nothing again
    reconcile.handler(TICK, CONTEXT)
    reconcile.handler(TICK, CONTEXT)
    assert spy.sent == [(key, 80)]
    assert ledger.alerts == {"month": datetime.now(UTC).strftime("%Y-%m"), "sent": {key: 80}}


def test_with_the_queue_off_the_tick_stops_whoever_paid_a_hard_budget(env: Env) -> None:
    # GIVEN the queue off, ann's budget $10 with `hard`, and her job running (launched at
    # once: nothing held it) after paying $12
    _settings(env, {"enabled": False, "researcher_budgets": {"ann": 10}, "budget_action": "hard"})
    job_id = _running_and_paid(env, 12.0)
    assert _control_object(env, job_id) is None
    # WHEN the tick runs
    reconcile.handler(TICK, CONTEXT)
    # THEN her job's agent is asked to checkpoint and stop, with the reason
    said = _control_object(env, job_id)
    assert said is not None and said["notice"] == "stop"
    assert "has paid $12.00 of its $10.00" in str(said["reason"])
    record = env.control.jobs.get(job_id)
    assert record is not None and record.state is JobState.RUNNING
    assert record.policy["stopping"]["cause"] == "budget"


def test_with_no_budget_and_the_queue_off_the_tick_runs_no_pass(env: Env) -> None:
    # GIVEN the queue off, no budget, a job running (not held)
    _settings(env, {"enabled": False})
    _running_and_paid(env, 12.0)
    passes = Passes(env)
    # WHEN the tick runs THEN no admission pass runs (its one ledger read is all it costs)
    reconcile.handler(TICK, CONTEXT)
    assert passes.count == 0
    # WHEN an admin sets a budget (the queue still off) THEN each tick runs one
    _settings(env, {"enabled": False, "team_budgets": {"default": 100}})
    passes.count = 0
    reconcile.handler(TICK, CONTEXT)
    assert passes.count == 1
