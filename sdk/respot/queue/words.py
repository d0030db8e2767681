"""The words every view uses for a held job (`respot queue`, `ls`, `status`, the Slack card):
its position, what it waits for and its estimated start, said the same way everywhere."""

from __future__ import annotations

from datetime import datetime

NOT_PLANNED = "not planned yet: the next admission pass (at most one tick) plans it"
UNKNOWN_START = "unknown"


def position_text(position: int | None) -> str:
    """'#3', or '-' for a job that is not a candidate (it waits for `after:` or its queue)."""
    return f"#{position}" if position else "-"


def start_text(estimate: datetime | str | None) -> str:
    """The estimated start as `respot queue` prints it: ISO time in UTC, or 'unknown'."""
    if estimate is None:
        return UNKNOWN_START
    if isinstance(estimate, str):
        estimate = datetime.fromisoformat(estimate)
    return estimate.strftime("%Y-%m-%d %H:%M UTC")


def wait_line(position: int | None, reason: str | None, estimate: datetime | str | None) -> str:
    """'#3 · <what it waits for> · estimated start <when>' in one line."""
    return (
        f"{position_text(position)} · {reason or NOT_PLANNED} · "
        f"estimated start {start_text(estimate)}"
    )
