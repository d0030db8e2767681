"""Interruption notices: the IMDS poller, the notice events and the deadlines they set.

The poller reads `spot/instance-action` and `events/recommendations/rebalance` from IMDS
(and, less often, the control plane's stop request for the attempt) and hands each new
notice to the agent; `deadlines` turns a notice's time into when the session must have
stopped and when the uploads must be done.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from respot.agent.imds import ImdsClient
from respot.agent.protocol import Notice
from respot.commands import contract

logger = logging.getLogger("respot.agent")

# EC2's warning when the notice carries no readable time; a notice whose time has (nearly)
# passed still gets MIN_NOTICE_SECONDS; a session that ignores the notice is stopped
# KILL_MARGIN_SECONDS before the end (shared with commands: respot.commands.contract).
DEFAULT_NOTICE_SECONDS = contract.DEFAULT_NOTICE_SECONDS
STOP_NOTICE_SECONDS = 60.0  # SIGTERM: systemd waits 90 s before SIGKILL
MIN_NOTICE_SECONDS = contract.MIN_NOTICE_SECONDS
KILL_MARGIN_SECONDS = contract.KILL_MARGIN_SECONDS
END_MARGIN_SECONDS = 10.0  # finish uploads this long before the end


@dataclass(frozen=True)
class InterruptionNotice:
    notice: Notice
    at: datetime | None  # when EC2 acts, if known
    # A return's stop (docs/agent.md, "The notice hold"): hold it from the session until the
    # spot successor is warm, at most this long (the control plane's limit). None: no hold.
    hold_seconds: float | None = None


@dataclass(frozen=True)
class StopRequest:
    """The control plane's request that this attempt checkpoint and stop (layout.control_key)."""

    reason: str
    hold_seconds: float | None = None


def parse_stop_request(body: bytes, now: datetime) -> StopRequest:
    """The control plane's stop request (respot.control.service, `StopAttempt`) as read now.

    Its hold counts from when the control plane wrote it (`at`), not from when this agent
    read it (up to a heartbeat later, or later still if reads failed): the hold ends by
    `at + hold_seconds` however late it is read, which is what a successor waiting for this
    attempt counts on (respot.agent.handoff). An `at` that is missing, unreadable or in the
    future leaves the hold whole. Anything unreadable is a plain stop.
    """
    try:
        data = json.loads(body)
    except ValueError:
        return StopRequest("stop requested")
    if not isinstance(data, dict):
        return StopRequest("stop requested")
    reason = str(data.get("reason") or "stop requested")
    hold = data.get("hold_seconds")
    if hold is None:
        return StopRequest(reason)
    if isinstance(hold, bool) or not isinstance(hold, int | float) or not 0 <= hold < 1e6:
        logger.warning("the stop request's hold_seconds %r is not a number: no hold", hold)
        return StopRequest(reason)
    try:
        at = datetime.fromisoformat(str(data.get("at")))
        elapsed = (now - (at if at.tzinfo else at.replace(tzinfo=UTC))).total_seconds()
    except (TypeError, ValueError):
        elapsed = 0.0
    left = max(0.0, float(hold) - max(0.0, elapsed))
    if elapsed > 0:
        logger.info("the stop was requested %.1fs ago: %.1fs of its hold left", elapsed, left)
    return StopRequest(reason, left)


@dataclass(frozen=True)
class RebalanceNotice:
    notice_time: str


class NoticePoller:
    """Polls IMDS for the spot interruption notice and rebalance recommendations, and (less
    often) the control plane's stop request for this attempt (a planned change of market)."""

    def __init__(
        self,
        imds: ImdsClient,
        *,
        every_seconds: float,
        emit: Any,
        control: Callable[[], StopRequest | None] | None = None,
        control_every_seconds: float = 60.0,
    ) -> None:
        self._imds = imds
        self._every = every_seconds
        self._emit = emit
        self._control = control
        self._control_every = control_every_seconds
        self._control_next = 0.0
        self._stop = threading.Event()
        self._seen_action = False
        self._seen_rebalance: str | None = None
        self._thread = threading.Thread(target=self._run, name="imds-notices", daemon=True)

    def start(self) -> NoticePoller:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2 * self._every + 5)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll_once()
            self._stop.wait(self._every)

    def poll_once(self) -> None:
        # The two IMDS paths are polled independently: one failing (a 500, a timeout, an
        # unreadable document) must not hide a notice on the other.
        if not self._seen_action:
            try:
                action = self._imds.instance_action()
            except Exception as exc:
                logger.warning("polling IMDS spot/instance-action failed: %s", exc)
                action = None
            if action is not None:
                self._seen_action = True
                notice: Notice = "spot-interruption" if action.action == "terminate" else "stop"
                logger.warning("IMDS: spot %s at %s", action.action, action.time)
                self._emit(InterruptionNotice(notice, action.time))
        try:
            rebalance = self._imds.rebalance_notice()
        except Exception as exc:
            logger.warning("polling IMDS events/recommendations/rebalance failed: %s", exc)
            rebalance = None
        if rebalance is not None and rebalance != self._seen_rebalance:
            self._seen_rebalance = rebalance
            logger.warning("IMDS: rebalance recommendation at %s", rebalance)
            self._emit(RebalanceNotice(rebalance))
        if self._control is None or self._seen_action or time.monotonic() < self._control_next:
            return
        self._control_next = time.monotonic() + self._control_every
        try:
            request = self._control()
        except Exception as exc:
            logger.warning("reading the control plane's requests failed: %s", exc)
            return
        if request is not None:
            self._seen_action = True
            logger.warning("the control plane asks this attempt to stop: %s", request.reason)
            self._emit(stop_notice(request.hold_seconds))


def stop_notice(hold_seconds: float | None = None) -> InterruptionNotice:
    """A "stop" notice given now: the session has STOP_NOTICE_SECONDS from when it is told."""
    stop_at = datetime.now(UTC).timestamp() + STOP_NOTICE_SECONDS
    return InterruptionNotice("stop", datetime.fromtimestamp(stop_at, UTC), hold_seconds)


def deadlines(at: datetime | None) -> tuple[float, float]:
    """(stop the session by, finish uploads by) on the monotonic clock, for a notice."""
    # The local runtime scales the two minutes down to a few seconds: trust the time given.
    remaining = contract.notice_seconds(at, datetime.now(UTC))
    now = time.monotonic()
    kill_at = now + remaining - contract.kill_margin(remaining)
    end_by = now + remaining - min(END_MARGIN_SECONDS, remaining * 0.1)
    return kill_at, end_by
