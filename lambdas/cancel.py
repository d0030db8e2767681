"""Lambda `cancel`: cancels jobs on a researcher's request and terminates their instances.

Trigger: SQS `cancel` (SNS envelope bodies, filter command=cancel|sweep-stop). A `sweep-stop`
stops a sweep (`lambdas.sweep.stop_sweep`).
"""

from __future__ import annotations

from typing import Any

from lambdas._commands import admin_principals, published_command, read_command
from lambdas._runtime import PoisonMessageError, control_plane, logger, sqs_batch
from respot.exceptions import NotOwnerError
from respot.messages import CancelCommand


def _cancel(body: str) -> None:
    if published_command(body) == "sweep-stop":
        from lambdas.sweep import stop_sweep

        stop_sweep(body)
        return
    command = read_command(body, CancelCommand)
    try:
        result = control_plane().cancel(command, admins=admin_principals())
    except NotOwnerError as exc:
        logger.warning("cancel refused", extra={"job_id": command.job_id, "reason": str(exc)})
        raise PoisonMessageError(str(exc)) from exc
    logger.info("cancel", extra={"job_id": command.job_id, "outcome": result.outcome})


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """SQS batch -> one cancellation per record."""
    return sqs_batch(event, context, _cancel, source="cancel")
