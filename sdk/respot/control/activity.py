"""At rest, only the intake costs anything: the pollers that live jobs need are switched off.

What is switched (the stack names them in the functions' environment): the reconcile
schedule (an EventBridge rule) and the Lambda event source mappings of the agent-events and
notifications queues. The intake stays on: the commands queues' mappings and the EC2 rules
(EventBridge invokes a function only when an event arrives, which costs nothing at rest).

Who switches:
- every submission calls `ensure_on()` (the submit path always ensures "on");
- every reconcile tick calls `tick(live_jobs)`: with live jobs it ensures "on"; with none,
  no respot instance left, nothing waiting on the switched queues and the last "on" older
  than `grace`, it turns everything off;
- the EC2 event handlers, for an event of a live job, call `ensure_on()` (at most every few
  minutes per container, `lambdas._activity.keep_on`): a deploy can disable the schedule
  that runs the tick itself.
"On" is checked, not believed: a deploy re-applies the template, whose rule and mappings say
disabled, while the marker still says "on". So whenever the marker says "on" and stays on,
`ensure_on` and the tick read the rule's and the mappings' real state (`Switchboard.off_now`)
and enable what is off.

The race (a job submitted while the pollers are being turned off) is closed by a marker item
in the job table, written only with conditional updates:
    pk=CONTROL#activity  sk=ACTIVITY  state ("on"|"off"), epoch (N), touched_at (ISO time)
- `ensure_on` increments `epoch`, sets state "on" and `touched_at` = now in one UpdateItem and
  reads the old state back; if it was not "on", it enables everything itself.
- turning off writes state "off" only if `epoch` is still the one the tick read (no
  submission since), then disables, then reads the marker again: a changed `epoch` means a
  submission raced the disabling, so everything is enabled again.
A submission whose marker write lands before the tick's conditional write makes it fail; one
that lands after sees "off" and enables by itself (after the disabling, or the tick's re-read
sees its epoch and re-enables). The `live` index the tick counts jobs on is eventually
consistent; `grace` (5 minutes, far above its lag) keeps a just-submitted job that the index
does not show yet from being missed: the tick never turns off within `grace` of an "on".
"""

from __future__ import annotations

import enum
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

log = logging.getLogger("respot.activity")

ENV_RULE = "RESPOT_ACTIVITY_RULE"  # the reconcile schedule's rule name
ENV_MAPPINGS = "RESPOT_ACTIVITY_MAPPINGS"  # comma-separated event source mapping UUIDs
ENV_QUEUES = "RESPOT_ACTIVITY_QUEUES"  # comma-separated URLs of the switched queues
ENV_GRACE = "RESPOT_ACTIVITY_GRACE_SECONDS"

MARKER_KEY = {"pk": {"S": "CONTROL#activity"}, "sk": {"S": "ACTIVITY"}}
DEFAULT_GRACE = timedelta(minutes=5)
# A mapping that is Enabling/Disabling/Updating rejects updates (ResourceInUseException) until
# it settles: retry this often, waiting this long at first (doubling, capped), then give up.
SWITCH_TRIES = 8
SWITCH_FIRST_WAIT_SECONDS = 0.5
SWITCH_MAX_WAIT_SECONDS = 5.0


class Verdict(enum.StrEnum):
    """What a reconcile tick does with the switch."""

    STAY_ON = "stay-on"
    TURN_ON = "turn-on"  # live jobs, but the marker says off: the tick re-enables
    TURN_OFF = "turn-off"
    STAY_OFF = "stay-off"


@dataclass(frozen=True)
class Marker:
    """The marker item as read."""

    state: str = "off"  # a fresh deployment has no marker: its pollers are created disabled
    epoch: int = 0
    touched_at: datetime | None = None

    @classmethod
    def from_item(cls, item: dict[str, Any] | None) -> Marker:
        """From a DynamoDB item (None: no marker yet)."""
        if not item:
            return cls()
        touched = item.get("touched_at", {}).get("S")
        return cls(
            state=item.get("state", {}).get("S", "off"),
            epoch=int(item.get("epoch", {}).get("N", "0")),
            touched_at=datetime.fromisoformat(touched) if touched else None,
        )


@dataclass(frozen=True)
class Rest:
    """What the tick saw: is anything still using the switched pollers?"""

    live_jobs: int
    instances: int = 0  # respot instances not yet terminated (orphan clean-up needs ticks)
    waiting_messages: int = 0  # visible or in flight on the switched queues


