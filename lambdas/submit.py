"""Lambda `submit`: records jobs published to the jobs topic and requests their first capacity.

Trigger: SQS `jobs` (SNS envelope bodies), batches with partial failures.
"""

from __future__ import annotations

from typing import Any

from lambdas import _activity
from lambdas._commands import read_command
from lambdas._runtime import PoisonMessageError, control_plane, logger, sqs_batch
from respot.exceptions import DuplicateJobError
from respot.messages import JobSubmission


def _submit(body: str) -> None:
    command = read_command(body, JobSubmission)
    try:
        result = control_plane().submit(command)
    except DuplicateJobError as exc:
        logger.warning("duplicate job id", extra={"job_id": command.job_id, "reason": str(exc)})
        raise PoisonMessageError(str(exc)) from exc
    logger.info("submitted", extra={"job_id": command.job_id, "outcome": result.outcome})
    switch = _activity.switch()
    if switch is not None:  # a live job needs the pollers: always ensure "on" (raises to retry)
        switch.ensure_on()


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """SQS batch -> one submission per record."""
    return sqs_batch(event, context, _submit, source="jobs")
