"""A budget alert in the deployment's Slack channel (issue 26): a researcher's or a team's
spend this month crossed 50%, 80% or 100% of its monthly budget.

The admission pass decides and records each alert once (`respot.queue.budgets`); the
notifications queue carries it here (`budgets.alert_message`); `SlackNotifier.deliver_alert`
posts it as a top-level message in the deployment's channel (no job thread: it is about
everyone's jobs of that researcher or team).
"""

from __future__ import annotations

from respot.notify.cards import SlackPost, _context, _post, _section, escape, usd
from respot.queue.budgets import BudgetAction, BudgetAlert


def _what_happens(alert: BudgetAlert, action: BudgetAction) -> str:
    if alert.threshold < 100:
        then = "new jobs are held"
        if action is BudgetAction.HARD:
            then += " and running ones are checkpointed and stopped once paid in full"
        return f"At 100% its {then}."
    if action is BudgetAction.HARD:
        return (
            "Its new jobs are held, and its running jobs are checkpointed and stopped once "
            "what they paid reaches the budget (budget_action: hard)."
        )
    return "Its new jobs are held until the month ends or the platform team raises the budget."


def budget_card(alert: BudgetAlert, action: BudgetAction) -> SlackPost:
    """The alert's message: who, how much of what, and what happens at 100%."""
    who = f"team {alert.name}" if alert.kind == "team" else f"researcher {alert.name}"
    icon = ":rotating_light:" if alert.threshold >= 100 else ":warning:"
    head = (
        f"{icon} *Budget {alert.threshold}%*: {escape(who)} has spent {usd(alert.spent)} of "
        f"{usd(alert.budget)} in {alert.month} (UTC)"
    )
    text = (
        f"Budget {alert.threshold}%: {who} has spent {usd(alert.spent)} of "
        f"{usd(alert.budget)} in {alert.month}"
    )
    return _post(
        text,
        [
            _section(head),
            _context(
                escape(_what_happens(alert, action)),
                "spent counts what running jobs will bill by their estimated runtime "
                "(`respot budget`)",
            ),
        ],
    )