def decide(marker: Marker, seen: Rest, now: datetime, grace: timedelta) -> Verdict:
    """The tick's decision, a pure function of the marker and what it saw."""
    if seen.live_jobs > 0:
        return Verdict.STAY_ON if marker.state == "on" else Verdict.TURN_ON
    if marker.state != "on":
        return Verdict.STAY_OFF
    if seen.instances > 0 or seen.waiting_messages > 0:
        return Verdict.STAY_ON  # let orphans be terminated, agent messages and Slack drain
    if marker.touched_at is not None and now - marker.touched_at < grace:
        return Verdict.STAY_ON  # a submission this recent may not be in the live index yet
    return Verdict.TURN_OFF


class SwitchError(RuntimeError):
    """The pollers could not be switched (after bounded retries)."""


@dataclass
class Switchboard:
    """The AWS resources that are switched: one EventBridge rule, some event source mappings."""

    events: Any
    lambda_: Any
    rule_name: str
    mapping_ids: Sequence[str]
    sleep: Callable[[float], None] = time.sleep

    def set(self, enabled: bool) -> None:
        """Enable (or disable) the rule and every mapping; each call is idempotent."""
        if self.rule_name:
            if enabled:
                self.events.enable_rule(Name=self.rule_name)
            else:
                self.events.disable_rule(Name=self.rule_name)
        for uuid in self.mapping_ids:
            self._update_mapping(uuid, enabled)

    def off_now(self) -> list[str]:
        """The switched resources that are off right now, as AWS says (rule name, mapping
        UUIDs): a deploy re-applies the template's "disabled" whatever the marker says."""
        off: list[str] = []
        if self.rule_name:
            state = self.events.describe_rule(Name=self.rule_name).get("State", "")
            if state != "ENABLED":
                off.append(self.rule_name)
        for uuid in self.mapping_ids:
            state = self.lambda_.get_event_source_mapping(UUID=uuid).get("State", "")
            if state in ("Disabled", "Disabling"):
                off.append(uuid)
        return off

    def repair(self) -> list[str]:
        """Enable what `off_now` finds off; returns what it enabled."""
        off = self.off_now()
        if self.rule_name and self.rule_name in off:
            self.events.enable_rule(Name=self.rule_name)
        for uuid in self.mapping_ids:
            if uuid in off:
                self._update_mapping(uuid, True)
        return off

    def _update_mapping(self, uuid: str, enabled: bool) -> None:
        wait = SWITCH_FIRST_WAIT_SECONDS
        for attempt in range(1, SWITCH_TRIES + 1):
            try:
                self.lambda_.update_event_source_mapping(UUID=uuid, Enabled=enabled)
                return
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "ResourceInUseException":
                    raise
                if attempt == SWITCH_TRIES:
                    raise SwitchError(
                        f"event source mapping {uuid} still busy after {SWITCH_TRIES} tries; "
                        f"stopped retrying (wanted enabled={enabled})"
                    ) from exc
                self.sleep(wait)  # still Enabling/Disabling from the last switch
                wait = min(wait * 2, SWITCH_MAX_WAIT_SECONDS)


