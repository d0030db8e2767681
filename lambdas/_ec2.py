"""The shared body of the three EventBridge-triggered Lambdas: parse, find the job, apply."""

from __future__ import annotations

from typing import Any

from lambdas import _activity
from lambdas._runtime import control_plane, logger
from respot.aws.ec2events import EventShapeError, parse_ec2_event
from respot.core.states import JobState

LIVE_STATES = frozenset(s.value for s in JobState if not s.is_terminal())


def handle_ec2_event(event: dict[str, Any]) -> dict[str, Any]:
    """Apply one EC2 event; events for instances respot does not own are ignored."""
    try:
        parsed = parse_ec2_event(event)
    except EventShapeError as exc:
        # Retrying a malformed event cannot help; EventBridge would only send it again.
        logger.warning(
            "ignoring malformed event: %s",
            exc,
            extra={"event_id": event.get("id")} if isinstance(event, dict) else None,
        )
        return {"outcome": f"ignored: {exc}"}
    if parsed is None:
        return {"outcome": "ignored: nothing to do"}
    result = control_plane().instance_event(parsed)
    if result is None:
        return {"outcome": "ignored: not a respot instance"}
    logger.info(
        "ec2 event",
        extra={"job_id": result.job_id, "outcome": result.outcome, "event": result.event},
    )
    if result.state in LIVE_STATES:
        _activity.keep_on()  # a deploy may have disabled the pollers this job needs
    return {"job_id": result.job_id, "outcome": result.outcome, "state": result.state}
