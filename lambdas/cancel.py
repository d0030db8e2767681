"""Lambda `cancel`: cancels jobs on a researcher's request and terminates their instances.

Trigger: SQS `cancel` (SNS envelope bodies, filter command=cancel|sweep-stop). A `sweep-stop`
stops a sweep (`lambdas.sweep.stop_sweep`).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from lambdas._runtime import PoisonMessageError, command_name, control_plane, logger, sqs_batch
from respot.ec2events import unwrap_sns
from respot.messages import COMMAND_ADAPTER, CancelCommand
from respot.spec import describe_validation_error


def _cancel(body: str) -> None:
    message = unwrap_sns(body)
    if command_name(message) == "sweep-stop":
        from lambdas.sweep import stop_sweep

        stop_sweep(message)
        return
    try:
        command = COMMAND_ADAPTER.validate_json(message)
    except ValidationError as exc:
        raise PoisonMessageError("; ".join(describe_validation_error(exc))) from exc
    if not isinstance(command, CancelCommand):
        raise PoisonMessageError(f"the cancel queue got a {command.command!r} command")
    result = control_plane().cancel(command)
    logger.info("cancel", extra={"job_id": command.job_id, "outcome": result.outcome})


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """SQS batch -> one cancellation per record."""
    return sqs_batch(event, context, _cancel, source="cancel")