class ActivitySwitch:
    """Turns the switched pollers on when a job becomes live and off at rest, race-free."""

    def __init__(
        self,
        *,
        ddb: Any,
        table_name: str,
        board: Switchboard,
        sqs: Any = None,
        queue_urls: Sequence[str] = (),
        grace: timedelta = DEFAULT_GRACE,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.ddb = ddb
        self.table_name = table_name
        self.board = board
        self.sqs = sqs
        self.queue_urls = tuple(queue_urls)
        self.grace = grace
        self.clock = clock

    @classmethod
    def from_env(
        cls,
        *,
        ddb: Any,
        table_name: str,
        sqs: Any,
        session: Any = None,
        env: dict[str, str] | None = None,
    ) -> ActivitySwitch | None:
        """The switch the stack configured in the environment; None if it configured none."""
        env = dict(os.environ) if env is None else env
        rule = env.get(ENV_RULE, "")
        mappings = [m for m in env.get(ENV_MAPPINGS, "").split(",") if m]
        if not rule and not mappings:
            return None
        if session is None:
            import boto3

            session = boto3.session.Session()
        board = Switchboard(session.client("events"), session.client("lambda"), rule, mappings)
        return cls(
            ddb=ddb,
            table_name=table_name,
            board=board,
            sqs=sqs,
            queue_urls=[u for u in env.get(ENV_QUEUES, "").split(",") if u],
            grace=timedelta(seconds=float(env.get(ENV_GRACE, DEFAULT_GRACE.total_seconds()))),
        )

    # ---- the marker --------------------------------------------------------------------------

    def marker(self) -> Marker:
        """The marker, read strongly consistently."""
        item = self.ddb.get_item(TableName=self.table_name, Key=MARKER_KEY, ConsistentRead=True)
        return Marker.from_item(item.get("Item"))

    def ensure_on(self) -> bool:
        """Make sure the pollers are on (the submit path and a tick that sees live jobs).

        Returns True if this call enabled them. A failure to enable marks the switch "off"
        again (if nobody touched it since) and raises, so a retry enables once more.
        """
        try:
            answer = self.ddb.update_item(
                TableName=self.table_name,
                Key=MARKER_KEY,
                UpdateExpression="SET #s = :on, touched_at = :now ADD epoch :one",
                ExpressionAttributeNames={"#s": "state"},
                ExpressionAttributeValues={
                    ":on": {"S": "on"},
                    ":now": {"S": self.clock().isoformat()},
                    ":one": {"N": "1"},
                },
                ReturnValues="ALL_OLD",
            )
        except ClientError:
            log.exception("could not write the activity marker")
            raise
        old = Marker.from_item(answer.get("Attributes"))
        if old.state == "on":
            return self._repair()
        self._enable_or_undo(old.epoch + 1)
        log.info("pollers turned on", extra={"epoch": old.epoch + 1})
        return True

    def _enable_or_undo(self, epoch: int) -> None:
        try:
            self.board.set(True)
        except Exception:
            log.exception("could not enable the pollers; marking the switch off for a retry")
            try:
                self.ddb.update_item(
                    TableName=self.table_name,
                    Key=MARKER_KEY,
                    UpdateExpression="SET #s = :off",
                    ConditionExpression="epoch = :e",
                    ExpressionAttributeNames={"#s": "state"},
                    ExpressionAttributeValues={":off": {"S": "off"}, ":e": {"N": str(epoch)}},
                )
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                    raise
            raise

    def _repair(self) -> bool:
        """The marker says "on": check that the pollers really are (a deploy may have
        disabled them again) and enable what is off. True if something was."""
        enabled = self.board.repair()
        if enabled:
            log.warning(
                "pollers found off while the marker says on (a deploy re-applied the "
                "template?); enabled again: %s",
                ", ".join(enabled),
                extra={"enabled": enabled},
            )
        return bool(enabled)

    # ---- the tick ----------------------------------------------------------------------------

    def waiting_messages(self) -> int:
        """Messages visible or in flight on the switched queues."""
        total = 0
        for url in self.queue_urls:
            attrs = self.sqs.get_queue_attributes(
                QueueUrl=url,
                AttributeNames=[
                    "ApproximateNumberOfMessages",
                    "ApproximateNumberOfMessagesNotVisible",
                ],
            )["Attributes"]
            total += sum(int(v) for v in attrs.values())
        return total

    def tick(self, live_jobs: int, instances: Callable[[], int] = lambda: 0) -> Verdict:
        """The reconcile tick's part: re-enable if live jobs run, turn off at rest."""
        marker = self.marker()
        seen = Rest(live_jobs=live_jobs)
        if live_jobs == 0 and marker.state == "on":
            seen = Rest(0, instances=instances(), waiting_messages=self.waiting_messages())
        verdict = decide(marker, seen, self.clock(), self.grace)
        if verdict is Verdict.TURN_ON:
            self.ensure_on()
        elif verdict is Verdict.TURN_OFF:
            return self.turn_off(marker)
        elif verdict is Verdict.STAY_ON and self._repair():
            return Verdict.TURN_ON  # the marker said on, the pollers were not
        return verdict

    def turn_off(self, marker: Marker) -> Verdict:
        """Off, unless a submission touched the marker since `marker` was read."""
        try:
            self.ddb.update_item(
                TableName=self.table_name,
                Key=MARKER_KEY,
                UpdateExpression="SET #s = :off",
                ConditionExpression="#s = :on AND epoch = :e",
                ExpressionAttributeNames={"#s": "state"},
                ExpressionAttributeValues={
                    ":off": {"S": "off"},
                    ":on": {"S": "on"},
                    ":e": {"N": str(marker.epoch)},
                },
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return Verdict.STAY_ON  # a submission got in first: stay on
            raise
        self.board.set(False)
        after = self.marker()
        if after.epoch != marker.epoch:
            # A submission marked "on" while we were disabling: its own enable may have run
            # before our disable. Enable again (its epoch stands; the marker says "on").
            log.warning("a submission raced the switch-off; enabling again")
            # If this fails, the marker goes back to "off" so the next "on" enables again.
            self._enable_or_undo(after.epoch)
            return Verdict.STAY_ON
        log.info("pollers turned off: no live job", extra={"epoch": marker.epoch})
        return Verdict.TURN_OFF
