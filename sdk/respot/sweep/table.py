"""Sweep records in the job table, written by compare-and-set (as `respot.aws.jobs` does)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from respot.exceptions import ConcurrentUpdateError
from respot.sweep.exceptions import SweepNotFoundError
from respot.sweep.journal import DynamoJournalBackend, sweep_pk
from respot.sweep.model import SweepRecord

RECORD_SK = "SWEEP"
CAS_ATTEMPTS = 8
CAS_BACKOFF_SECONDS = 0.02


def _key(sweep_id: str) -> dict[str, Any]:
    return {"pk": {"S": sweep_pk(sweep_id)}, "sk": {"S": RECORD_SK}}


class SweepTable:
    """Reads and writes sweep records and opens their journals."""

    def __init__(self, table_name: str, client: Any) -> None:
        self.table_name = table_name
        self.client = client

    def get(self, sweep_id: str) -> SweepRecord | None:
        """The sweep's record, read strongly consistently, or None."""
        item = self.client.get_item(
            TableName=self.table_name, Key=_key(sweep_id), ConsistentRead=True
        ).get("Item")
        return SweepRecord.model_validate_json(item["doc"]["S"]) if item else None

    def require(self, sweep_id: str) -> SweepRecord:
        """The sweep's record; `SweepNotFoundError` naming the id if there is none."""
        record = self.get(sweep_id)
        if record is None:
            raise SweepNotFoundError(f"no sweep {sweep_id!r} in this deployment")
        return record

    def save(self, record: SweepRecord, *, expected_version: int | None) -> SweepRecord:
        """Write `record` if the stored version is still `expected_version` (None: create)."""
        written = record.model_copy(update={"version": (expected_version or 0) + 1})
        item = {
            **_key(record.sweep_id),
            "version": {"N": str(written.version)},
            "state": {"S": written.state.value},
            "doc": {"S": written.model_dump_json(exclude_none=True)},
        }
        if expected_version is None:
            # Create only: a sweep id that exists is never overwritten.
            condition: dict[str, Any] = {"ConditionExpression": "attribute_not_exists(pk)"}
        else:
            condition = {
                "ConditionExpression": "version = :v",
                "ExpressionAttributeValues": {":v": {"N": str(expected_version)}},
            }
        try:
            self.client.put_item(TableName=self.table_name, Item=item, **condition)
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                raise ConcurrentUpdateError(f"sweep {record.sweep_id} changed meanwhile") from exc
            raise
        return written

    def update(
        self, sweep_id: str, change: Callable[[SweepRecord], SweepRecord | None]
    ) -> SweepRecord:
        """Read, change, write with compare-and-set; on a lost race read and change again."""
        for attempt in range(CAS_ATTEMPTS):
            current = self.require(sweep_id)
            new = change(current.model_copy(deep=True))
            if new is None:
                return current
            try:
                return self.save(new, expected_version=current.version)
            except ConcurrentUpdateError:
                time.sleep(random.uniform(0, CAS_BACKOFF_SECONDS * (attempt + 1)))  # noqa: S311
        raise ConcurrentUpdateError(f"sweep {sweep_id}: {CAS_ATTEMPTS} writes lost the race")

    def journal(self, sweep_id: str) -> DynamoJournalBackend:
        """The Optuna journal of the sweep's study."""
        return DynamoJournalBackend(self.table_name, sweep_id, self.client)
