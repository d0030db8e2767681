"""Budget alerts in the control plane (issue 26), on the moto server: an admission pass tells
Slack (through the notifications queue) when a researcher's or team's month crosses 50%, 80%
and 100% of its budget, each once a month, however many passes run, twice or at once.

The alert is recorded by the pass's conditional write of the queue ledger before it is
sent; the spy counts what the control plane queued (SQS's own FIFO deduplication would hide
a repeat within five minutes, so the count is taken before it)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from respot.aws.queueledger import LedgerState, QueueLedger
from respot.control.queuecommand import QueueSettingsCommand
from respot.control.service import ControlPlane, Notifications
from respot.core.job import AttemptEnd
from respot.core.states import JobState
from respot.queue.budgets import BudgetAction, BudgetAlert
from tests.control.test_admission import Account, RacingLedger
from tests.handlers.test_handlers import Env, env, submission

__all__ = ["env"]

ADMIN = "arn:aws:iam::123456789012:role/platform"
ANN = "arn:aws:iam::123456789012:user/ann"


class Spy:
    """Records each alert the control plane queues, and queues it for real."""

    def __init__(self, control: ControlPlane) -> None:
        self.sent: list[tuple[str, int]] = []
        real = control.notifications.budget_alert

        def send(alert: BudgetAlert, action: BudgetAction) -> bool:
            self.sent.append((alert.key, alert.threshold))
            return real(alert, action)

        control.notifications.budget_alert = send  # type: ignore[method-assign]


@pytest.fixture
def budgeted(env: Env) -> Iterator[tuple[Env, Spy]]:
    """The queue on, ann's budget $10 a month, and a spy on the alerts queued."""
    env.control.settings = replace(env.control.settings, admission=True)
    env.control.admission.enabled = True
    env.control.admission.account = Account(env)
    spy = Spy(env.control)
    _settings(env, {"enabled": True, "researcher_budgets": {"ann": 10}})
    yield env, spy


def _settings(env: Env, settings: dict[str, Any]) -> None:
    env.control.set_queue_settings(
        QueueSettingsCommand(settings=settings, requested_at=datetime.now(UTC), requested_by=ADMIN),
        admins=(ADMIN,),
    )


def _billed(env: Env, usd: float, *, at: datetime | None = None) -> str:
    """A completed job of ann's that billed `usd` (one hour at that price) ending `at`."""
    end = at or datetime.now(UTC)
    sub = submission().model_copy(update={"submitted_by": ANN})
    env.control.submit(sub)
    record = env.control.jobs.get(sub.job_id)
    assert record is not None and record.current is not None
    att = record.current.model_copy(
        update={
            "price_per_hour": usd,
            "launched_at": end - timedelta(hours=1),
            "ended_at": end,
            "end": AttemptEnd.COMPLETED,
        }
    )
    env.control.jobs.save(
        record.model_copy(
            update={"attempts": [att], "state": JobState.COMPLETED, "finished_at": end}
        ),
        expected_version=record.version,
    )
    gone = env.live_instances(sub.job_id)
    if gone:  # its instance ends with it (the quota's room is the next job's)
        env.clients["ec2"].terminate_instances(InstanceIds=gone)
    return sub.job_id


def test_each_threshold_is_sent_once_as_the_month_s_spend_crosses_it(
    budgeted: tuple[Env, Spy],
) -> None:
    env, spy = budgeted
    key = f"researcher:{ANN}"
    # GIVEN ann billed $4 (40%): nothing to say
    _billed(env, 4.0)
    env.control.admit("the tick")
    assert spy.sent == []
    # WHEN she bills $2 more (60%) THEN the 50% alert is queued, once, however many passes
    _billed(env, 2.0)
    for _ in range(3):
        env.control.admit("the tick")
        env.control.reconcile()
    assert spy.sent == [(key, 50)]
    # AND the ledger records it for this month
    ledger = QueueLedger(env.local.table_name, env.clients["dynamodb"]).read()
    month = datetime.now(UTC).strftime("%Y-%m")
    assert ledger.alerts == {"month": month, "sent": {key: 50}}
    # WHEN she passes 100% at once (from 60% to 110%) THEN one alert, for 100%
    _billed(env, 5.0)
    env.control.admit("the tick")
    env.control.admit("the tick")
    assert spy.sent == [(key, 50), (key, 100)]


