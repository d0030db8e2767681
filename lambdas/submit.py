"""Lambda `submit`: records jobs published to the jobs topic and requests their first capacity.

Trigger: SQS `jobs` (SNS envelope bodies, filter command=submit|sweep), batches with partial
failures. A `sweep` command records a sweep and kicks it (`lambdas.sweep.start_sweep`).
"""

from __future__ import annotations

from typing import Any

from lambdas import _activity
from lambdas._commands import published_command, read_command
from lambdas._runtime import PoisonMessageError, control_plane, logger, sqs_batch
from respot.exceptions import DuplicateJobError
from respot.messages import JobSubmission


def _submit(body: str) -> None:
    if published_command(body) == "sweep":
        from lambdas.sweep import start_sweep

        start_sweep(body)
        _ensure_pollers_on()
        return
    command = read_command(body, JobSubmission)
    if command.sweep is not None:
        # Trial jobs are submitted by the sweep Lambda itself, never through the topic.
        raise PoisonMessageError(
            f"job {command.job_id} claims to be trial {command.sweep.trial} of sweep "
            f"{command.sweep.sweep_id}; only respot's sweep function submits trials"
        )
    try:
        result = control_plane().submit(command)
    except DuplicateJobError as exc:
        logger.warning("duplicate job id", extra={"job_id": command.job_id, "reason": str(exc)})
        raise PoisonMessageError(str(exc)) from exc
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
