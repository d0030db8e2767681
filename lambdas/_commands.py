"""What the submit and cancel functions share: reading a researcher's command off the queue.

One path for both: the SQS body is checked for size and depth, the SNS envelope is opened,
the command is validated (the job id by `respot.jobid`), and it must be the command this
queue carries. Every refusal is a `PoisonMessageError` whose text is the reason the
dead-letter queue keeps.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import ValidationError

from lambdas._runtime import PoisonMessageError
from respot.ec2events import sns_envelope
from respot.inputs import InputLimitError, check_json_text
from respot.messages import COMMAND_ADAPTER, CancelCommand, JobSubmission
from respot.spec import describe_validation_error

C = TypeVar("C", JobSubmission, CancelCommand)


def read_command(body: str, expected: type[C]) -> tuple[C, str | None]:
    """The `expected` command in an SQS body, and its SNS message id; poison otherwise."""
    try:
        message, message_id = sns_envelope(body)
        check_json_text(message, what="SNS message")
        command = COMMAND_ADAPTER.validate_json(message)
    except InputLimitError as exc:
        raise PoisonMessageError(str(exc)) from exc
    except ValidationError as exc:
        raise PoisonMessageError("; ".join(describe_validation_error(exc))) from exc
    if not isinstance(command, expected):
        raise PoisonMessageError(
            f"the {expected.model_fields['command'].default} queue got a "
            f"{command.command!r} command"
        )
    return command, message_id
