"""The pools' observed histories in the job table: one item per spot pool, shared by all jobs.

Item: pk=POOL#<instance type>#<zone> sk=POOL version, start (absolute tick), runs (JSON
run-length pairs of 0, 1 or `pool_watch.UNSEEN`, at most
`respot.core.pool_watch.HISTORY_TICKS` ticks). A sighting is read, folded in by the pure
`pool_watch.observe` and written back conditionally on the version read (a lost race reads
again; at most `CAS_ATTEMPTS` tries, then the sighting is dropped with a warning: a lost
observation costs the policy one tick of knowledge, never a job).
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Iterable
from typing import Any

from botocore.exceptions import ClientError

from respot.core.pool_watch import PoolKey, PoolRecord, Sighting, observe

log = logging.getLogger("respot.pools")

CAS_ATTEMPTS = 5
CAS_BACKOFF_SECONDS = 0.02
BATCH_GET_MAX = 100  # DynamoDB's BatchGetItem limit


def _key(pool: PoolKey) -> dict[str, Any]:
    return {
        "pk": {"S": f"POOL#{pool.instance_type}#{pool.availability_zone}"},
        "sk": {"S": "POOL"},
    }


def _record(item: dict[str, Any]) -> PoolRecord:
    runs = tuple((int(v), int(n)) for v, n in json.loads(item["runs"]["S"]))
    return PoolRecord(start=int(item["start"]["N"]), runs=runs, version=int(item["version"]["N"]))


class PoolTable:
    """Reads and writes pool histories in the job table."""

    def __init__(self, table_name: str, client: Any) -> None:
        self.table_name = table_name
        self.client = client

    def load(self, pools: Iterable[PoolKey]) -> dict[PoolKey, PoolRecord]:
        """The stored histories of `pools` (pools never observed are absent)."""
        wanted = list(dict.fromkeys(pools))
        found: dict[PoolKey, PoolRecord] = {}
        by_pk = {_key(p)["pk"]["S"]: p for p in wanted}
        for i in range(0, len(wanted), BATCH_GET_MAX):
            keys = [_key(p) for p in wanted[i : i + BATCH_GET_MAX]]
            request: dict[str, Any] = {self.table_name: {"Keys": keys, "ConsistentRead": True}}
            for _ in range(CAS_ATTEMPTS):  # unprocessed keys come back under throttling
                response = self.client.batch_get_item(RequestItems=request)
                for item in response.get("Responses", {}).get(self.table_name, []):
                    found[by_pk[item["pk"]["S"]]] = _record(item)
                request = response.get("UnprocessedKeys") or {}
                if not request:
                    break
        return found

    def get(self, pool: PoolKey) -> PoolRecord | None:
        """One pool's stored history, or None."""
        item = self.client.get_item(
            TableName=self.table_name, Key=_key(pool), ConsistentRead=True
        ).get("Item")
        return _record(item) if item else None

    def record(self, sighting: Sighting) -> PoolRecord | None:
        """Fold one sighting into its pool's item; the record written, or None (no change)."""
        for attempt in range(CAS_ATTEMPTS):
            current = self.get(sighting.pool)
            wanted = observe(current, sighting.tick, sighting.seen, weak=sighting.weak)
            if wanted is None:
                return None
            version = (current.version if current else 0) + 1
            item = {
                **_key(sighting.pool),
                "version": {"N": str(version)},
                "start": {"N": str(wanted.start)},
                "runs": {"S": json.dumps([list(r) for r in wanted.runs])},
            }
            if current is None:
                condition: dict[str, Any] = {"ConditionExpression": "attribute_not_exists(pk)"}
            else:
                condition = {
                    "ConditionExpression": "version = :v",
                    "ExpressionAttributeValues": {":v": {"N": str(current.version)}},
                }
            try:
                self.client.put_item(TableName=self.table_name, Item=item, **condition)
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                    raise
                time.sleep(CAS_BACKOFF_SECONDS * (attempt + 1) * random.random())  # noqa: S311
                continue
            return PoolRecord(start=wanted.start, runs=wanted.runs, version=version)
        log.warning(
            "pool %s: sighting at tick %d dropped after %d write conflicts",
            sighting.pool.name,
            sighting.tick,
            CAS_ATTEMPTS,
        )
        return None
