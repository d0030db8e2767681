"""A job's Slack thread: the status card posted once and edited in place, news as replies.

`SlackNotifier.deliver(notification)` handles one notifications-queue message:
1. no token (Slack off), no job record or no channel: nothing to do, say why;
2. the job has a thread (`record.notify["slack"]`): edit its card with `chat.update`;
   if the card is gone (deleted by someone), start a new thread;
3. no thread yet: post the card with `chat.postMessage` and remember its channel id and ts on
   the job record (compare-and-set, re-applied on a fresh read if the control plane wrote
   meanwhile, so that it never undoes a transition);
4. post one reply per entry that has one (`cards.REPLY_KINDS`), in order, in the thread.
The card is edited before the replies so that a retried message re-posts as little as
possible: only a message with two replies that fails between them repeats one.

Failures: 429 is retried inside slack_sdk (`RateLimitErrorRetryHandler`, honouring
Retry-After); a refusal that no retry can fix raises `SlackPermanentError` (dead-letter it);
anything else (5xx, connection refused, timeouts, rate limiting past the retries) raises
`SlackTransientError` (let SQS deliver the message again).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler

from respot.aws.jobs import JobTable
from respot.control.config import NotifyConfig
from respot.core.job import JobRecord
from respot.notify.budget import budget_card
from respot.notify.cards import reply_for, status_card
from respot.notify.exceptions import NotifyError, SlackPermanentError, SlackTransientError
from respot.notify.notification import JobNotification
from respot.notify.token import SlackTokenSource
from respot.queue.budgets import BudgetAction, BudgetAlert

log = logging.getLogger("respot.notify")

HTTP_TIMEOUT_SECONDS = 10
RATE_LIMIT_RETRIES = 3  # 429s retried in the client, each after its Retry-After
NOTIFY_KEY = "slack"  # record.notify["slack"] = {"channel": <id>, "ts": <parent ts>}

# Refusals a retry cannot fix: the token, the channel or the message itself is wrong.
PERMANENT_ERRORS = frozenset(
    {
        "not_authed",
        "invalid_auth",
        "token_revoked",
        "token_expired",
        "account_inactive",
        "no_permission",
        "missing_scope",
        "not_allowed_token_type",
        "ekm_access_denied",
        "org_login_required",
        "team_access_not_granted",
        "channel_not_found",
        "not_in_channel",
        "is_archived",
        "restricted_action",
        "cant_update_message",
        "edit_window_closed",
        "msg_too_long",
        "no_text",
        "invalid_blocks",
        "invalid_blocks_format",
        "too_many_attachments",
        "invalid_arguments",
        "invalid_arg_name",
        "invalid_charset",
        "invalid_form_data",
        "invalid_json",
        "json_not_object",
        "unknown_method",
    }
)
AUTH_ERRORS = frozenset({"not_authed", "invalid_auth", "token_revoked", "token_expired"})
THREAD_GONE = frozenset({"message_not_found", "invalid_thread_ts", "thread_not_found"})


def utcnow() -> datetime:
    """Wall-clock time in UTC."""
    return datetime.now(UTC)


def slack_client(token: str, base_url: str | None = None) -> WebClient:
    """A WebClient that retries 429s after Retry-After (and connection errors once)."""
    kwargs: dict[str, Any] = {"token": token, "timeout": HTTP_TIMEOUT_SECONDS}
    if base_url:
        kwargs["base_url"] = base_url
    client = WebClient(**kwargs)
    client.retry_handlers.append(RateLimitErrorRetryHandler(max_retry_count=RATE_LIMIT_RETRIES))
    return client


@dataclass
class Delivery:
    """What one `deliver` did."""

    job_id: str
    posted_card: bool = False
    updated_card: bool = False
    replies: int = 0
    skipped: str | None = None  # why nothing was sent, if so


def classify(job_id: str, exc: Exception) -> NotifyError:
    """A Slack or network failure as a permanent or a transient delivery error."""
    if isinstance(exc, SlackApiError):
        status = exc.response.status_code
        if status == 429:
            return SlackTransientError(job_id, "rate limited by Slack beyond the retries")
        if status >= 500:
            return SlackTransientError(job_id, f"Slack answered HTTP {status}")
        error = str(exc.response.get("error") or f"HTTP {status}")
        if error in PERMANENT_ERRORS:
            return SlackPermanentError(job_id, f"Slack refused: {error}")
        return SlackTransientError(job_id, f"Slack refused: {error}")
    return SlackTransientError(job_id, f"cannot reach Slack: {type(exc).__name__}: {exc}")


class SlackNotifier:
    """Posts each job's news to its Slack thread."""

    def __init__(
        self,
        *,
        jobs: JobTable,
        tokens: SlackTokenSource,
        default_channel: str | None,
        base_url: str | None = None,
        prices: dict[str, float] | None = None,
        clock: Callable[[], datetime] = utcnow,
        client_factory: Callable[[str, str | None], WebClient] = slack_client,
    ) -> None:
        self.jobs = jobs
        self.tokens = tokens
        self.default_channel = default_channel
        self.base_url = base_url
        self.prices = prices or {}
        self.clock = clock
        self._client_factory = client_factory
        self._clients: dict[str, WebClient] = {}

    @classmethod
    def from_config(
        cls,
        config: NotifyConfig,
        *,
        session: Any = None,
        clients: dict[str, Any] | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> SlackNotifier:
        """Build the notifier and its AWS clients from the Lambda configuration."""
        clients = dict(clients or {})
        if session is None:
            import boto3

            session = boto3.session.Session()
        for name in ("dynamodb", "ssm"):
            clients.setdefault(name, session.client(name))
        return cls(
            jobs=JobTable(config.table_name, clients["dynamodb"]),
            tokens=SlackTokenSource(config.slack_token_parameter, clients["ssm"]),
            default_channel=config.slack_channel,
            base_url=config.slack_api_url,
            prices=config.on_demand_prices,
            clock=clock,
        )

    def deliver(self, note: JobNotification) -> Delivery:
        """Post `note` to its job's thread; raises `NotifyError` subclasses on failure."""
        token = self.tokens.get()
        if token is None:
            return Delivery(note.job_id, skipped="Slack notifications are off (no token)")
        record = self.jobs.get(note.job_id)
        if record is None:
            log.warning("job %s: no record, nothing to post", note.job_id)
            return Delivery(note.job_id, skipped="the job is not recorded")
        channel = record.spec.slack_channel or self.default_channel
        if not channel:
            return Delivery(note.job_id, skipped="no Slack channel configured for the job")
        try:
            return self._deliver(self._client(token), record, channel, note)
        except SlackApiError as exc:
            if exc.response.get("error") not in AUTH_ERRORS:
                raise classify(note.job_id, exc) from exc
            # A rotated token: read the parameter again and try once more with the new one.
            self.tokens.invalidate()
            fresh = self.tokens.get()
            if fresh is None or fresh == token:
                raise classify(note.job_id, exc) from exc
            log.info("job %s: the Slack token changed; trying again with the new one", note.job_id)
            record = self.jobs.get(note.job_id) or record
            try:
                return self._deliver(self._client(fresh), record, channel, note)
            except (SlackApiError, OSError) as again:
                raise classify(note.job_id, again) from again
        except NotifyError:
            raise
        except (OSError, TimeoutError) as exc:  # URLError, connection refused, read timeouts
            raise classify(note.job_id, exc) from exc

    def deliver_alert(self, alert: BudgetAlert, action: BudgetAction) -> Delivery:
        """Post a budget alert in the deployment's channel (a top-level message)."""
        name = f"budget {alert.key} {alert.threshold}%"
        token = self.tokens.get()
        if token is None:
            return Delivery(name, skipped="Slack notifications are off (no token)")
        if not self.default_channel:
            return Delivery(name, skipped="no Slack channel configured for the deployment")
        card = budget_card(alert, action).payload()
        try:
            self._client(token).chat_postMessage(channel=self.default_channel, **card)
        except SlackApiError as exc:
            if exc.response.get("error") not in AUTH_ERRORS:
                raise classify(name, exc) from exc
            self.tokens.invalidate()
            fresh = self.tokens.get()
            if fresh is None or fresh == token:
                raise classify(name, exc) from exc
            try:
                self._client(fresh).chat_postMessage(channel=self.default_channel, **card)
            except (SlackApiError, OSError) as again:
                raise classify(name, again) from again
        except (OSError, TimeoutError) as exc:
            raise classify(name, exc) from exc
        return Delivery(name, posted_card=True)

    def _client(self, token: str) -> WebClient:
        if token not in self._clients:
            self._clients = {token: self._client_factory(token, self.base_url)}
        return self._clients[token]

    def _deliver(
        self, client: WebClient, record: JobRecord, channel: str, note: JobNotification
    ) -> Delivery:
        done = Delivery(record.job_id)
        card = status_card(record, self.clock(), prices=self.prices).payload()
        thread = dict(record.notify.get(NOTIFY_KEY) or {})
        channel_id, ts = thread.get("channel"), thread.get("ts")
        if channel_id and ts:
            try:
                client.chat_update(channel=channel_id, ts=ts, **card)
                done.updated_card = True
            except SlackApiError as exc:
                if exc.response.get("error") not in THREAD_GONE:
                    raise
                log.warning(
                    "job %s: its Slack card %s is gone (%s); starting a new thread",
                    record.job_id,
                    ts,
                    exc.response.get("error"),
                )
                ts = None
        if not (channel_id and ts):
            posted = client.chat_postMessage(channel=channel, **card)
            channel_id, ts = str(posted["channel"]), str(posted["ts"])
            self._remember(record.job_id, {"channel": channel_id, "ts": ts})
            done.posted_card = True
        for entry in note.entries:
            reply = reply_for(entry, record, prices=self.prices)
            if reply is None:
                continue
            client.chat_postMessage(channel=channel_id, thread_ts=ts, **reply.payload())
            done.replies += 1
        return done

    def _remember(self, job_id: str, thread: dict[str, str]) -> None:
        """Keep the thread on the job record, touching nothing else of it."""

        def change(current: JobRecord | None) -> JobRecord | None:
            if current is None or current.notify.get(NOTIFY_KEY) == thread:
                return None
            return current.model_copy(update={"notify": {**current.notify, NOTIFY_KEY: thread}})

        self.jobs.update(job_id, change)
