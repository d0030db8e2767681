"""The job table in DynamoDB: job records written by compare-and-set, and instance -> job links.

Items (one table, keys `pk`/`sk`):
    pk=JOB#<job_id>        sk=JOB       version, state, updated_at, live (only while live), doc
    pk=INSTANCE#<iid>      sk=INSTANCE  job_id, attempt
`doc` is the whole `JobRecord` as JSON; the other attributes exist for conditions and indexes.
The sparse index `live` (partition `live`, sort `updated_at`) lists the jobs that are not over.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from respot.core.job import JobRecord
from respot.exceptions import ConcurrentUpdateError
from respot.wire.limits import MAX_LOG_LINES, truncate_text

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

# DynamoDB refuses items over 400 KB; the record's JSON must leave room for the other
# attributes and the keys.
MAX_DOC_BYTES = 380 * 1024
LIVE_INDEX = "live"
LIVE_VALUE = "1"
CAS_ATTEMPTS = 8
CAS_BACKOFF_SECONDS = 0.02


def _job_key(job_id: str) -> dict[str, Any]:
    return {"pk": {"S": f"JOB#{job_id}"}, "sk": {"S": "JOB"}}


def _instance_key(instance_id: str) -> dict[str, Any]:
    return {"pk": {"S": f"INSTANCE#{instance_id}"}, "sk": {"S": "INSTANCE"}}


class JobTable:
    """Reads and writes job records; every write is conditional on the version read."""

    def __init__(self, table_name: str, client: DynamoDBClient | Any = None) -> None:
        if client is None:
            import boto3

            client = boto3.client("dynamodb")
        self.table_name = table_name
        self.client = client

    def get(self, job_id: str) -> JobRecord | None:
        """The job's record, read strongly consistently, or None."""
        item = self.client.get_item(
            TableName=self.table_name, Key=_job_key(job_id), ConsistentRead=True
        ).get("Item")
        return _record(item) if item else None

    def save(self, record: JobRecord, *, expected_version: int | None) -> JobRecord:
        """Write `record` if the stored version is still `expected_version` (None: not stored).

        Returns the record as written (version incremented). Raises `ConcurrentUpdateError` if
        another writer got there first; the caller re-reads and decides again.
        """
        written = record.model_copy(update={"version": (expected_version or 0) + 1})
        doc = written.model_dump_json(exclude_none=True)
        if len(doc.encode()) > MAX_DOC_BYTES:
            # Never a write DynamoDB refuses (a lost cancel, a job that keeps running): cut
            # the free texts, then the oldest timeline entries, until the item fits.
            written = fit_record(written)
            doc = written.model_dump_json(exclude_none=True)
        item: dict[str, Any] = {
            **_job_key(record.job_id),
            "version": {"N": str(written.version)},
            "state": {"S": written.state.value},
            "updated_at": {"S": written.updated_at.isoformat()},
            "created_at": {"S": written.created_at.isoformat()},
            "doc": {"S": doc},
        }
        if not written.state.is_terminal():
            item["live"] = {"S": LIVE_VALUE}
        if expected_version is None:
            # Create only: a duplicate submission must not overwrite a job already recorded.
            condition: dict[str, Any] = {"ConditionExpression": "attribute_not_exists(pk)"}
        else:
            # Compare-and-set: only the writer that read this version may replace it.
            condition = {
                "ConditionExpression": "version = :v",
                "ExpressionAttributeValues": {":v": {"N": str(expected_version)}},
            }
        try:
            self.client.put_item(TableName=self.table_name, Item=item, **condition)
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                raise ConcurrentUpdateError(
                    f"job {record.job_id} changed since version {expected_version}"
                ) from exc
            raise
        return written

    def update(
        self,
        job_id: str,
        change: Callable[[JobRecord | None], JobRecord | None],
        *,
        attempts: int = CAS_ATTEMPTS,
    ) -> tuple[JobRecord | None, JobRecord | None]:
        """Read, change, compare-and-set; on a lost race read again and change again.

        `change(record)` gets the record as read (None if there is none) and returns the record
        to write, or None to write nothing. It is called once per try on a fresh read, so it
        must derive everything it writes from its argument: that is what keeps a writer from
        undoing another's change. Returns (the record last read, the record written or None).
        """
        for attempt in range(attempts):
            current = self.get(job_id)
            wanted = change(current)
            if wanted is None:
                return current, None
            try:
                written = self.save(wanted, expected_version=current.version if current else None)
            except ConcurrentUpdateError:
                time.sleep(CAS_BACKOFF_SECONDS * (attempt + 1) * random.random())  # noqa: S311
                continue
            return current, written
        raise ConcurrentUpdateError(f"job {job_id}: gave up after {attempts} write conflicts")

    def live_job_ids(self) -> Iterator[str]:
        """Ids of every job that is not over, oldest update first (eventually consistent)."""
        kwargs: dict[str, Any] = {
            "TableName": self.table_name,
            "IndexName": LIVE_INDEX,
            "KeyConditionExpression": "live = :l",
            "ExpressionAttributeValues": {":l": {"S": LIVE_VALUE}},
            "ProjectionExpression": "pk",
        }
        while True:
            page = self.client.query(**kwargs)
            for item in page.get("Items", []):
                yield item["pk"]["S"].removeprefix("JOB#")
            if "LastEvaluatedKey" not in page:
                return
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def recent(self, limit: int = 50) -> list[JobRecord]:
        """Up to `limit` job records, newest first (a scan: fine for a team's job count)."""
        records: list[JobRecord] = []
        kwargs: dict[str, Any] = {
            "TableName": self.table_name,
            "FilterExpression": "sk = :s",
            "ExpressionAttributeValues": {":s": {"S": "JOB"}},
        }
        while True:
            page = self.client.scan(**kwargs)
            records.extend(_record(i) for i in page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                break
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        records.sort(key=lambda r: r.created_at, reverse=True)
        return records[:limit]

    def link_instance(self, instance_id: str, job_id: str, attempt: int) -> None:
        """Remember which job and attempt an instance belongs to (idempotent)."""
        self.client.put_item(
            TableName=self.table_name,
            Item={
                **_instance_key(instance_id),
                "job_id": {"S": job_id},
                "attempt": {"N": str(attempt)},
            },
        )

    def instance_owner(self, instance_id: str) -> tuple[str, int] | None:
        """(job_id, attempt) of an instance respot launched, or None."""
        item = self.client.get_item(
            TableName=self.table_name, Key=_instance_key(instance_id), ConsistentRead=True
        ).get("Item")
        if not item:
            return None
        return item["job_id"]["S"], int(item["attempt"]["N"])


def fit_record(record: JobRecord, max_bytes: int = MAX_DOC_BYTES) -> JobRecord:
    """`record` cut to at most `max_bytes` of JSON: free texts first (the reason, each
    timeline entry's text and data, attempts' failures), then the oldest timeline entries.
    An attempt's `tried` pools are state, not text (placement skips them): never cut."""

    def cut(value: Any) -> Any:
        if isinstance(value, str):
            return truncate_text(value)
        if isinstance(value, list):
            return [cut(v) for v in value[-MAX_LOG_LINES:]]
        if isinstance(value, dict):
            return {k: cut(v) for k, v in value.items()}
        return value

    timeline = [
        e.model_copy(update={"text": truncate_text(e.text), "data": cut(e.data)})
        for e in record.timeline
    ]
    texts = ("boot_failure", "launch_failure")
    attempts = [
        a.model_copy(update={f: cut(getattr(a, f)) for f in texts}) for a in record.attempts
    ]
    fitted = record.model_copy(
        update={"reason": cut(record.reason), "timeline": timeline, "attempts": attempts}
    )
    while len(fitted.model_dump_json(exclude_none=True).encode()) > max_bytes and fitted.timeline:
        fitted = fitted.model_copy(
            update={"timeline": fitted.timeline[len(fitted.timeline) // 4 + 1 :]}
        )
    return fitted


def _record(item: dict[str, Any]) -> JobRecord:
    record = JobRecord.model_validate_json(item["doc"]["S"])
    return record.model_copy(update={"version": int(item["version"]["N"])})
