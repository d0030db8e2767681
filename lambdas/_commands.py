"""How the commands function reads a researcher's command off the commands queue.

One way for every command (lambdas/commands.py): the SQS body is checked for size and depth,
the SNS envelope is opened, the published text is read strictly into one JSON object
(`respot.identity.proofs.Received`: no repeated key, no NaN), the command is validated from that
very object (the job id by `respot.spec.jobid`), it must be the command its path expects, and its
identity proof is verified by STS (`respot.identity.proofs`) against the digest of that object as
received, not of our re-serialised model (an older SDK's proof survives a newer model):
the caller's ARN from STS's answer replaces whatever the message claimed.
A sweep whose job names a secret, an ECR image or data this deployment's instances may not read
is refused here too (`refuse_unreachable`, the rule `run()` applies in `respot.spec.reach`; a single
job so refused is recorded FAILED instead, lambdas/commands.py): a submission that never went
through `run()` would otherwise be launched, paid for, and fail at setup. The function knows
its home region and account from its own ARN (`Home.of`), never from the message. Every refusal
here is a `PoisonMessageError` whose text is the reason the dead-letter queue keeps.

On AWS the verifier is built from the function's environment (the stack sets the STS URL
and the table that records used proofs). The local runtime installs one pointed at the
emulator's STS; tests that install a control plane without a verifier skip the check.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import ValidationError

from lambdas._runtime import PoisonMessageError, control_plane, is_installed
from respot.aws.ec2events import SnsNotification, sns_envelope, sns_notification
from respot.control.config import ENV_BUCKET, ENV_DATA_BUCKETS
from respot.identity.proofs import ENV_ADMINS, MalformedMessageError, ProofError, Received
from respot.identity.verify import DynamoProofLedger, Verifier
from respot.spec.reach import refused_reads
from respot.spec.training import describe_validation_error
from respot.wire.limits import InputLimitError, check_json_text
from respot.wire.messages import COMMAND_ADAPTER, CancelCommand, JobSubmission
from respot.workspace import names as workspace_names

if TYPE_CHECKING:
    from respot.spec.training import TrainingEnvVar

C = TypeVar("C", JobSubmission, CancelCommand)

_verifier: Verifier | None = None
_installed = False


def install_verifier(verifier: Verifier | None) -> None:
    """Verify proofs with `verifier` from now on (None: do not verify; tests only)."""
    global _verifier, _installed
    _verifier, _installed = verifier, True


def uninstall_verifier() -> None:
    """Forget the installed verifier (the next command builds one from the environment)."""
    global _verifier, _installed
    _verifier, _installed = None, False


def verifier() -> Verifier | None:
    """The container's verifier: the installed one, else one built from the environment."""
    global _verifier, _installed  # noqa: PLW0603 - one per container
    if not _installed:
        if is_installed():
            return None  # a test's control plane without a verifier: no identity check
        _verifier = Verifier.from_env()
        _installed = True
    return _verifier


@dataclass(frozen=True)
class Home:
    """The region and account the commands function runs in: the deployment's home; and what
    its instances may read data from (the stack's data_bucket_arns and its bucket's jobs/)."""

    region: str | None
    account: str | None
    data_buckets: tuple[str, ...] | None = None  # None: not said, not checked
    bucket: str | None = None
    workspaces: bool = True  # the stack setting `workspaces` (RESPOT_WORKSPACES)

    @classmethod
    def of(cls, context: Any) -> Home:
        """From the function's own ARN (arn:aws:lambda:REGION:ACCOUNT:function:NAME); if that
        is unreadable, the region Lambda sets in AWS_REGION and no account (not checked). The
        data grants from the stack's environment (RESPOT_DATA_BUCKETS, RESPOT_BUCKET), and
        whether workspaces are on (RESPOT_WORKSPACES)."""
        raw = os.environ.get(ENV_DATA_BUCKETS)
        grants: dict[str, Any] = {}
        if os.environ.get(workspace_names.ENV_WORKSPACES_SETTING, "").strip().lower() == "false":
            grants["workspaces"] = False
        if raw is not None:
            grants["data_buckets"] = tuple(b.strip() for b in raw.split(",") if b.strip())
            grants["bucket"] = os.environ.get(ENV_BUCKET) or None
        parts = str(getattr(context, "invoked_function_arn", "") or "").split(":")
        if len(parts) >= 7 and parts[2] == "lambda" and parts[3] and parts[4].isdigit():
            return cls(parts[3], parts[4], **grants)
        return cls(os.environ.get("AWS_REGION") or None, None, **grants)

    def refused(self, spec: TrainingEnvVar, *, field: str = "") -> list[str]:
        """What of `spec` this deployment's instances may not read (`respot.spec.reach`), and
        a workspace where the stack turned workspaces off."""
        problems = refused_reads(
            spec,
            region=self.region,
            account=self.account,
            data_buckets=self.data_buckets,
            bucket=self.bucket,
            field=field,
        )
        if not self.workspaces and workspace_names.is_workspace_command(spec.command, spec.tags):
            problems.append(f"{field}command: {workspace_names.WORKSPACES_OFF}")
        return problems


