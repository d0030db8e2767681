"""Lambda `submit`: records jobs published to the jobs topic and requests their first capacity.

Trigger: SQS `jobs` (SNS envelope bodies), batches with partial failures.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from lambdas import _activity
from lambdas._runtime import PoisonMessageError, control_plane, logger, sqs_batch
from respot.ec2events import unwrap_sns
from respot.messages import COMMAND_ADAPTER, JobSubmission
from respot.spec import describe_validation_error


def _submit(body: str) -> None:
    message = unwrap_sns(body)
    try:
        command = COMMAND_ADAPTER.validate_json(message)
    except ValidationError as exc:
        raise PoisonMessageError("; ".join(describe_validation_error(exc))) from exc
    if not isinstance(command, JobSubmission):
        raise PoisonMessageError(f"the submit queue got a {command.command!r} command")
    result = control_plane().submit(command)
    logger.info("submitted", extra={"job_id": command.job_id, "outcome": result.outcome})
    switch = _activity.switch()
    if switch is not None:  # a live job needs the pollers: always ensure "on" (raises to retry)
        switch.ensure_on()


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """SQS batch -> one submission per record."""
    return sqs_batch(event, context, _submit, source="jobs")
