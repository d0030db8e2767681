"""An Optuna journal on DynamoDB: the study of a sweep, durable, with no server to run.

Optuna's `JournalStorage` keeps a study as an append-only log of operations and replays it
into memory; a backend only has to append logs atomically and read them back in order
(`optuna.storages.journal.BaseJournalBackend`). This one keeps each log as one item of the
job table, next to the sweep's record:

    pk=SWEEP#<sweep_id>   sk=LOG#<n, 12 digits>   log (JSON)

An append claims the next numbers with a transaction of conditional puts
(`attribute_not_exists(pk)`): two writers can never take the same number, and the loser
re-reads the tail and tries again after it. Journal replay does not depend on where a log
lands, only on the order all readers agree on, which the numbers give.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterable
from typing import Any

from botocore.exceptions import ClientError
from optuna.storages.journal import BaseJournalBackend

from respot.sweep.exceptions import SweepStorageError

LOG_DIGITS = 12
TRANSACTION_ITEMS = 100  # DynamoDB TransactWriteItems limit
APPEND_ATTEMPTS = 100  # each lost race means another writer got through: no livelock
APPEND_BACKOFF_SECONDS = 0.02
MAX_LOG_BYTES = 350 * 1024  # an item holds at most 400 KB


def sweep_pk(sweep_id: str) -> str:
    """The partition of everything a sweep keeps in the table."""
    return f"SWEEP#{sweep_id}"


def _log_sk(number: int) -> str:
    return f"LOG#{number:0{LOG_DIGITS}d}"


class DynamoJournalBackend(BaseJournalBackend):
    """The append-only log of one sweep's Optuna study, in the job table."""

    def __init__(self, table_name: str, sweep_id: str, client: Any) -> None:
        self.table_name = table_name
        self.pk = sweep_pk(sweep_id)
        self.client = client
        self._next = 0  # the first log number not yet seen by this process

    def read_logs(self, log_number_from: int) -> Iterable[dict[str, Any]]:
        """Logs numbered `log_number_from` and later, in order (strongly consistent)."""
        logs: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "pk = :pk AND sk BETWEEN :from AND :to",
            "ExpressionAttributeValues": {
                ":pk": {"S": self.pk},
                ":from": {"S": _log_sk(log_number_from)},
                ":to": {"S": _log_sk(10**LOG_DIGITS - 1)},
            },
            "ConsistentRead": True,
        }
        expected = log_number_from
        while True:
            page = self.client.query(**kwargs)
            for item in page.get("Items", []):
                number = int(item["sk"]["S"].removeprefix("LOG#"))
                if number != expected:
                    # A gap means a half-visible append: stop before it, as a file journal
                    # stops at a torn last line; the next read sees the rest.
                    self._next = max(self._next, expected)
                    return logs
                logs.append(json.loads(item["log"]["S"]))
                expected += 1
            if "LastEvaluatedKey" not in page:
                break
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        self._next = max(self._next, expected)
        return logs

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        """Append `logs` atomically after every log stored so far."""
        if not logs:
            return
        bodies = [json.dumps(log, separators=(",", ":")) for log in logs]
        for body in bodies:
            if len(body.encode()) > MAX_LOG_BYTES:
                raise SweepStorageError(f"an Optuna log of {len(body)} bytes is too big to store")
        if len(bodies) > TRANSACTION_ITEMS:
            raise SweepStorageError(
                f"{len(bodies)} logs in one append; at most {TRANSACTION_ITEMS} are atomic"
            )
        for attempt in range(APPEND_ATTEMPTS):
            start = self._tail()
            items = [
                {
                    "Put": {
                        "TableName": self.table_name,
                        "Item": {
                            "pk": {"S": self.pk},
                            "sk": {"S": _log_sk(start + i)},
                            "log": {"S": body},
                        },
                        # Create only: a number another writer took is not overwritten.
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                }
                for i, body in enumerate(bodies)
            ]
            try:
                self.client.transact_write_items(TransactItems=items)
            except ClientError as exc:
                code = exc.response["Error"]["Code"]
                if code not in ("TransactionCanceledException", "ConditionalCheckFailedException"):
                    raise
                # Someone took `start`, or a conflict cancelled every contender (DynamoDB may
                # cancel both of two racing transactions). The tail is re-read from where it
                # was: skipping `start` here would leave a gap that stops every reader.
                time.sleep(random.uniform(0, APPEND_BACKOFF_SECONDS * (attempt + 1)))  # noqa: S311
                continue
            self._next = start + len(bodies)
            return
        raise SweepStorageError(
            f"could not append to the journal of {self.pk} after {APPEND_ATTEMPTS} tries "
            "(too many concurrent writers)"
        )

    def _tail(self) -> int:
        """The first free log number, at or after the last one this process knows of."""
        found = self.client.query(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk AND sk BETWEEN :from AND :to",
            ExpressionAttributeValues={
                ":pk": {"S": self.pk},
                ":from": {"S": _log_sk(self._next)},
                ":to": {"S": _log_sk(10**LOG_DIGITS - 1)},
            },
            ProjectionExpression="sk",
            ScanIndexForward=False,
            Limit=1,
            ConsistentRead=True,
        ).get("Items", [])
        if not found:
            return self._next
        return int(found[0]["sk"]["S"].removeprefix("LOG#")) + 1
