"""Lambda `sweep`: moves Optuna sweeps on, one message of a sweep at a time.

Trigger: SQS FIFO `sweep-events` (message group = sweep id), fed by
- the commands Lambda: a `kick` when a researcher's sweep is recorded (`start_sweep` below),
  a `stop` when its owner stops it (`stop_sweep` below);
- the control plane: a trial job's new metric values and its end (`respot.control.sweeps`).
Each message goes to `SweepEngine.handle` (`respot.sweep.engine`): tell the study, prune,
ask for the next trials and submit them as respot jobs, post to the sweep's Slack thread.
A message that can never be handled (not JSON, an unknown sweep) is dead-lettered with the
reason; anything else is retried by SQS, in order within its sweep.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter, ValidationError

from lambdas._runtime import (
    PoisonMessageError,
    control_plane,
    current_function,
    logger,
    sqs_batch,
)
from respot.wire.messages import CancelCommand, CodeArtifact, JobSubmission

if TYPE_CHECKING:
    from lambdas._commands import Home
    from respot.sweep.engine import SweepEngine, SweepMessage, SweepNews
    from respot.sweep.model import SweepSubmission

_news_factory: Callable[[], SweepNews | None] | None = None
# One engine per function, as Lambda has one per container: the commands function uses it
# too (to record and stop sweeps), each with its own role's clients.
_engines: dict[str | None, SweepEngine] = {}


def install(news_factory: Callable[[], SweepNews | None] | None) -> None:
    """Use `news_factory` for the sweep's Slack thread from now on (None: from the environment)."""
    global _news_factory  # noqa: PLW0603 - one per container
    _news_factory = news_factory
    _engines.clear()


class ControlPlaneTrials:
    """Trial jobs through the control plane, in-process (this function has its grants)."""

    def __init__(self, cp: Any) -> None:
        self.cp = cp

    def submit(self, submission: JobSubmission) -> None:
        """Record the trial job and request its capacity (create-only by job id)."""
        self.cp.submit(submission)

    def cancel(self, job_id: str, reason: str) -> str | None:
        """Cancel a trial job (its instance is terminated); the job's state afterwards.

        Applied directly, not through `ControlPlane.cancel`'s owner check: the sweep function
        is the control plane acting on a job it submitted itself for the sweep's owner. The
        cancel is a compare-and-set on the job's record: a job that ended first keeps its end
        and its state says so (`COMPLETED`, `FAILED`).
        """
        from respot.core.events import CancelRequested

        command = CancelCommand(
            job_id=job_id,
            reason=reason,
            requested_at=datetime.now(UTC),
            requested_by="respot:sweep",
        )
        applied = self.cp.apply(job_id, CancelRequested(command))
        return applied.state

    def copy_code(self, code: CodeArtifact, job_id: str) -> CodeArtifact:
        """The sweep's code zip, copied under the trial job's own prefix."""
        from respot.storage import layout

        bucket, _, key = code.s3_uri.removeprefix("s3://").partition("/")
        target = layout.code_key(job_id, code.sha256)
        self.cp.s3.copy_object(
            Bucket=self.cp.bucket, Key=target, CopySource={"Bucket": bucket, "Key": key}
        )
        return code.model_copy(update={"s3_uri": f"s3://{self.cp.bucket}/{target}"})


def engine() -> SweepEngine:
    """The container's sweep engine, built once on the control plane's clients."""
    function = current_function()
    if function not in _engines:
        from respot.sweep.engine import SweepEngine
        from respot.sweep.table import SweepTable

        cp = control_plane()
        news = _news_factory() if _news_factory is not None else _news_from_env()
        _engines[function] = SweepEngine(
            table=SweepTable(cp.jobs.table_name, cp.jobs.client),
            jobs=ControlPlaneTrials(cp),
            news=news,
            clock=cp.clock,
        )
    return _engines[function]


def _news_from_env() -> SweepNews | None:
    from respot.control.config import ConfigError, NotifyConfig
    from respot.notify.sweep_thread import SlackSweepNews

    try:
        config = NotifyConfig.from_env()
    except ConfigError:
        return None
    return SlackSweepNews.from_config(config)


def _send(message: dict[str, Any], dedup: str) -> None:
    """Put a message on the sweep queue (FIFO, grouped by sweep)."""
    cp = control_plane()
    if not cp.sweeps.queue_url or cp.sweeps.client is None:
        raise RuntimeError("no sweep queue is configured (RESPOT_SWEEP_QUEUE_URL)")
    cp.sweeps.client.send_message(
        QueueUrl=cp.sweeps.queue_url,
        MessageBody=json.dumps(message),
        MessageGroupId=message["sweep_id"],
        MessageDeduplicationId=dedup[:128],
    )


