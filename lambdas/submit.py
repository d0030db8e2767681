"""Lambda `submit`: records jobs published to the jobs topic and requests their first capacity.

Trigger: SQS `jobs` (SNS envelope bodies, filter command=submit|sweep), batches with partial
failures. A `sweep` command records a sweep and kicks it (`lambdas.sweep.start_sweep`).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from lambdas import _activity
from lambdas._runtime import PoisonMessageError, command_name, control_plane, logger, sqs_batch
from respot.ec2events import unwrap_sns
from respot.messages import COMMAND_ADAPTER, JobSubmission
from respot.spec import describe_validation_error


def _submit(body: str) -> None:
    message = unwrap_sns(body)
    if command_name(message) == "sweep":
        from lambdas.sweep import start_sweep

        start_sweep(message)
        _ensure_pollers_on()
        return
    try:
        command = COMMAND_ADAPTER.validate_json(message)
    except ValidationError as exc:
        raise PoisonMessageError("; ".join(describe_validation_error(exc))) from exc
    if not isinstance(command, JobSubmission):
        raise PoisonMessageError(f"the submit queue got a {command.command!r} command")
    if command.sweep is not None:
        # Trial jobs are submitted by the sweep Lambda itself, never through the topic.
        raise PoisonMessageError(
            f"job {command.job_id} claims to be trial {command.sweep.trial} of sweep "
            f"{command.sweep.sweep_id}; only respot's sweep function submits trials"
        )
    result = control_plane().submit(command)
    logger.info("submitted", extra={"job_id": command.job_id, "outcome": result.outcome})
    _ensure_pollers_on()


def _ensure_pollers_on() -> None:
    switch = _activity.switch()
    if switch is not None:  # a live job needs the pollers: always ensure "on" (raises to retry)
        switch.ensure_on()


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """SQS batch -> one submission per record."""
    return sqs_batch(event, context, _submit, source="jobs")
