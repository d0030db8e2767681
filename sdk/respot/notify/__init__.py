"""Slack notifications: one living thread per job, posted by the `notify` Lambda.

The control plane queues each commit's timeline entries (`JobNotification`) on a FIFO queue;
`SlackNotifier` turns them into a status card edited in place and replies in the thread
(`cards`). See docs/slack.md.
"""

from respot.notify.cards import REPLY_KINDS, SlackPost, reply_for, status_card
from respot.notify.exceptions import NotifyError, SlackPermanentError, SlackTransientError
from respot.notify.notification import JobNotification
from respot.notify.slack import Delivery, SlackNotifier, classify, slack_client
from respot.notify.token import SlackTokenSource

__all__ = [
    "REPLY_KINDS",
    "Delivery",
    "JobNotification",
    "NotifyError",
    "SlackNotifier",
    "SlackPermanentError",
    "SlackPost",
    "SlackTokenSource",
    "SlackTransientError",
    "classify",
    "reply_for",
    "slack_client",
    "status_card",
]
