"""What every respot Lambda shares: the logger, one control plane per container, SQS batches.

The control plane is built on first use from the function's environment and reused by later
invocations of the same container. The local runtime and the tests call `install()` to hand
in a control plane built on their own clients (e.g. pointed at the moto server).
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger

from respot.control.config import ENV_DLQ_URL, ControlPlaneConfig
from respot.control.service import ControlPlane
from respot.exceptions import RespotError

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

logger = Logger(service=os.environ.get("POWERTOOLS_SERVICE_NAME", "respot"))

_factory: Callable[[], ControlPlane] | None = None
_control_plane: ControlPlane | None = None
# The function being invoked, where one process plays several (the local runtime): each
# function gets its own control plane, built with its own role's credentials.
_function: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "respot_function", default=None
)
_per_function: dict[str, ControlPlane] | None = None  # None: one control plane for all
_dead_letters: Callable[[str, str, str], None] | None = None
_sqs: Any = None


class PoisonMessageError(RespotError):
    """A message that can never be processed: it goes to the dead-letter queue with its reason."""


def install(
    factory: Callable[[], ControlPlane] | None,
    dead_letters: Callable[[str, str, str], None] | None = None,
    *,
    per_function: bool = False,
) -> None:
    """Use `factory` to build the control plane from now on (None: from the environment).

    `per_function`: one control plane per invoked function (`invoking`), as Lambda has one
    container per function; the local runtime asks for it when each function has its own
    role's credentials (IAM enforced).
    """
    global _factory, _control_plane, _dead_letters, _per_function  # noqa: PLW0603
    _factory = factory
    _control_plane = None
    _per_function = {} if per_function else None
    _dead_letters = dead_letters


def is_installed() -> bool:
    """True when a test or the local runtime handed in the control plane (`install`)."""
    return _factory is not None


@contextmanager
def invoking(function: str) -> Iterator[None]:
    """Run a handler as `function` (its own control plane; see `current_function`)."""
    token = _function.set(function)
    try:
        yield
    finally:
        _function.reset(token)


def current_function() -> str | None:
    """The function being invoked, when the caller said (the local runtime's dispatcher)."""
    return _function.get()


def control_plane() -> ControlPlane:
    """The container's control plane, built once."""
    global _control_plane  # noqa: PLW0603 - one per container
    function = _function.get()
    if function is not None and _factory is not None and _per_function is not None:
        if function not in _per_function:
            _per_function[function] = _factory()
        return _per_function[function]
    if _control_plane is None:
        if _factory is not None:
            _control_plane = _factory()
        else:
            _control_plane = ControlPlane.from_config(ControlPlaneConfig.from_env())
    return _control_plane


def dead_letter(body: str, reason: str, source: str) -> None:
    """Send a poison message to this function's dead-letter queue, with the reason attached."""
    if _dead_letters is not None:
        _dead_letters(body, reason, source)
        return
    url = os.environ.get(ENV_DLQ_URL)
    if not url:
        # Without a DLQ to write to, fail the record: SQS redrive moves it there after retries.
        raise PoisonMessageError(reason)
    send_dead_letter(_sqs_client(), url, body, reason, source)


def _sqs_client() -> Any:
    """The control plane's SQS client if this container has (or was given) one, else its own."""
    global _sqs  # noqa: PLW0603 - one per container
    if _control_plane is not None or _factory is not None:
        client = control_plane().notifications.client
        if client is not None:
            return client
    if _sqs is None:
        import boto3

        _sqs = boto3.client("sqs")
    return _sqs


def send_dead_letter(sqs: Any, url: str, body: str, reason: str, source: str) -> None:
    """Put a message on a dead-letter queue with its reason (FIFO queues need a group too)."""
    fifo: dict[str, str] = {}
    if url.endswith(".fifo"):
        # Order does not matter among dead letters; the same poison twice is one dead letter.
        digest = hashlib.sha256(f"{source}\n{reason}\n{body}".encode()).hexdigest()
        fifo = {"MessageGroupId": source, "MessageDeduplicationId": digest}
    sqs.send_message(
        QueueUrl=url,
        MessageBody=body,
        MessageAttributes={
            "reason": {"DataType": "String", "StringValue": reason[:1000]},
            "source": {"DataType": "String", "StringValue": source},
        },
        **fifo,
    )


def sqs_batch(
    event: dict[str, Any],
    context: Any,
    handle: Callable[[str], None] | Callable[[SQSRecord], None],
    *,
    source: str,
    pass_record: bool = False,
    fifo: bool = False,
) -> dict[str, Any]:
    """Process an SQS batch record by record, reporting only the failed ones back to SQS.

    `handle(body)` (or `handle(record)` with `pass_record`) raises `PoisonMessageError` for
    messages that can never succeed (they are moved to the dead-letter queue with the reason
    and count as done) and anything else for failures worth retrying (they stay on the queue).
    With `fifo`, a failed record also fails the later records of its message group, so that
    they are retried after it, in order, and a batch whose every record failed is reported
    record by record, not raised.
    """
    # Imported here: only the SQS-triggered functions pay for Powertools' batch utility.
    from aws_lambda_powertools.utilities.batch import (
        BatchProcessor,
        EventType,
        SqsFifoPartialProcessor,
        process_partial_response,
    )

    processor: BatchProcessor
    if fifo:
        processor = SqsFifoPartialProcessor(skip_group_on_error=True)
        # Report every failed record instead of raising when all failed: a message waiting
        # for its turn is not a Lambda error (the function's error metric stays meaningful).
        processor.raise_on_entire_batch_failure = False
    else:
        processor = BatchProcessor(event_type=EventType.SQS)

    def record_handler(record: SQSRecord) -> None:
        try:
            handle(record if pass_record else record.body)  # type: ignore[arg-type]
        except PoisonMessageError as exc:
            logger.warning("poison message %s: %s", record.message_id, exc)
            dead_letter(record.body, str(exc), source)

    response = process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
    return dict(response)


def json_or_poison(text: str) -> Any:
    """Parse JSON or declare the message poison."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise PoisonMessageError(f"body is not JSON: {exc}") from exc


def command_name(message: str) -> str | None:
    """The `command` field of a published message, if it is a JSON object that has one."""
    try:
        data = json.loads(message)
    except ValueError:
        return None
    command = data.get("command") if isinstance(data, dict) else None
    return command if isinstance(command, str) else None
