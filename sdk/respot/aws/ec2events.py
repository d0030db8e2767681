"""EventBridge events from EC2 and the SNS envelope, parsed into the core's events.

Field names are strict (only the documented `detail-type`, `instance-id`, ...), values are
lenient: AWS documentation samples carry placeholders (`"time": "yyyy-mm-ddThh:mm:ssZ"`,
`"instance-action": "action"`) and sometimes no `version`; none of that may crash a handler.
The instance id is read from `detail.instance-id`, never from `resources`. The event's
`time` travels on as `at`, so the core can tell an event older than the attempt it names.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from respot.core.events import InstanceDown, InstanceUp, InterruptionNotice
from respot.exceptions import RespotError
from respot.wire.limits import check_json_text

SPOT_FULFILLMENT = "EC2 Spot Instance Request Fulfillment"
SPOT_INTERRUPTION = "EC2 Spot Instance Interruption Warning"
REBALANCE = "EC2 Instance Rebalance Recommendation"
STATE_CHANGE = "EC2 Instance State-change Notification"
DOWN_STATES = frozenset({"shutting-down", "terminated", "stopping", "stopped"})


class EventShapeError(RespotError, ValueError):
    """The event is not one respot handles, or lacks what respot needs."""


class _Detail(BaseModel):
    # Only the documented (hyphenated) names: `instance_id` in place of `instance-id` is a
    # malformed event, not a spelling to accept (no populate_by_name on AWS event models).
    model_config = ConfigDict(extra="ignore")

    instance_id: str = Field(alias="instance-id", min_length=1, max_length=64)


class FulfillmentDetail(_Detail):
    """detail of EC2 Spot Instance Request Fulfillment."""

    spot_instance_request_id: str | None = Field(default=None, alias="spot-instance-request-id")


class InterruptionDetail(_Detail):
    """detail of EC2 Spot Instance Interruption Warning."""

    instance_action: str | None = Field(default=None, alias="instance-action")


class StateChangeDetail(_Detail):
    """detail of EC2 Instance State-change Notification."""

    state: str


class Ec2Event(BaseModel):
    """The EventBridge envelope, as far as respot reads it."""

    model_config = ConfigDict(extra="ignore")

    id: str | None = None
    detail_type: str = Field(alias="detail-type")
    source: str
    time: str | None = None
    region: str | None = None
    detail: dict[str, Any]


def parse_ec2_event(raw: Any) -> InstanceUp | InterruptionNotice | InstanceDown | None:
    """The core event for an EC2 EventBridge event; None for events respot does not act on.

    Raises `EventShapeError` for input that is not an EC2 event at all.
    """
    if isinstance(raw, str | bytes):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise EventShapeError(f"not JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise EventShapeError(f"an event is a JSON object, got {type(raw).__name__}")
    try:
        event = Ec2Event.model_validate(raw)
        if event.source != "aws.ec2":
            raise EventShapeError(f"source {event.source!r} is not aws.ec2")
        at = event_time(event.time)
        match event.detail_type:
            case "EC2 Spot Instance Request Fulfillment":
                f = FulfillmentDetail.model_validate(event.detail)
                return InstanceUp(
                    f.instance_id,
                    None,
                    "fulfillment",
                    spot_request_id=f.spot_instance_request_id,
                    at=at,
                )
            case "EC2 Spot Instance Interruption Warning":
                i = InterruptionDetail.model_validate(event.detail)
                return InterruptionNotice(
                    i.instance_id, None, "interruption", i.instance_action, at=at
                )
            case "EC2 Instance Rebalance Recommendation":
                r = _Detail.model_validate(event.detail)
                return InterruptionNotice(r.instance_id, None, "rebalance", at=at)
            case "EC2 Instance State-change Notification":
                s = StateChangeDetail.model_validate(event.detail)
                if s.state == "running":
                    return InstanceUp(s.instance_id, None, "running", at=at)
                if s.state in DOWN_STATES:
                    return InstanceDown(s.instance_id, None, s.state, at=at)
                return None  # pending: nothing to do yet
    except ValidationError as exc:
        raise EventShapeError(f"malformed EC2 event: {exc.errors()[0]['msg']}") from exc
    raise EventShapeError(f"detail-type {event.detail_type!r} is not one respot handles")


def event_time(value: str | None) -> datetime | None:
    """The event's `time` as an aware UTC datetime; None if absent or a placeholder."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None  # documentation samples say "yyyy-mm-ddThh:mm:ssZ"
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def unwrap_sns(body: str) -> str:
    """The message inside an SNS notification envelope (SQS body), or `body` if not wrapped."""
    return sns_envelope(body)[0]


def sns_envelope(body: str) -> tuple[str, str | None]:
    """(message, SNS MessageId) of an SNS notification envelope; (body, None) if not wrapped.

    The body is checked for size and depth first (`InputLimitError`), so a hostile body is
    refused with its reason instead of crashing the parser.
    """
    notification = sns_notification(body)
    return notification.message, notification.message_id


class SnsNotification(BaseModel):
    """What the control plane reads of an SNS notification delivered to SQS: the published
    text, SNS's `MessageId`, and the `Timestamp` SNS stamped when the message was published
    (None when absent or not a time; None too for a body that is not an envelope)."""

    model_config = ConfigDict(frozen=True)

    message: str
    message_id: str | None = None
    published_at: datetime | None = None


def sns_notification(body: str) -> SnsNotification:
    """The `SnsNotification` of an SQS body (the body itself as the message if not wrapped).

    The body is checked for size and depth first (`InputLimitError`). `Timestamp` is SNS's
    publication time ("2012-03-29T05:12:16.901Z"); it is the same on every redelivery of the
    message, which is why a command's proof is judged by it (`respot.identity.verify`).
    """
    check_json_text(body, what="SQS message body")
    try:
        data = json.loads(body)
    except ValueError:
        return SnsNotification(message=body)
    if isinstance(data, dict) and data.get("Type") == "Notification" and "Message" in data:
        message = data["Message"]
        text = message if isinstance(message, str) else json.dumps(message)
        message_id = data.get("MessageId")
        return SnsNotification(
            message=text,
            message_id=message_id if isinstance(message_id, str) else None,
            published_at=_sns_time(data.get("Timestamp")),
        )
    return SnsNotification(message=body)


def _sns_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or len(value) > 40:
        return None
    return event_time(value)