def test_two_passes_racing_send_an_alert_once(budgeted: tuple[Env, Spy]) -> None:
    env, spy = budgeted
    # GIVEN ann's spend at 80% and no pass since (the job's record is written after its
    # submission's pass)
    _billed(env, 8.0)
    # WHEN one pass reads the ledger, a whole rival pass (another Lambda container, with its
    # own notifications) runs, then the first one goes on to write
    other = ControlPlane(
        jobs=env.control.jobs,
        capacity=env.control.capacity,
        s3=env.control.s3,
        bucket=env.control.bucket,
        settings=env.control.settings,
        notifications=Notifications(
            env.control.notifications.queue_url, env.control.notifications.client
        ),
        admission=None,
    )
    other.admission.account = Account(env)
    other.admission.enabled = True
    rival = Spy(other)
    real = env.control.admission.ledger
    env.control.admission.ledger = RacingLedger(real, lambda: other.admit("the rival"))
    env.control.admit("the first")
    # THEN the 80% alert was queued once in all: by the rival, whose write won
    assert rival.sent + spy.sent == [(f"researcher:{ANN}", 80)]


def test_a_new_month_alerts_again(budgeted: tuple[Env, Spy]) -> None:
    env, spy = budgeted
    key = f"researcher:{ANN}"
    now = datetime.now(UTC)
    _billed(env, 6.0, at=now)
    env.control.admit("the tick")
    assert spy.sent == [(key, 50)]
    # WHEN the month turns (the control plane's clock) and ann bills $5 in the new month
    nxt = (now.replace(day=1) + timedelta(days=32)).replace(day=1, hour=1)
    env.control.clock = lambda: nxt
    _billed(env, 5.0, at=nxt)
    env.control.admit("the tick")
    # THEN last month's $6 no longer counts and 50% is alerted again, for the new month
    assert spy.sent == [(key, 50), (key, 50)]
    ledger = QueueLedger(env.local.table_name, env.clients["dynamodb"]).read()
    assert ledger.alerts["month"] == nxt.strftime("%Y-%m")


def test_the_alert_reaches_the_notifications_queue(budgeted: tuple[Env, Spy]) -> None:
    env, spy = budgeted
    _billed(env, 8.5)
    env.control.admit("the tick")
    assert spy.sent == [(f"researcher:{ANN}", 80)]
    url = env.control.notifications.queue_url
    assert url
    bodies = []
    for _ in range(10):
        got = env.clients["sqs"].receive_message(QueueUrl=url, MaxNumberOfMessages=10)
        bodies += [m["Body"] for m in got.get("Messages", [])]
        if not got.get("Messages"):
            break
    alerts = [b for b in bodies if '"budget-alert"' in b]
    assert (
        len(alerts) == 1 and f'"researcher:{ANN}"' in alerts[0] and '"threshold": 80' in alerts[0]
    )


