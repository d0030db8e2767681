"""Launch pacing: one token bucket per account, shared by every handler, in the job table.

EC2 throttles API requests per account and region with token buckets, and RunInstances also
by the instances it launches (a resource bucket of 1,000 instances refilled at 2 a second):
https://docs.aws.amazon.com/ec2/latest/devguide/ec2-api-throttling.html. A correlated reclaim
that sends every interrupted job at RunInstances together spends those buckets, and other
tools of the account are throttled with respot. So every launch first takes a token from
respot's own bucket (stack setting `launch_pacing`: `rate_per_second`, default 1, half the
resource bucket's refill; `burst`, default 10); a launch that finds none within `max_wait`
seconds is not sent: it comes back as `CapacityUnavailable` with `PACED_ERROR`, which the
lifecycle retries on the same pool at the next tick (bounded, `core.failures`), never as "no
capacity".

Items: pk=PACING#launches (tokens, at, version) and, per launch, pk=PACING#launch#<client
token> (ttl one day). One TransactWriteItems writes both, each conditional: the bucket only if
its version is the one read (two handlers never spend the same token), the launch's item only
if it does not exist, so a duplicate of the same launch (same client token: a redelivered
event, the tick's re-launch after a crash) never takes a second token: it goes on to EC2,
whose client token makes it one instance.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

log = logging.getLogger("respot.aws.pacing")

DEFAULT_RATE = 1.0  # launches per second, half of RunInstances' 2-instances-a-second refill
DEFAULT_BURST = 10  # launches at once after a quiet spell
PACED_ERROR = "RespotLaunchPaced"  # the error code a paced launch comes back with
_BUCKET_KEY = {"pk": {"S": "PACING#launches"}, "sk": {"S": "PACING"}}
_CAS_TRIES = 8  # compare-and-set tries of one take (a conflict means another took a token)
MARKER_TTL_SECONDS = 86_400


@dataclass(frozen=True)
class Pacing:
    """The stack setting `launch_pacing`."""

    rate_per_second: float = DEFAULT_RATE
    burst: int = DEFAULT_BURST
    max_wait_seconds: float = 2.0  # a handler waits this long for a token before re-queuing


def refill(tokens: float, at: float, now: float, pacing: Pacing) -> float:
    """The bucket's tokens at `now`: `tokens` at `at`, plus the rate since, at most `burst`
    (a clock that went back adds nothing)."""
    return min(float(pacing.burst), tokens + max(now - at, 0.0) * pacing.rate_per_second)


@dataclass(frozen=True)
class Grant:
    """A take's answer: `granted` (a token, or the launch had one already: `duplicate`), else
    `wait`: seconds until the next token is due."""

    granted: bool
    wait: float = 0.0
    duplicate: bool = False


class LaunchPacer:
    """Takes launch tokens from the account's bucket (conditional writes, race-free)."""

    def __init__(
        self,
        table_name: str,
        client: Any,
        pacing: Pacing | None = None,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.table_name = table_name
        self.client = client
        self.pacing = pacing or Pacing()
        self.clock = clock
        self.sleep = sleep

    def take(self, launch_id: str) -> Grant:
        """A token for the launch `launch_id` (its client token), waiting up to
        `max_wait_seconds` for one; `Grant(False, wait)` if none came."""
        waited = 0.0
        while True:
            grant = self._try(launch_id)
            if grant.granted or waited + grant.wait > self.pacing.max_wait_seconds:
                return grant
            self.sleep(grant.wait)
            waited += grant.wait

    def _read(self) -> tuple[float, float, int]:
        item = self.client.get_item(
            TableName=self.table_name, Key=_BUCKET_KEY, ConsistentRead=True
        ).get("Item")
        if not item:
            return float(self.pacing.burst), self.clock(), 0
        return float(item["tokens"]["N"]), float(item["at"]["N"]), int(item["version"]["N"])

    def _try(self, launch_id: str) -> Grant:
        for _ in range(_CAS_TRIES):
            tokens, at, version = self._read()
            now = self.clock()
            have = refill(tokens, at, now, self.pacing)
            if have < 1.0:
                return Grant(False, wait=(1.0 - have) / self.pacing.rate_per_second)
            bucket = {
                **_BUCKET_KEY,
                "tokens": {"N": repr(have - 1.0)},
                "at": {"N": repr(max(now, at))},
                "version": {"N": str(version + 1)},
            }
            bucket_put: dict[str, Any] = {"TableName": self.table_name, "Item": bucket}
            if version == 0:
                bucket_put["ConditionExpression"] = "attribute_not_exists(pk)"
            else:
                bucket_put["ConditionExpression"] = "version = :v"
                bucket_put["ExpressionAttributeValues"] = {":v": {"N": str(version)}}
            marker = {
                "TableName": self.table_name,
                "Item": {
                    "pk": {"S": f"PACING#launch#{launch_id}"},
                    "sk": {"S": "PACING"},
                    "ttl": {"N": str(int(now) + MARKER_TTL_SECONDS)},
                },
                "ConditionExpression": "attribute_not_exists(pk)",
            }
            try:
                self.client.transact_write_items(
                    TransactItems=[{"Put": bucket_put}, {"Put": marker}]
                )
                return Grant(True)
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "TransactionCanceledException":
                    raise
                reasons = [r.get("Code") for r in exc.response.get("CancellationReasons") or []]
                if len(reasons) == 2 and reasons[1] == "ConditionalCheckFailed":
                    return Grant(True, duplicate=True)  # this launch already holds its token
                continue  # another handler took a token first: read again
        log.warning("launch %s: the pacing bucket kept changing; paced", launch_id)
        return Grant(False, wait=1.0 / self.pacing.rate_per_second)