# ---- commands from researchers (called by the commands Lambda) -----------------------------


def start_sweep(body: str, home: Home) -> None:
    """Record a researcher's sweep (create-only) and kick it; a redelivery changes nothing.

    `body` is the SQS body from the commands queue: read like a job submission, its identity
    proof verified (`lambdas._commands.read_signed`), `submitted_by` the caller STS names.
    """
    from lambdas._commands import read_signed, refuse_unreachable
    from respot.sweep.model import SweepSubmission

    submission: SweepSubmission = read_signed(body, SweepSubmission, "submitted_by")
    # Its trials would each be launched and fail at setup on a secret or image out of reach.
    refuse_unreachable(submission.spec.job, home, what=f"sweep {submission.sweep_id}", field="job.")
    if submission.code is not None:
        # The code must be the sweep's own upload: never another job's, never another bucket.
        from respot.storage import layout

        cp = control_plane()
        own = f"s3://{cp.bucket}/{layout.code_key(submission.sweep_id, submission.code.sha256)}"
        if submission.code.s3_uri != own:
            raise PoisonMessageError(
                f"sweep {submission.sweep_id}: code must be at {own}, not {submission.code.s3_uri}"
            )
    record, created = engine().create(submission)
    if not created and not _same_sweep(record.submission, submission):
        raise PoisonMessageError(
            f"sweep id {submission.sweep_id} is taken by another sweep; submit it again "
            "(a new id is chosen)"
        )
    _send({"kind": "kick", "sweep_id": submission.sweep_id}, f"{submission.sweep_id}-kick")
    logger.info("sweep", extra={"sweep_id": submission.sweep_id, "new_sweep": created})


def _same_sweep(stored: SweepSubmission, new: SweepSubmission) -> bool:
    return stored.model_dump(mode="json") == new.model_dump(mode="json")


def stop_sweep(body: str) -> None:
    """Stop a sweep at its owner's (or an admin's) verified request: no new trials, running
    trials cancelled."""
    from lambdas._commands import admin_principals, read_signed
    from respot.identity.verify import principal_matches
    from respot.sweep.model import SweepStopCommand

    command: SweepStopCommand = read_signed(body, SweepStopCommand, "requested_by")
    record = engine().table.get(command.sweep_id)
    if record is None:
        raise PoisonMessageError(f"no sweep {command.sweep_id!r} to stop")
    owner = record.submission.submitted_by
    admin = command.requested_by is not None and any(
        principal_matches(command.requested_by, entry) for entry in admin_principals()
    )
    if owner and command.requested_by != owner and not admin:
        raise PoisonMessageError(
            f"sweep {command.sweep_id} belongs to {owner}; {command.requested_by} cannot stop it"
        )
    _send(
        {"kind": "stop", "sweep_id": command.sweep_id, "reason": command.reason},
        f"{command.sweep_id}-stop",
    )


# ---- the FIFO queue --------------------------------------------------------------------------

_ADAPTER: TypeAdapter[Any] | None = None


def _parse(body: str) -> SweepMessage:
    global _ADAPTER  # noqa: PLW0603 - built once
    if _ADAPTER is None:
        from typing import Annotated

        from pydantic import Field

        from respot.sweep.model import SweepKick, SweepStop, TrialEvent

        _ADAPTER = TypeAdapter(
            Annotated[SweepKick | SweepStop | TrialEvent, Field(discriminator="kind")]
        )
    try:
        parsed: SweepMessage = _ADAPTER.validate_json(body)
    except ValidationError as exc:
        raise PoisonMessageError(f"not a sweep message: {exc.errors()[0]['msg']}") from exc
    return parsed


def _advance(body: str) -> None:
    from respot.sweep.exceptions import SweepNotFoundError

    message = _parse(body)
    try:
        done = engine().handle(message)
    except SweepNotFoundError as exc:
        raise PoisonMessageError(str(exc)) from exc
    except ValidationError as exc:
        # The sweep's record no longer reads (a spec an older respot accepted): every retry
        # would fail the same way and hold the sweep's FIFO group.
        raise PoisonMessageError(
            f"sweep {message.sweep_id}: its record cannot be read: {exc.errors()[0]['msg']}"
        ) from exc
    logger.info(
        "sweep %s: %s",
        done.sweep_id,
        done.outcome,
        extra={"sweep_id": done.sweep_id, "submitted": done.submitted, "pruned": done.cancelled},
    )


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """SQS FIFO batch -> one sweep message per record, in order per sweep."""
    return sqs_batch(event, context, _advance, source="sweep-events", fifo=True)
