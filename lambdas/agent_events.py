"""Lambda `agent_events`: applies what agents report (start, progress, checkpoints, the end).

Trigger: SQS `agent-events`, sent to by instances; batches with partial failures. On AWS every
message must come from the instance it speaks for: SQS stamps each message with the sender's
`<role id>:<session name>`, and an instance profile's session is named after the instance.
"""

from __future__ import annotations

import os
from typing import Any

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from pydantic import ValidationError

from lambdas._runtime import PoisonMessageError, control_plane, logger, sqs_batch
from respot.control.config import ENV_AGENT_ROLE_ID
from respot.core.events import AgentReport
from respot.wire.messages import AgentMessage


def check_sender(
    message: AgentMessage,
    sender_id: str | None,
    role_id: str | None,
    satellite_role_ids: tuple[str, ...] = (),
) -> None:
    """Refuse a message not sent by the instance it names (no check without a role id).

    The instance's role is the home fleet's or, for an instance in a satellite region, that
    satellite's (`ControlPlane.satellite_role_ids`, read from the satellites' parameters).
    """
    if not role_id:
        return
    expected = {f"{role}:{message.instance_id}" for role in (role_id, *satellite_role_ids)}
    if sender_id not in expected:
        raise PoisonMessageError(
            f"agent message for {message.job_id} names {message.instance_id} but was sent by "
            f"{sender_id!r}; only that instance's role session may speak for it"
        )


def _report(record: SQSRecord) -> None:
    try:
        message = AgentMessage.model_validate_json(record.body)
    except ValidationError as exc:
        raise PoisonMessageError(f"not an agent message: {exc.errors()[0]['msg']}") from exc
    plane = control_plane()
    check_sender(
        message,
        record.attributes.sender_id,
        os.environ.get(ENV_AGENT_ROLE_ID),
        plane.satellite_role_ids,
    )
    result = plane.apply(message.job_id, AgentReport(message))
    logger.debug(
        "agent",
        extra={"job_id": message.job_id, "kind": message.body.kind, "outcome": result.outcome},
    )


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """SQS batch -> one agent report per record."""
    return sqs_batch(event, context, _report, source="agent-events", pass_record=True)
