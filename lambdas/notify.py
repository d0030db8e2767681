"""Lambda `notify`: posts each job's news to the job's Slack thread, and budget alerts
(`{"kind": "budget-alert", ...}`, respot.queue.budgets) to the deployment's channel.

Trigger: SQS FIFO `notifications` (message group = job id, so one job's messages come one at
a time and in order). A message Slack will never take (bad token, unknown or archived
channel, too long...) goes to the dead-letter queue with the reason; one that failed for a
passing reason (Slack down, 5xx, rate limited beyond the retries) is left on the queue and
delivered again after the visibility timeout. Both are logged with the job id. Nothing here
can delay or fail a job: the control plane only queued the message.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from lambdas._runtime import PoisonMessageError, logger, sqs_batch
from respot.control.config import NotifyConfig
from respot.notify import (
    JobNotification,
    SlackNotifier,
    SlackPermanentError,
    SlackTransientError,
)
from respot.queue.budgets import ALERT_MESSAGE, alert_from_message

_factory: Callable[[], SlackNotifier] | None = None
_notifier: SlackNotifier | None = None


def install(factory: Callable[[], SlackNotifier] | None) -> None:
    """Use `factory` to build the notifier from now on (None: from the environment)."""
    global _factory, _notifier  # noqa: PLW0603 - one per container
    _factory = factory
    _notifier = None


def notifier() -> SlackNotifier:
    """The container's notifier, built once (its token is cached with a short TTL)."""
    global _notifier  # noqa: PLW0603 - one per container
    if _notifier is None:
        _notifier = (
            _factory()
            if _factory is not None
            else SlackNotifier.from_config(NotifyConfig.from_env())
        )
    return _notifier


def _deliver_alert(doc: dict[str, Any]) -> None:
    try:
        alert, action = alert_from_message(doc)
    except ValueError as exc:
        raise PoisonMessageError(f"not a budget alert: {exc}") from exc
    try:
        done = notifier().deliver_alert(alert, action)
    except SlackPermanentError as exc:
        logger.error("budget alert %s cannot be sent: %s", alert.key, exc.reason)
        raise PoisonMessageError(str(exc)) from exc
    except SlackTransientError as exc:
        logger.warning("budget alert %s not sent yet, SQS will retry: %s", alert.key, exc.reason)
        raise
    if done.skipped:
        logger.info("budget alert %s: %s", alert.key, done.skipped)


def _deliver(body: str) -> None:
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and doc.get("kind") == ALERT_MESSAGE:
        _deliver_alert(doc)
        return
    try:
        note = JobNotification.model_validate_json(body)
    except ValidationError as exc:
        raise PoisonMessageError(f"not a job notification: {exc.errors()[0]['msg']}") from exc
    try:
        done = notifier().deliver(note)
    except SlackPermanentError as exc:
        logger.error(
            "Slack message for job %s cannot be sent: %s",
            note.job_id,
            exc.reason,
            extra={"job_id": note.job_id, "version": note.version},
        )
        raise PoisonMessageError(str(exc)) from exc
    except SlackTransientError as exc:
        logger.warning(
            "Slack message for job %s not sent yet, SQS will retry: %s",
            note.job_id,
            exc.reason,
            extra={"job_id": note.job_id, "version": note.version},
        )
        raise
    if done.skipped:
        logger.info("job %s: %s", note.job_id, done.skipped, extra={"job_id": note.job_id})


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """SQS FIFO batch -> one Slack delivery per record, in order per job."""
    return sqs_batch(event, context, _deliver, source="notifications", fifo=True)
