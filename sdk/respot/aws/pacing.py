"""Launch pacing: one token bucket per account, shared by every handler, in the job table.

EC2 throttles API requests per account and region with token buckets, and RunInstances also
by the instances it launches (a resource bucket of 1,000 instances refilled at 2 a second):
https://docs.aws.amazon.com/ec2/latest/devguide/ec2-api-throttling.html. A correlated reclaim
that sends every interrupted job at RunInstances together spends those buckets, and other
tools of the account are throttled with respot. So every launch first takes a token from
respot's own bucket (stack setting `launch_pacing`: `rate_per_second`, default 1, half the
resource bucket's refill; `burst`, default 10); a launch that finds none within `max_wait`
seconds is not sent: it comes back as `CapacityUnavailable` with `PACED_ERROR`, never as "no
capacity". Such a launch *reserves* the next token not yet promised (the bucket goes below
zero, one token per reservation, so each waiting launch gets its own due time, one
1/rate after the one before: no herd at the moment a token refills), if it is due within
`max_reserve_seconds`; the lifecycle then launches again on the same pool when that token is
due (a delayed tick: `respot.control.service`, the `launch-retries` queue), else at the next
tick (bounded, `core.failures`).

Items: pk=PACING#launches (tokens, at, version) and, per launch, pk=PACING#launch#<client
token> (ttl one day). A take (single-item conditional writes, each authorized as PutItem):
1. the launch's marker exists: a duplicate of a launch that has its token (same client token:
   a redelivered event, the tick's re-launch after a crash): let through, no token taken; it
   goes on to EC2, whose client token makes it the same instance;
2. read the bucket, refill it, and put it back one token lighter only if its version is still
   the one read (two handlers never spend the same token; the loser reads again);
3. put the marker only if none exists; if a concurrent duplicate put it first, give this
   token back (a duplicate never holds two). A crash between 2 and 3 loses one token: the
   pace errs slower, never faster.
A reservation is the same take of a token the bucket does not have yet (its count goes below
zero, at most `max_reserve_seconds` x rate below), and its marker says when the token is due
(`due`): until then the launch's take answers "wait" (its token is kept), from then on it is
let through like a duplicate, taking nothing more. Refill pays the debt, so the launches let
through never exceed burst + rate x elapsed.
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
_CAS_TRIES = 24  # compare-and-set tries of one take (a conflict: another took or reserved one)
MARKER_TTL_SECONDS = 86_400


@dataclass(frozen=True)
class Pacing:
    """The stack setting `launch_pacing`."""

    rate_per_second: float = DEFAULT_RATE
    burst: int = DEFAULT_BURST
    max_wait_seconds: float = 2.0  # a handler waits this long for a token before re-queuing
    # A launch without a token reserves the next one if it is due within this (0: never); SQS
    # delays a message at most 900 s, which the delayed retry of the launch rides on.
    max_reserve_seconds: float = 600.0


def refill(tokens: float, at: float, now: float, pacing: Pacing) -> float:
    """The bucket's tokens at `now`: `tokens` at `at`, plus the rate since, at most `burst`
    (a clock that went back adds nothing)."""
    return min(float(pacing.burst), tokens + max(now - at, 0.0) * pacing.rate_per_second)


@dataclass(frozen=True)
class Grant:
    """A take's answer: `granted` (a token, or the launch had one already: `duplicate`), else
    `wait`: seconds until the next token is due; `reserved`: that token is this launch's
    (a take from `wait` seconds on lets it through)."""

    granted: bool
    wait: float = 0.0
    duplicate: bool = False
    reserved: bool = False


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

    def _write(self, tokens: float, at: float, version: int) -> bool:
        """Put the bucket if its version is still `version`; False if another wrote first."""
        put: dict[str, Any] = {
            "TableName": self.table_name,
            "Item": {
                **_BUCKET_KEY,
                "tokens": {"N": repr(tokens)},
                "at": {"N": repr(at)},
                "version": {"N": str(version + 1)},
            },
        }
        if version == 0:
            put["ConditionExpression"] = "attribute_not_exists(pk)"
        else:
            put["ConditionExpression"] = "version = :v"
            put["ExpressionAttributeValues"] = {":v": {"N": str(version)}}
        try:
            self.client.put_item(**put)
            return True
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            return False

    def _marker_key(self, launch_id: str) -> dict[str, Any]:
        return {"pk": {"S": f"PACING#launch#{launch_id}"}, "sk": {"S": "PACING"}}

    def _held(self, item: dict[str, Any]) -> Grant:
        """The answer for a launch whose marker exists: through, or its reserved token's wait."""
        due = float(item["due"]["N"]) if "due" in item else None
        now = self.clock()
        if due is not None and due > now:
            return Grant(False, wait=due - now, reserved=True)
        return Grant(True, duplicate=True)  # this launch already holds its token

    def _try(self, launch_id: str) -> Grant:
        marker = self._marker_key(launch_id)
        item = self.client.get_item(TableName=self.table_name, Key=marker, ConsistentRead=True).get(
            "Item"
        )
        if item:
            return self._held(item)
        rate = self.pacing.rate_per_second
        for _ in range(_CAS_TRIES):
            tokens, at, version = self._read()
            now = self.clock()
            have = refill(tokens, at, now, self.pacing)
            wait = max(1.0 - have, 0.0) / rate
            if wait > 0 and wait > self.pacing.max_reserve_seconds:
                return Grant(False, wait=wait)  # too far ahead to promise: the next tick
            if self._write(have - 1.0, max(now, at), version):
                break
        else:
            log.warning("launch %s: the pacing bucket kept changing; paced", launch_id)
            return Grant(False, wait=1.0 / rate)
        # The token is this launch's once its marker is written; a duplicate of the same
        # launch that wrote it first keeps its own, and this one goes back to the bucket.
        new = {**marker, "ttl": {"N": str(int(now) + MARKER_TTL_SECONDS)}}
        if wait > 0:
            new["due"] = {"N": repr(now + wait)}
        try:
            self.client.put_item(
                TableName=self.table_name,
                Item=new,
                ConditionExpression="attribute_not_exists(pk)",
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            self._give_back()
            first = self.client.get_item(
                TableName=self.table_name, Key=marker, ConsistentRead=True
            ).get("Item")
            return self._held(first) if first else Grant(True, duplicate=True)
        return Grant(False, wait=wait, reserved=True) if wait > 0 else Grant(True)

    def _give_back(self) -> None:
        """Return one token (a duplicate took it); bounded, and never above the burst."""
        for _ in range(_CAS_TRIES):
            tokens, at, version = self._read()
            if self._write(min(tokens + 1.0, float(self.pacing.burst)), at, version):
                return
        log.warning("a duplicate launch's token could not be given back: paced a little more")
