"""Lambda `launch_retries`: one job's look (its tick), when the lifecycle asked for it later.

Trigger: SQS `launch-retries` (standard; each message delayed until it is due), batches with
partial failures. A paced launch whose reserved launch token is due in a few seconds is
launched again by this look (`respot.control.retries`, `respot.aws.pacing`); the minute's
tick would do the same, up to a minute later.
"""

from __future__ import annotations

from typing import Any

from lambdas._runtime import control_plane, logger, sqs_batch
from respot.control.retries import look_of
from respot.core.events import ReconcileTick


def _look(body: str) -> None:
    """One job's tick (a malformed message is dropped, logged: only the control functions
    send here, and the minute's tick looks at the job anyway)."""
    try:
        job_id, attempt = look_of(body)
    except ValueError as exc:
        logger.warning("launch-retries: %s; dropped", exc)
        return
    control = control_plane()
    result = control.apply(job_id, ReconcileTick(control.clock()))
    logger.info(
        "looked again", extra={"job_id": job_id, "attempt": attempt, "outcome": result.outcome}
    )


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """The looks of one SQS batch."""
    return sqs_batch(event, context, _look, source="launch-retries")
