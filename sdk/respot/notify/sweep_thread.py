"""A sweep's Slack thread: one card per sweep, edited in place, and a reply per finished trial.

Posted by the sweep Lambda itself, one sweep message at a time (its FIFO group), so the
thread needs no queue of its own. News is best effort: a Slack failure is logged and the
sweep goes on (`SweepEngine._post`); the card is brought up to date by the next message.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from respot.control.config import NotifyConfig
from respot.notify.cards import SlackPost, _context, _fields, _header, _post, _section, escape
from respot.notify.slack import slack_client
from respot.notify.token import SlackTokenSource
from respot.sweep.model import SweepRecord, SweepState, Trial, TrialState

log = logging.getLogger("respot.notify")

PARAMS_SHOWN = 8


def _params(params: dict[str, Any]) -> str:
    shown = [f"{k}={_value(v)}" for k, v in list(params.items())[:PARAMS_SHOWN]]
    if len(params) > PARAMS_SHOWN:
        shown.append(f"… {len(params) - PARAMS_SHOWN} more")
    return escape(", ".join(shown))


def _value(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _counts(record: SweepRecord) -> dict[TrialState, int]:
    counts = dict.fromkeys(TrialState, 0)
    for trial in record.trials:
        counts[trial.state] += 1
    return counts


def sweep_card(record: SweepRecord) -> SlackPost:
    """The sweep's status card: progress over the trials and the best so far."""
    spec = record.spec
    counts = _counts(record)
    ended = counts[TrialState.COMPLETE] + counts[TrialState.PRUNED] + counts[TrialState.FAIL]
    best = record.best()
    title = f"Sweep {spec.name}: {ended}/{spec.n_trials} trials"
    if record.state is not SweepState.RUNNING:
        title += f" · {record.state.value.lower()}"
    best_text = (
        f"trial {best.number}: *{escape(spec.metric)}={_value(best.value)}*\n{_params(best.params)}"
        if best
        else "none yet"
    )
    blocks = [
        _header(title),
        _fields(
            [
                ("Metric", f"{escape(spec.metric)} ({spec.direction})"),
                ("Best", best_text),
                ("Running", str(counts[TrialState.RUNNING])),
                (
                    "Ended",
                    f"{counts[TrialState.COMPLETE]} complete, {counts[TrialState.PRUNED]} "
                    f"pruned, {counts[TrialState.FAIL]} failed",
                ),
            ]
        ),
        _context(
            f"sweep `{escape(record.sweep_id)}`",
            f"by {escape(record.submission.submitted_by or 'unknown')}",
            f"sampler {spec.sampler.name}, pruner {spec.pruner.name}",
        ),
    ]
    return _post(title, blocks)


def trial_reply(record: SweepRecord, trial: Trial) -> SlackPost:
    """One finished trial, with the best so far."""
    metric = record.spec.metric
    if trial.state is TrialState.COMPLETE:
        head = f"Trial {trial.number} complete: {metric}={_value(trial.value)}"
    elif trial.state is TrialState.PRUNED and (trial.reason or "").startswith("stopped with"):
        head = f"Trial {trial.number} {trial.reason}"  # PRUNED in Optuna: its nearest state
    elif trial.state is TrialState.PRUNED:
        head = f"Trial {trial.number} pruned: {trial.reason or ''}"
    else:
        head = f"Trial {trial.number} failed: {trial.reason or 'no reason given'}"
    best = record.best()
    lines = [f"*{escape(head)}*", _params(trial.params)]
    if best is not None:
        lines.append(f"best so far: trial {best.number} ({escape(metric)}={_value(best.value)})")
    return _post(head, [_section("\n".join(lines)), _context(f"job `{escape(trial.job_id)}`")])


def final_reply(record: SweepRecord) -> SlackPost:
    """The sweep's end: the best trial and its parameters."""
    best = record.best()
    metric = record.spec.metric
    if best is None:
        head = f"Sweep {record.spec.name} {record.state.value.lower()}: no trial completed"
        body = escape(record.reason or "")
    else:
        head = (
            f"Sweep {record.spec.name} {record.state.value.lower()}: best is trial "
            f"{best.number}, {metric}={_value(best.value)}"
        )
        body = _params(best.params)
    return _post(head, [_section(f"*{escape(head)}*\n{body}")])


class SlackSweepNews:
    """Posts a sweep's card and replies; returns the thread so the sweep remembers it."""

    def __init__(
        self,
        *,
        tokens: SlackTokenSource,
        default_channel: str | None,
        base_url: str | None = None,
        client_factory: Callable[[str, str | None], WebClient] = slack_client,
    ) -> None:
        self.tokens = tokens
        self.default_channel = default_channel
        self.base_url = base_url
        self._client_factory = client_factory

    @classmethod
    def from_config(cls, config: NotifyConfig, *, session: Any = None) -> SlackSweepNews:
        """Build from the Lambda configuration (the same Slack token as job threads)."""
        if session is None:
            import boto3

            session = boto3.session.Session()
        return cls(
            tokens=SlackTokenSource(config.slack_token_parameter, session.client("ssm")),
            default_channel=config.slack_channel,
            base_url=config.slack_api_url,
        )

    def post(self, record: SweepRecord, finished: list[Trial]) -> dict[str, str] | None:
        """Edit (or post) the card, then one reply per finished trial, then the end."""
        token = self.tokens.get()
        channel = record.spec.job.slack_channel or self.default_channel
        if token is None or not channel:
            return None
        client = self._client_factory(token, self.base_url)
        card = sweep_card(record).payload()
        thread = dict(record.slack)
        if thread.get("channel") and thread.get("ts"):
            try:
                client.chat_update(channel=thread["channel"], ts=thread["ts"], **card)
            except SlackApiError as exc:
                log.warning("sweep %s: card update failed: %s", record.sweep_id, exc)
        else:
            posted = client.chat_postMessage(channel=channel, **card)
            thread = {"channel": str(posted["channel"]), "ts": str(posted["ts"])}
        for trial in sorted(finished, key=lambda t: t.number):
            reply = trial_reply(record, trial).payload()
            client.chat_postMessage(channel=thread["channel"], thread_ts=thread["ts"], **reply)
        if record.state is not SweepState.RUNNING and finished is not None:
            end = final_reply(record).payload()
            client.chat_postMessage(channel=thread["channel"], thread_ts=thread["ts"], **end)
        return thread