def refuse_unreachable(spec: TrainingEnvVar, home: Home, *, what: str, field: str = "") -> None:
    """Poison if `spec` names a secret, an ECR image or data the instances may not read."""
    problems = home.refused(spec, field=field)
    if problems:
        raise PoisonMessageError(f"{what} refused before launch: " + "; ".join(problems))


def admin_principals() -> tuple[str, ...]:
    """ARNs allowed to cancel any job (stack setting `admin_principal_arns`)."""
    raw = os.environ.get(ENV_ADMINS, "")
    return tuple(a.strip() for a in raw.split(",") if a.strip())


def published_command(body: str) -> str | None:
    """The `command` field of the published message in an SQS body (None if unreadable)."""
    try:
        message, _ = sns_envelope(body)
        check_json_text(message, what="SNS message")  # depth first: json.loads recurses
        data = json.loads(message)
    except (InputLimitError, ValueError, RecursionError):
        return None
    command = data.get("command") if isinstance(data, dict) else None
    return command if isinstance(command, str) else None


def read_signed(body: str, model: type[Any], identity_field: str) -> Any:
    """A command of another model (sweeps) read like `read_command`: limits, validation, the
    identity proof verified, and `identity_field` set to the caller STS names."""
    command, received, notification = _read(body, model.model_validate_json)
    return _verified(command, received, notification, identity_field)


def read_command(body: str, expected: type[C]) -> C:
    """The `expected` command in an SQS body, its caller verified; poison otherwise."""
    command, received, notification = _read(body, COMMAND_ADAPTER.validate_json)
    if not isinstance(command, expected):
        raise PoisonMessageError(
            f"expected a {expected.model_fields['command'].default!r} command, got "
            f"{command.command!r}"
        )
    field = "submitted_by" if isinstance(command, JobSubmission) else "requested_by"
    verified: C = _verified(command, received, notification, field)
    return verified


def _read(body: str, validate: Callable[[str], Any]) -> tuple[Any, Received, SnsNotification]:
    """(command, the message as received, its SNS notification) of an SQS body; poison if
    unreadable.

    The command is validated from the object the proof's digest is computed from (written
    back as JSON, so pydantic reads it in JSON mode as before): what is verified is what is
    acted on. Without an SNS message id, the body's SHA-256 stands in for it.
    """
    try:
        notification = sns_notification(body)
        check_json_text(notification.message, what="SNS message")  # depth first
        received = Received(notification.message)
        command = validate(json.dumps(received.content))
    except (InputLimitError, MalformedMessageError) as exc:
        raise PoisonMessageError(str(exc)) from exc
    except ValidationError as exc:
        raise PoisonMessageError("; ".join(describe_validation_error(exc))) from exc
    except (ArithmeticError, RecursionError) as exc:
        # A check that broke on the input itself (an overflow) breaks the same way on every
        # retry: dead-letter it with the reason rather than retry it until redrive.
        raise PoisonMessageError(
            f"the command cannot be read: {type(exc).__name__}: {exc}"
        ) from exc
    if notification.message_id is None:
        notification = notification.model_copy(
            update={"message_id": hashlib.sha256(body.encode()).hexdigest()}
        )
    return command, received, notification


def _verified(
    command: Any, received: Received, notification: SnsNotification, identity_field: str
) -> Any:
    """`command` with `identity_field` set to the caller STS names and no proof; poison if its
    proof does not verify. Unchanged if no verifier is installed (tests only).

    The proof's age is judged at the message's publication (the SNS `Timestamp`, the same on
    every redelivery): a command whose first delivery failed comes back after the queue's
    visibility timeout (360 s) and must not be refused as expired then. The envelope is
    trusted as SNS's: only the jobs topic may send to the commands queue (its queue policy).
    """
    check = verifier()
    if check is None:
        return command
    jobs = control_plane().jobs  # this function's own table client (its role's credentials)
    ledger = check.ledger or DynamoProofLedger(jobs.table_name, jobs.client)
    try:
        caller = check.verify(
            command,
            notification.message_id or "",
            received=received,
            ledger=ledger,
            published_at=notification.published_at,
        )
    except ProofError as exc:
        raise PoisonMessageError(f"identity: {exc}") from exc
    update: dict[str, Any] = {identity_field: caller.arn, "proof": None}
    if "submitted_by_id" in type(command).model_fields:  # a job's: its instances' owner tag
        update["submitted_by_id"] = caller.user_id or None
    return command.model_copy(update=update)
