"""Lambda `commands`: every researcher's command, off one queue, each to its own path below.

Trigger: SQS `commands` (SNS envelope bodies from the jobs topic, filter command=submit|
cancel|sweep|sweep-stop|queue-settings), batches with partial failures. One queue, not one per
command: at rest an event source mapping's pollers long-poll an empty queue all month, and that is
most of what an idle deployment pays (docs/decisions.md, "One commands queue").

Each message goes by its `command` field to one path:
- `submit`: record the job (create-only by job id) and request its first capacity; a job that
  names a secret, an ECR image or data (outside the stack's data_bucket_arns) the instances
  may not read (`respot.spec.reach`, the rule `run()`
  applies) is recorded FAILED with the field and the fix instead, nothing launched, so the
  researcher who bypassed `run()` sees it in `respot status` and Slack
  (`lifecycle.launches._submitted`);
- `cancel`: cancel a job at its owner's (or an admin's) request, terminating its instance;
- `sweep`: record a sweep and kick it (`lambdas.sweep.start_sweep`);
- `sweep-stop`: stop a sweep (`lambdas.sweep.stop_sweep`);
- `queue-settings`: an admin's new settings of the team's queue (docs/queue.md), then an
  admission pass under them; anyone else's is dead-lettered with the reason.
Every path reads its command the same way (`lambdas._commands`: size and depth limits,
validation, the identity proof verified by STS). A message that can never succeed and cannot
be put on a job of its verified sender (unreadable, invalid, unknown command, forged or
missing proof, a job id that is taken, not the owner) is dead-lettered with the reason: a
refusal is recorded on a job only when the job id and the submitter are both verified and the
id is free, so it never replaces anyone's job. Anything else is retried by SQS.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from lambdas import _activity
from lambdas._commands import Home, admin_principals, published_command, read_command
from lambdas._runtime import PoisonMessageError, control_plane, logger, sqs_batch
from respot.exceptions import DuplicateJobError, NotOwnerError
from respot.spec.jobid import is_trial_job_id
from respot.wire.messages import CancelCommand, JobSubmission


def submit(body: str, home: Home) -> None:
    """A job: recorded once (a redelivery changes nothing), its capacity requested, or, if its
    instances could not read what it names, recorded FAILED with the field and the fix."""
    command = read_command(body, JobSubmission)  # poison unless the id and the sender verify
    if command.sweep is not None:
        # Trial jobs are submitted by the sweep Lambda itself, never through the topic.
        raise PoisonMessageError(
            f"job {command.job_id} claims to be trial {command.sweep.trial} of sweep "
            f"{command.sweep.sweep_id}; only respot's sweep function submits trials"
        )
    if is_trial_job_id(command.job_id):
        # The shape is reserved for trials, so no one can take a trial's id before its sweep.
        raise PoisonMessageError(
            f"job id {command.job_id!r} has the shape reserved for sweep trials "
            "('<sweep>-t<number>-<10 hex>'); submit it with another id (run() picks one)"
        )
    # The home is the function's own region and account, never the message's.
    refused = home.refused(command.spec)
    try:
        # Create-only either way: a refusal never replaces a job that has this id.
        result = control_plane().submit(command, refused=refused)
    except DuplicateJobError as exc:
        logger.warning("duplicate job id", extra={"job_id": command.job_id, "reason": str(exc)})
        raise PoisonMessageError(str(exc)) from exc
    if refused:
        logger.warning(
            "refused before launch",
            extra={"job_id": command.job_id, "outcome": result.outcome, "reason": refused},
        )
    logger.info("submitted", extra={"job_id": command.job_id, "outcome": result.outcome})
    # A refused job is over, but its news waits on the notifications queue, whose poller
    # is off while nothing runs: on either way (the reconcile tick turns them off again).
    _ensure_pollers_on()


def cancel(body: str, home: Home) -> None:
    """A cancellation, applied only for the job's owner or an admin."""
    command = read_command(body, CancelCommand)
    try:
        result = control_plane().cancel(command, admins=admin_principals())
    except NotOwnerError as exc:
        logger.warning("cancel refused", extra={"job_id": command.job_id, "reason": str(exc)})
        raise PoisonMessageError(str(exc)) from exc
    logger.info("cancel", extra={"job_id": command.job_id, "outcome": result.outcome})


def sweep(body: str, home: Home) -> None:
    """A sweep: recorded and kicked; its trials are live jobs, so the pollers go on."""
    from lambdas.sweep import start_sweep

    start_sweep(body, home)
    _ensure_pollers_on()


def sweep_stop(body: str, home: Home) -> None:
    """A sweep's stop: no new trials, its running trials cancelled."""
    from lambdas.sweep import stop_sweep

    stop_sweep(body)


def queue_settings(body: str, home: Home) -> None:
    """An admin's queue settings: verified sender, admin only, checked, then applied."""
    from lambdas._commands import read_signed
    from respot.control.queuecommand import QueueSettingsCommand

    command: QueueSettingsCommand = read_signed(body, QueueSettingsCommand, "requested_by")
    try:
        control_plane().set_queue_settings(command, admins=admin_principals())
    except NotOwnerError as exc:
        logger.warning("queue settings refused", extra={"reason": str(exc)})
        raise PoisonMessageError(str(exc)) from exc
    logger.info("queue settings changed", extra={"by": command.requested_by})


PATHS: dict[str, Callable[[str, Home], None]] = {
    "submit": submit,
    "cancel": cancel,
    "sweep": sweep,
    "sweep-stop": sweep_stop,
    "queue-settings": queue_settings,
}


def _ensure_pollers_on() -> None:
    switch = _activity.switch()
    if switch is not None:  # a live job needs the pollers: always ensure "on" (raises to retry)
        switch.ensure_on()


def _command(body: str, home: Home) -> None:
    kind = published_command(body)
    if kind is None:
        # Unreadable, or no `command` field: the parser names what is wrong (and raises).
        read_command(body, JobSubmission)
        raise PoisonMessageError("not a respot command")
    path = PATHS.get(kind)
    if path is None:
        raise PoisonMessageError(
            f"unknown command {kind!r}: the commands queue takes {', '.join(PATHS)}"
        )
    path(body, home)


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """SQS batch -> one command per record, each to its path."""
    return sqs_batch(event, context, partial(_command, home=Home.of(context)), source="commands")
