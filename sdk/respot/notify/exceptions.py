"""Errors of the Slack notifier: one base class and the two ways a delivery can fail."""

from __future__ import annotations

from respot.exceptions import RespotError


class NotifyError(RespotError):
    """A job's news could not be posted to Slack."""

    def __init__(self, job_id: str, reason: str) -> None:
        super().__init__(f"job {job_id}: {reason}")
        self.job_id = job_id
        self.reason = reason


class SlackPermanentError(NotifyError):
    """Slack refused for a reason a retry cannot fix (bad token, no channel, too long...)."""


class SlackTransientError(NotifyError):
    """Slack is down, slow or rate limiting beyond the retries: try the message again later."""
