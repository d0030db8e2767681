"""The local stand-in for Lambda's triggers: it reads the queues and calls the handlers in-process.

Per wiring queue: long-poll the queue, hand the batch to the function in the Lambda SQS event
shape, delete what succeeded, leave the `batchItemFailures` (and everything, if the handler
raised) for redelivery; SQS redrive then moves repeat failures to the dead-letter queue, as on
AWS. Per wiring rule: the rule's own queue carries matched EventBridge events; each is given to
the function alone, and a failing event is retried up to `RULE_RETRIES` times like an
asynchronous Lambda invocation. Per schedule: call the function every `every_seconds` times
the runtime's time scale while the schedule's rule is ENABLED. A queue is polled only while
its event source mapping is Enabled (the activity switch turns some off at rest).
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import lambdas._runtime as lambda_runtime
from infra.local.cloud import LocalDeployment
from infra.wiring import WIRING, Wiring

log = logging.getLogger("respot.local.dispatcher")

RULE_RETRIES = 3  # Lambda retries a failed asynchronous invocation twice (three tries in all)
# moto's long poll of a FIFO queue spins (holding the GIL of the whole local runtime) while the
# only visible messages belong to a message group in flight. Each queue has one poller, which
# deletes what it handled before it receives again, so a group is in flight only after a
# failure: until the queue has nothing in flight, that poller short-polls this often, and
# otherwise long-polls like the others (ten short polls a second per FIFO queue were a tenth
# of the runtime's CPU while a job lived).
FIFO_POLL_SECONDS = 0.1
MAPPING_CHECK_SECONDS = 0.1  # how often a poller of a disabled mapping looks again


@dataclass(frozen=True)
class Invocation:
    """One handler call, for statistics."""

    function: str
    started: float
    seconds: float
    records: int
    ok: bool
    message_ids: tuple[str, ...] = ()  # SQS message ids handled (benchmarks count them)
    event_ids: tuple[str, ...] = ()  # EventBridge event ids handled (a rule's event `id`)


class LambdaContext:
    """The attributes of the Lambda context object that respot and Powertools read."""

    def __init__(self, function: str, memory_mb: int, timeout_seconds: int) -> None:
        self.function_name = f"respot-local-{function}"
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = memory_mb
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:123456789012:function:{function}"
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{self.function_name}"
        self.log_stream_name = "local"
        self._deadline = time.monotonic() + timeout_seconds

    def get_remaining_time_in_millis(self) -> int:
        """Milliseconds left before the function's timeout."""
        return max(int((self._deadline - time.monotonic()) * 1000), 0)


def _lambda_record(message: dict[str, Any], queue_arn: str, region: str) -> dict[str, Any]:
    attributes = {k: str(v) for k, v in message.get("Attributes", {}).items()}
    message_attributes = {
        name: {
            "stringValue": value.get("StringValue"),
            "binaryValue": value.get("BinaryValue"),
            "dataType": value.get("DataType"),
            "stringListValues": [],
            "binaryListValues": [],
        }
        for name, value in message.get("MessageAttributes", {}).items()
    }
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": attributes,
        "messageAttributes": message_attributes,
        "md5OfBody": message.get("MD5OfBody", ""),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    }