class FlakySqs:
    """The notifications queue's client, whose budget alerts fail while `failing` (an SQS
    outage between the ledger's write and the queueing)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.failing = True

    def send_message(self, **kwargs: Any) -> Any:
        if self.failing and '"budget-alert"' in kwargs["MessageBody"]:
            raise ConnectionError("SQS unreachable")
        return self.inner.send_message(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _queued_alerts(env: Env) -> list[str]:
    """The budget alerts on the notifications queue (read off it)."""
    url = env.control.notifications.queue_url
    assert url
    bodies: list[str] = []
    for _ in range(10):
        got = env.clients["sqs"].receive_message(QueueUrl=url, MaxNumberOfMessages=10)
        bodies += [m["Body"] for m in got.get("Messages", [])]
        if not got.get("Messages"):
            break
    return [b for b in bodies if '"budget-alert"' in b]


def _pending(env: Env) -> dict[str, Any]:
    ledger = QueueLedger(env.local.table_name, env.clients["dynamodb"]).read()
    return dict(ledger.alerts.get("pending") or {})


def test_an_alert_whose_queueing_failed_is_sent_by_a_later_pass_once(
    budgeted: tuple[Env, Spy],
) -> None:
    env, spy = budgeted
    key = f"researcher:{ANN}"
    flaky = FlakySqs(env.control.notifications.client)
    env.control.notifications.client = flaky
    t0 = datetime.now(UTC)
    env.control.clock = lambda: t0
    # GIVEN ann at 85% and a pass whose queueing of the 80% alert fails
    _billed(env, 8.5)
    env.control.admit("the tick")
    assert spy.sent == [(key, 80)] and _queued_alerts(env) == []
    # THEN the ledger keeps it pending (claimed, not confirmed)
    assert _pending(env)[key]["threshold"] == 80
    # WHEN SQS is back and a pass runs at once (its claimant could still be sending it)
    flaky.failing = False
    env.control.admit("a job ended")
    assert spy.sent == [(key, 80)]
    # WHEN the next tick comes THEN it is sent again, once, and confirmed
    env.control.clock = lambda: t0 + timedelta(seconds=61)
    env.control.admit("the tick")
    assert spy.sent == [(key, 80), (key, 80)]
    assert _pending(env) == {}
    queued = _queued_alerts(env)
    assert len(queued) == 1 and '"threshold": 80' in queued[0]
    # AND later passes send nothing more
    for minutes in (2, 3):
        env.control.clock = lambda m=minutes: t0 + timedelta(minutes=m)
        env.control.admit("the tick")
    assert spy.sent == [(key, 80), (key, 80)]


def _rival(env: Env) -> tuple[ControlPlane, Spy]:
    """Another Lambda container's control plane on the same deployment, its own alerts spied."""
    other = ControlPlane(
        jobs=env.control.jobs,
        capacity=env.control.capacity,
        s3=env.control.s3,
        bucket=env.control.bucket,
        settings=env.control.settings,
        notifications=Notifications(
            env.control.notifications.queue_url, env.control.notifications.client
        ),
        admission=None,
    )
    other.admission.account = Account(env)
    other.admission.enabled = True
    other.clock = env.control.clock
    return other, Spy(other)


def test_two_passes_racing_retry_a_failed_alert_once(budgeted: tuple[Env, Spy]) -> None:
    env, spy = budgeted
    key = f"researcher:{ANN}"
    flaky = FlakySqs(env.control.notifications.client)
    env.control.notifications.client = flaky
    t0 = datetime.now(UTC)
    env.control.clock = lambda: t0
    # GIVEN the 80% alert pending after a failed queueing
    _billed(env, 8.5)
    env.control.admit("the tick")
    assert spy.sent == [(key, 80)] and key in _pending(env)
    flaky.failing = False
    # WHEN, a minute on, a pass reads the ledger and a whole rival pass runs before it writes
    env.control.clock = lambda: t0 + timedelta(seconds=61)
    other, rival = _rival(env)
    real = env.control.admission.ledger
    env.control.admission.ledger = RacingLedger(real, lambda: other.admit("the rival"))
    env.control.admit("the first")
    # THEN it was sent again once in all (by the rival, whose write won), and confirmed
    assert spy.sent[1:] + rival.sent == [(key, 80)]
    assert _pending(env) == {} and len(_queued_alerts(env)) == 1


class SendingLedger(QueueLedger):
    """A ledger whose first write that claims an alert lets a rival pass run right after it,
    while the claimant has not queued it yet."""

    def __init__(self, inner: QueueLedger, rival: Any) -> None:
        super().__init__(inner.table_name, inner.client)
        self.rival = rival
        self.raced = False

    def write(self, state: LedgerState) -> LedgerState:
        written = super().write(state)
        if not self.raced and state.alerts.get("pending"):
            self.raced = True
            self.rival()
        return written


def test_a_pass_that_runs_while_another_sends_an_alert_does_not_send_it_too(
    budgeted: tuple[Env, Spy],
) -> None:
    env, spy = budgeted
    key = f"researcher:{ANN}"
    # GIVEN ann at 85%; WHEN a pass claims the 80% alert and, before it queues it, a rival
    # pass (the next second) runs whole
    _billed(env, 8.5)
    t0 = datetime.now(UTC)
    env.control.clock = lambda: t0
    other, rival = _rival(env)
    other.clock = lambda: t0 + timedelta(seconds=1)
    real = env.control.admission.ledger
    env.control.admission.ledger = SendingLedger(real, lambda: other.admit("the rival"))
    env.control.admit("the first")
    # THEN the alert was queued once, by the claimant, and confirmed
    assert spy.sent == [(key, 80)] and rival.sent == []
    assert _pending(env) == {} and len(_queued_alerts(env)) == 1
