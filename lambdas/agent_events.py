"""Lambda `agent_events`: applies what agents report (start, progress, checkpoints, the end).

Trigger: SQS `agent-events`, sent to by instances; batches with partial failures.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from respot.core.events import AgentReport
from respot.messages import AgentMessage

from lambdas._runtime import PoisonMessageError, control_plane, logger, sqs_batch


def _report(body: str) -> None:
    try:
        message = AgentMessage.model_validate_json(body)
    except ValidationError as exc:
        raise PoisonMessageError(f"not an agent message: {exc.errors()[0]['msg']}") from exc
    result = control_plane().apply(message.job_id, AgentReport(message))
    logger.debug(
        "agent",
        extra={"job_id": message.job_id, "kind": message.body.kind, "outcome": result.outcome},
    )


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """SQS batch -> one agent report per record."""
    return sqs_batch(event, context, _report, source="agent-events")