class Dispatcher:
    """Feeds queue messages, rule events and schedules to the handlers, like Lambda would."""

    def __init__(
        self,
        deployment: LocalDeployment,
        *,
        wiring: Wiring = WIRING,
        time_scale: float = 1.0,
        poll_wait_seconds: int = 1,
        pollers_per_queue: int = 1,
        on_invocation: Callable[[Invocation], None] | None = None,
    ) -> None:
        self.deployment = deployment
        self.wiring = wiring
        self.time_scale = time_scale
        self.poll_wait_seconds = poll_wait_seconds
        self.pollers_per_queue = pollers_per_queue
        self.on_invocation = on_invocation
        self.invocations: list[Invocation] = []
        self.failures: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._busy = 0
        self._handlers: dict[str, Callable[..., Any]] = {}
        self._sqs = deployment.client("sqs")

    # ---- handlers ----------------------------------------------------------------------------

    def handler(self, function: str) -> Callable[..., Any]:
        """The `handler` callable of a wiring function (imported once)."""
        if function not in self._handlers:
            module = importlib.import_module(self.wiring.function(function).module)
            self._handlers[function] = module.handler
        return self._handlers[function]

    def invoke(
        self,
        function: str,
        event: Any,
        records: int = 1,
        message_ids: tuple[str, ...] = (),
        event_ids: tuple[str, ...] = (),
    ) -> Any:
        """Call a function's handler with `event`, timing it."""
        spec = self.wiring.function(function)
        context = LambdaContext(function, spec.memory_mb, spec.timeout_seconds)
        started = time.monotonic()
        ok = False
        with self._lock:
            self._busy += 1
        try:
            with lambda_runtime.invoking(function):
                result = self.handler(function)(event, context)
            ok = True
            return result
        finally:
            with self._lock:
                self._busy -= 1
            inv = Invocation(
                function, started, time.monotonic() - started, records, ok, message_ids, event_ids
            )
            with self._lock:
                self.invocations.append(inv)
            if self.on_invocation is not None:
                self.on_invocation(inv)

    # ---- loops -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start `pollers_per_queue` threads per queue and per rule, one per schedule."""
        for q in self.wiring.queues:
            url = self.deployment.queue_urls[q.name]
            for _ in range(self.pollers_per_queue):
                self._spawn(
                    f"sqs-{q.name}", self._poll_queue, q.name, url, q.function, q.batch_size
                )
        for rule in self.wiring.rules:
            url = self.deployment.rule_queue_urls[rule.name]
            # EventBridge invokes a function for many events at once: as many readers here.
            for _ in range(self.pollers_per_queue):
                self._spawn(f"rule-{rule.name}", self._poll_rule, rule.name, url, rule.function)
        for schedule in self.wiring.schedules:
            self._spawn(
                f"schedule-{schedule.name}",
                self._schedule,
                schedule.function,
                schedule.every_seconds * self.time_scale,
                self.deployment.schedule_rule_names.get(schedule.name, ""),
            )

    def stop(self) -> None:
        """Stop every loop and wait for the handlers in flight."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=self.poll_wait_seconds + 30)
        self._threads.clear()

    def _spawn(self, name: str, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=self._guard, args=(target, *args), name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _guard(self, target: Callable[..., None], *args: Any) -> None:
        while not self._stop.is_set():
            try:
                target(*args)
                return
            except Exception:  # keep the loop alive: a failing handler must not stop delivery
                log.exception("dispatcher loop %s failed; restarting it", target.__name__)
                time.sleep(0.2)

    def _receive(
        self, url: str, count: int, wait_seconds: int | None = None
    ) -> list[dict[str, Any]]:
        response = self._sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=count,
            WaitTimeSeconds=self.poll_wait_seconds if wait_seconds is None else wait_seconds,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        return list(response.get("Messages", []))

    def _in_flight(self, url: str) -> int:
        attrs = self._sqs.get_queue_attributes(
            QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesNotVisible"]
        )["Attributes"]
        return int(attrs["ApproximateNumberOfMessagesNotVisible"])

    def _delete(self, url: str, messages: list[dict[str, Any]]) -> None:
        for start in range(0, len(messages), 10):
            chunk = messages[start : start + 10]
            self._sqs.delete_message_batch(
                QueueUrl=url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(chunk)
                ],
            )

    def _poll_queue(self, name: str, url: str, function: str, batch_size: int) -> None:
        arn = f"arn:aws:sqs:{self.deployment.region}:123456789012:{url.rsplit('/', 1)[-1]}"
        fifo = self.wiring.queue(name).fifo
        mappings = self.deployment.mappings
        left_in_flight = False  # a FIFO message this poller did not delete may be in flight
        while not self._stop.is_set():
            if not mappings.polling(name):  # the mapping is disabled: Lambda polls nothing
                self._stop.wait(MAPPING_CHECK_SECONDS)
                continue
            if left_in_flight:
                left_in_flight = self._in_flight(url) > 0
            messages = self._receive(url, batch_size, 0 if left_in_flight else None)
            if not messages:
                if left_in_flight:
                    self._stop.wait(FIFO_POLL_SECONDS)
                continue
            event = {"Records": [_lambda_record(m, arn, self.deployment.region) for m in messages]}
            try:
                ids = tuple(m["MessageId"] for m in messages)
                result = self.invoke(function, event, records=len(messages), message_ids=ids)
            except Exception as exc:
                log.exception("%s failed on a batch of %d from %s", function, len(messages), name)
                with self._lock:
                    self.failures.append((function, repr(exc)))
                left_in_flight = fifo
                continue  # nothing deleted: the whole batch comes back after the visibility
            failed = {f["itemIdentifier"] for f in (result or {}).get("batchItemFailures", [])}
            if failed:
                left_in_flight = fifo
                with self._lock:
                    self.failures.extend((function, f"record {m}") for m in failed)
            self._delete(url, [m for m in messages if m["MessageId"] not in failed])

    def _poll_rule(self, name: str, url: str, function: str) -> None:
        import json

        while not self._stop.is_set():
            for message in self._receive(url, 10):
                try:
                    event = json.loads(message["Body"])
                    self.invoke(
                        function,
                        event,
                        message_ids=(message["MessageId"],),
                        event_ids=(str(event.get("id", "")),),
                    )
                except Exception as exc:
                    log.exception("%s failed on an event of rule %s", function, name)
                    with self._lock:
                        self.failures.append((function, repr(exc)))
                    tries = int(message.get("Attributes", {}).get("ApproximateReceiveCount", 1))
                    if tries < RULE_RETRIES:
                        continue
                self._delete(url, [message])

    def _schedule(self, function: str, every_seconds: float, rule: str) -> None:
        events = self.deployment.client("events") if rule else None
        while not self._stop.wait(every_seconds):
            # moto never fires a scheduled rule, nor does it stop a disabled one from matching:
            # the schedule ticks only while its rule says ENABLED, as EventBridge would.
            if events is not None and events.describe_rule(Name=rule)["State"] != "ENABLED":
                continue
            try:
                self.invoke(
                    function,
                    {"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}},
                )
            except Exception:
                log.exception("scheduled %s failed", function)

    # ---- observing ---------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        """True while a handler runs."""
        with self._lock:
            return self._busy > 0

    def pending_messages(self) -> int:
        """Messages visible or in flight on every queue the dispatcher reads."""
        total = 0
        rules = [self.deployment.rule_queue_urls[r.name] for r in self.wiring.rules]
        urls = [*self.deployment.queue_urls.values(), *rules]
        for url in urls:
            attrs = self._sqs.get_queue_attributes(
                QueueUrl=url,
                AttributeNames=[
                    "ApproximateNumberOfMessages",
                    "ApproximateNumberOfMessagesNotVisible",
                ],
            )["Attributes"]
            total += int(attrs["ApproximateNumberOfMessages"])
            total += int(attrs["ApproximateNumberOfMessagesNotVisible"])
        return total
