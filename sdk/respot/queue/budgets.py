"""Monthly budgets, pure: which alerts are due, and which running jobs the `hard` action stops.

Budgets are keyed as the admission pass writes them: "researcher:<principal ARN>" and
"team:<name>". `spend` is what `respot budget` shows (this month's bill from the cost ledger
plus what admitted live jobs will still bill by their estimated runtime); `paid` is the bill
alone.

- Alerts (`due_alerts`): Slack is told when a budget's spend crosses 50%, 80% and 100%, each
  threshold once per calendar month (UTC). What was alerted is kept per month as the highest
  threshold for each budget (`AlertsSent`); a spend that jumps past several thresholds at
  once gives one alert, for the highest. At least once, without doubles: an alert is first
  *claimed* (`pending`, with the time of the claim) by the caller's conditional write, so of
  two racing passes only the one whose write won sends it; once it is queued, the caller
  confirms it (`confirmed`: pending no more). An alert still pending `RETRY_AFTER` after its
  claim (its queueing failed, or the pass died before confirming) is claimed again by the
  next pass's conditional write and sent again, at most `MAX_TRIES` times (then dropped,
  said in the log). A pending alert outlives the month turn; a newer alert of the same
  budget replaces it (it says more).
- The `hard` action (`hard_stops`): a researcher's or team's admitted jobs are checkpointed
  and stopped once what they *paid* this month reaches the budget. Not on the projection:
  a job admitted under budget is not stopped for what it has not billed yet (the projection
  holds new jobs, `admission._over_budget`, and alerts).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

log = logging.getLogger("respot.queue.budgets")

THRESHOLDS = (50, 80, 100)  # percent of a monthly budget at which Slack is told
# A claimed alert not confirmed this long after its claim is sent again: far longer than one
# queueing takes (milliseconds), so a racing pass never resends an alert the claimant is
# still sending; shorter than the minute's tick, so the next tick retries a failed one.
RETRY_AFTER = timedelta(seconds=30)
MAX_TRIES = 1440  # claims of one alert before it is dropped (a day of minute ticks)


class BudgetAction(enum.StrEnum):
    """What happens at 100% of a budget (queue setting `budget_action`)."""

    HOLD = "hold"  # new jobs stay HELD with the reason (the default)
    HARD = "hard"  # and admitted ones are checkpointed and stopped


def month_of(now: datetime) -> str:
    """The calendar month (UTC) budgets count in: "2026-11"."""
    return f"{now.year:04d}-{now.month:02d}"


@dataclass(frozen=True)
class AlertsSent:
    """The alerts of `month`: each budget key's highest threshold alerted (`sent`), and the
    alerts claimed but not yet confirmed queued (`pending`, by budget key: the alert's
    fields, `claimed_at` (ISO) and `tries`)."""

    month: str = ""
    sent: Mapping[str, int] = field(default_factory=dict)
    pending: Mapping[str, Mapping[str, object]] = field(default_factory=dict)

    def to_doc(self) -> dict[str, object]:
        """JSON for the ledger (`pending` only when something is)."""
        doc: dict[str, object] = {"month": self.month, "sent": dict(self.sent)}
        if self.pending:
            doc["pending"] = {k: dict(v) for k, v in self.pending.items()}
        return doc

    @classmethod
    def from_doc(cls, doc: Mapping[str, object] | None) -> AlertsSent:
        """Read back `to_doc`'s JSON (an empty record if none)."""
        if not doc:
            return cls()
        sent = doc.get("sent") or {}
        pending = doc.get("pending") or {}
        assert isinstance(sent, Mapping) and isinstance(pending, Mapping)
        return cls(
            month=str(doc.get("month") or ""),
            sent={str(k): int(v) for k, v in sent.items()},
            pending={str(k): dict(v) for k, v in pending.items()},
        )


@dataclass(frozen=True)
class BudgetAlert:
    """One alert: `key`'s spend crossed `threshold` percent of its budget in `month`.

    `claimed_at`: when the pass that sends it claimed it (ISO; what `confirmed` matches)."""

    key: str  # "researcher:<arn>" or "team:<name>"
    threshold: int
    spent: float
    budget: float
    month: str
    claimed_at: str = field(default="", compare=False)

    def pending_doc(self, tries: int) -> dict[str, object]:
        """The alert as `AlertsSent.pending` keeps it."""
        return {
            "threshold": self.threshold,
            "spent": self.spent,
            "budget": self.budget,
            "month": self.month,
            "claimed_at": self.claimed_at,
            "tries": tries,
        }

    @property
    def kind(self) -> str:
        """ "researcher" or "team"."""
        return self.key.split(":", 1)[0]

    @property
    def name(self) -> str:
        """The researcher's principal ARN or the team's name."""
        return self.key.split(":", 1)[1]


def percent(spent: float, budget: float) -> float:
    """Spend as a percentage of the budget (a budget of 0: 100% as soon as it exists)."""
    return 100.0 if budget <= 0 else 100.0 * spent / budget


def due_alerts(
    spend: Mapping[str, float],
    budgets: Mapping[str, float],
    sent: AlertsSent,
    now: datetime,
) -> tuple[list[BudgetAlert], AlertsSent]:
    """The alerts to send now (claimed) and the record to write, conditionally, before
    sending them: the caller sends them only if that write won.

    A new month starts with nothing sent. For each budget, the highest threshold its spend
    reached is alerted if it is above the highest already alerted this month; lower ones it
    jumped past are not sent separately. A budget lowered or raised mid-month keeps what was
    sent (nothing is repeated; a higher threshold reached later is still alerted). Each alert
    due is claimed at `now` (`pending`); so is, again, each pending one whose claim is
    `RETRY_AFTER` old (its queueing failed or was never confirmed), up to `MAX_TRIES`."""
    month = month_of(now)
    record = dict(sent.sent) if sent.month == month else {}
    pending = {k: dict(v) for k, v in sent.pending.items()}
    claimed = now.isoformat()
    alerts: list[BudgetAlert] = []
    for key in sorted(budgets):
        budget = budgets[key]
        spent = spend.get(key, 0.0)
        if budget <= 0 and spent <= 0:
            continue  # a budget of 0 holds every job; nothing was spent to alert about
        reached = [t for t in THRESHOLDS if percent(spent, budget) >= t]
        if not reached or reached[-1] <= record.get(key, 0):
            continue
        record[key] = reached[-1]
        alert = BudgetAlert(key, reached[-1], round(spent, 2), budget, month, claimed)
        pending[key] = alert.pending_doc(1)  # replaces an older pending one: this says more
        alerts.append(alert)
    fresh = {a.key for a in alerts}
    for key in sorted(pending):
        doc = pending[key]
        if key in fresh:
            continue
        at = datetime.fromisoformat(str(doc["claimed_at"]))
        if now - at < RETRY_AFTER:
            continue  # its claimant may be sending it now
        tries = int(doc.get("tries", 1))  # type: ignore[call-overload]
        if tries >= MAX_TRIES:
            log.warning("budget alert %s %s%% dropped after %d tries", key, doc["threshold"], tries)
            del pending[key]
            continue
        alert = BudgetAlert(
            key,
            int(doc["threshold"]),  # type: ignore[call-overload]
            float(doc["spent"]),  # type: ignore[arg-type]
            float(doc["budget"]),  # type: ignore[arg-type]
            str(doc["month"]),
            claimed,
        )
        pending[key] = alert.pending_doc(tries + 1)
        alerts.append(alert)
    return alerts, AlertsSent(month, record, pending)


def confirmed(record: AlertsSent, alerts: Iterable[BudgetAlert]) -> AlertsSent:
    """`record` without the pending alerts among `alerts` (queued now): each only if it is
    still the claim that was sent (a pass that claimed it again since keeps its claim)."""
    pending = {k: dict(v) for k, v in record.pending.items()}
    for alert in alerts:
        doc = pending.get(alert.key)
        if (
            doc is not None
            and doc.get("claimed_at") == alert.claimed_at
            and doc.get("threshold") == alert.threshold
            and doc.get("month") == alert.month
        ):
            del pending[alert.key]
    return AlertsSent(record.month, record.sent, pending)


@dataclass(frozen=True)
class Running:
    """An admitted job that may be billing: its id, owner and team."""

    job_id: str
    researcher: str
    team: str


def hard_stops(
    jobs: Iterable[Running], paid: Mapping[str, float], budgets: Mapping[str, float]
) -> list[tuple[str, str]]:
    """(job id, reason) for each job whose researcher or team has paid its whole budget."""
    out = []
    for job in jobs:
        for who, key in (
            (f"researcher {job.researcher}", f"researcher:{job.researcher}"),
            (f"team {job.team}", f"team:{job.team}"),
        ):
            budget = budgets.get(key)
            if budget is None or paid.get(key, 0.0) < budget:
                continue
            out.append(
                (
                    job.job_id,
                    f"budget: {who} has paid ${paid.get(key, 0.0):.2f} of its ${budget:.2f} "
                    "this month (UTC) and the platform team's budget_action is hard: "
                    "checkpointed and stopped",
                )
            )
            break
    return out


ALERT_MESSAGE = "budget-alert"  # the `kind` of a budget alert on the notifications queue


def alert_message(alert: BudgetAlert, action: BudgetAction) -> dict[str, object]:
    """The notifications-queue body of one alert (the notifier posts it to the channel)."""
    return {
        "kind": ALERT_MESSAGE,
        "key": alert.key,
        "threshold": alert.threshold,
        "spent": alert.spent,
        "budget": alert.budget,
        "month": alert.month,
        "action": action.value,
    }


def alert_from_message(doc: Mapping[str, object]) -> tuple[BudgetAlert, BudgetAction]:
    """Read back `alert_message`'s body; `ValueError` naming what is wrong."""
    try:
        key = str(doc["key"])
        if not key.startswith(("researcher:", "team:")):
            raise ValueError(f"key {key!r} is not researcher:<arn> or team:<name>")
        threshold = int(doc["threshold"])  # type: ignore[call-overload]
        if threshold not in THRESHOLDS:
            raise ValueError(f"threshold {threshold} is not one of {THRESHOLDS}")
        alert = BudgetAlert(
            key=key,
            threshold=threshold,
            spent=float(doc["spent"]),  # type: ignore[arg-type]
            budget=float(doc["budget"]),  # type: ignore[arg-type]
            month=str(doc["month"]),
        )
        return alert, BudgetAction(str(doc.get("action") or BudgetAction.HOLD.value))
    except KeyError as exc:
        raise ValueError(f"a budget alert without {exc.args[0]}") from None
