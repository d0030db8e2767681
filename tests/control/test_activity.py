"""The activity switch: pollers on while a job is live, off at rest, never off under a live job."""

from __future__ import annotations

import secrets
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from infra.local import cloud
from infra.local.mappings import LocalEventSourceMappings
from respot.control.activity import (
    ActivitySwitch,
    Marker,
    Rest,
    Switchboard,
    SwitchError,
    Verdict,
    decide,
)

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
GRACE = timedelta(minutes=5)
OLD = NOW - timedelta(hours=1)


# ---- the decision --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("marker", "seen", "verdict"),
    [
        (Marker("on", 3, OLD), Rest(live_jobs=2), Verdict.STAY_ON),
        (Marker("off", 3, OLD), Rest(live_jobs=1), Verdict.TURN_ON),  # the tick re-enables
        (Marker(), Rest(live_jobs=1), Verdict.TURN_ON),  # no marker yet: a fresh deployment
        (Marker("on", 3, OLD), Rest(live_jobs=0), Verdict.TURN_OFF),
        (Marker("off", 3, OLD), Rest(live_jobs=0), Verdict.STAY_OFF),
        # a submission this recent may not be in the live index yet
        (Marker("on", 3, NOW - timedelta(minutes=4)), Rest(live_jobs=0), Verdict.STAY_ON),
        (Marker("on", 3, NOW - timedelta(minutes=6)), Rest(live_jobs=0), Verdict.TURN_OFF),
        # an instance still runs (orphan clean-up needs the ticks)
        (Marker("on", 3, OLD), Rest(live_jobs=0, instances=1), Verdict.STAY_ON),
        # the last job's Slack news or agent messages have not drained yet
        (Marker("on", 3, OLD), Rest(live_jobs=0, waiting_messages=2), Verdict.STAY_ON),
    ],
)
def test_decide(marker: Marker, seen: Rest, verdict: Verdict) -> None:
    assert decide(marker, seen, NOW, GRACE) is verdict


# ---- the switch against DynamoDB (moto), EventBridge (moto) and the local mappings ----------


class Rig:
    """A table, a disabled schedule rule, two disabled mappings and a switch over them."""

    def __init__(self, endpoint: str, clock: list[datetime]) -> None:
        prefix = f"act-{secrets.token_hex(3)}"
        self.ddb = cloud.client("dynamodb", endpoint)
        self.events = cloud.client("events", endpoint)
        self.sqs = cloud.client("sqs", endpoint)
        self.table = f"{prefix}-jobs"
        self.ddb.create_table(
            TableName=self.table,
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        self.rule = f"{prefix}-reconcile"
        self.events.put_rule(Name=self.rule, ScheduleExpression="rate(1 minute)", State="DISABLED")
        self.queue = self.sqs.create_queue(QueueName=f"{prefix}-agent-events")["QueueUrl"]
        self.mappings = LocalEventSourceMappings(transition_seconds=0.0)
        self.ids = [
            self.mappings.create("agent-events", "agent_events", enabled=False),
            self.mappings.create("notifications", "notify", enabled=False),
        ]
        self.board = Switchboard(
            self.events, self.mappings, self.rule, self.ids, sleep=lambda s: None
        )
        self.clock = clock
        self.switch = ActivitySwitch(
            ddb=self.ddb,
            table_name=self.table,
            board=self.board,
            sqs=self.sqs,
            queue_urls=[self.queue],
            grace=GRACE,
            clock=lambda: self.clock[0],
        )

    def on(self) -> dict[str, bool]:
        rule = self.events.describe_rule(Name=self.rule)["State"] == "ENABLED"
        return {
            "rule": rule,
            "agent-events": self.mappings.polling("agent-events"),
            "notifications": self.mappings.polling("notifications"),
        }


@pytest.fixture
def rig(moto_endpoint: str) -> Rig:
    return Rig(moto_endpoint, [NOW])


ALL_ON = {"rule": True, "agent-events": True, "notifications": True}
ALL_OFF = {"rule": False, "agent-events": False, "notifications": False}


def test_a_submission_turns_on_and_a_later_tick_at_rest_turns_off(rig: Rig) -> None:
    # GIVEN a fresh deployment: everything created disabled, no marker
    assert rig.on() == ALL_OFF
    # WHEN a job is submitted
    assert rig.switch.ensure_on() is True
    # THEN every switched poller runs; a second submission changes nothing
    assert rig.on() == ALL_ON
    assert rig.switch.ensure_on() is False
    # AND a tick with a live job keeps them on
    assert rig.switch.tick(live_jobs=1) is Verdict.STAY_ON
    # AND a tick with no live job inside the grace keeps them on
    assert rig.switch.tick(live_jobs=0) is Verdict.STAY_ON
    assert rig.on() == ALL_ON
    # WHEN the grace has passed and nothing is live
    rig.clock[0] = NOW + GRACE + timedelta(seconds=1)
    assert rig.switch.tick(live_jobs=0) is Verdict.TURN_OFF
    # THEN everything is off, and the next submission turns it on again
    assert rig.on() == ALL_OFF
    assert rig.switch.marker().state == "off"
    assert rig.switch.ensure_on() is True
    assert rig.on() == ALL_ON


def test_messages_waiting_on_a_switched_queue_keep_it_on(rig: Rig) -> None:
    rig.switch.ensure_on()
    rig.clock[0] = NOW + GRACE * 2
    rig.sqs.send_message(QueueUrl=rig.queue, MessageBody="the last job's completed report")
    assert rig.switch.tick(live_jobs=0) is Verdict.STAY_ON
    assert rig.switch.tick(live_jobs=0, instances=lambda: 0) is Verdict.STAY_ON
    assert rig.on() == ALL_ON


def test_a_running_instance_keeps_the_ticks_on(rig: Rig) -> None:
    rig.switch.ensure_on()
    rig.clock[0] = NOW + GRACE * 2
    assert rig.switch.tick(live_jobs=0, instances=lambda: 1) is Verdict.STAY_ON
    assert rig.on() == ALL_ON


def test_the_tick_re_enables_when_it_sees_live_jobs_with_the_switch_off(rig: Rig) -> None:
    # GIVEN the switch is off (e.g. a tick in flight while the last job ended)
    rig.switch.ensure_on()
    rig.clock[0] = NOW + GRACE * 2
    assert rig.switch.tick(live_jobs=0) is Verdict.TURN_OFF
    # WHEN a tick sees a live job
    assert rig.switch.tick(live_jobs=1) is Verdict.TURN_ON
    # THEN everything is on again
    assert rig.on() == ALL_ON


def test_a_submission_between_the_ticks_read_and_its_write_stops_the_switch_off(rig: Rig) -> None:
    rig.switch.ensure_on()
    rig.clock[0] = NOW + GRACE * 2
    stale = rig.switch.marker()
    rig.switch.ensure_on()  # a submission lands after the tick read the marker
    assert rig.switch.turn_off(stale) is Verdict.STAY_ON
    assert rig.on() == ALL_ON


def test_a_submission_while_the_pollers_are_being_disabled_still_gets_them(rig: Rig) -> None:
    # GIVEN a tick at rest that has written "off" and is disabling the pollers
    rig.switch.ensure_on()
    rig.clock[0] = NOW + GRACE * 2
    submitted = threading.Event()
    real_set = rig.board.set

    def racing_set(enabled: bool) -> None:
        if not enabled and not submitted.is_set():
            # the submission's marker write and its enable land first, before the disable
            submitted.set()
            assert rig.switch.ensure_on() is True  # it saw "off", so it enabled
        real_set(enabled)

    rig.board.set = racing_set  # type: ignore[method-assign]
    # WHEN the tick goes on disabling (undoing the submission's enable)
    verdict = rig.switch.tick(live_jobs=0)
    # THEN the tick's re-read sees the new epoch and enables again: the job has its pollers
    assert submitted.is_set()
    assert verdict is Verdict.STAY_ON
    assert rig.on() == ALL_ON
    assert rig.switch.marker().state == "on"


def test_a_busy_mapping_is_retried_then_the_switch_stops_and_says_why(rig: Rig) -> None:
    class Busy:
        calls = 0

        def update_event_source_mapping(self, **_: Any) -> None:
            from botocore.exceptions import ClientError

            Busy.calls += 1
            raise ClientError(
                {"Error": {"Code": "ResourceInUseException", "Message": "Disabling"}},
                "UpdateEventSourceMapping",
            )

    board = Switchboard(rig.events, Busy(), rig.rule, ["m-1"], sleep=lambda s: None)
    with pytest.raises(SwitchError, match="still busy after 8 tries"):
        board.set(True)
    assert Busy.calls == 8


def test_an_enable_that_fails_leaves_the_switch_off_so_a_retry_enables(rig: Rig) -> None:
    real_set = rig.board.set
    fail = [True]

    def flaky(enabled: bool) -> None:
        if fail[0]:
            raise SwitchError("busy")
        real_set(enabled)

    rig.board.set = flaky  # type: ignore[method-assign]
    with pytest.raises(SwitchError):
        rig.switch.ensure_on()
    assert rig.switch.marker().state == "off"
    fail[0] = False
    assert rig.switch.ensure_on() is True  # the submission's retry
    assert rig.on() == ALL_ON


def test_the_local_mapping_refuses_an_update_while_it_settles() -> None:
    mappings = LocalEventSourceMappings(transition_seconds=30.0)
    uuid = mappings.create("agent-events", "agent_events", enabled=False)
    mappings.update_event_source_mapping(UUID=uuid, Enabled=True)
    assert mappings.get_event_source_mapping(UUID=uuid)["State"] == "Enabling"
    assert not mappings.polling("agent-events")
    from botocore.exceptions import ClientError

    with pytest.raises(ClientError, match="ResourceInUseException"):
        mappings.update_event_source_mapping(UUID=uuid, Enabled=False)


def test_a_failed_re_enable_after_a_race_leaves_the_switch_off_for_the_next_on(rig: Rig) -> None:
    # GIVEN a submission that races the switch-off, and a re-enable by the tick that fails
    rig.switch.ensure_on()
    rig.clock[0] = NOW + GRACE * 2
    real_set = rig.board.set
    calls: list[bool] = []

    def racing_set(enabled: bool) -> None:
        calls.append(enabled)
        if calls == [False]:
            rig.switch.ensure_on()  # the submission: marks "on" and enables
            real_set(False)  # then the tick's disable lands after it
            return
        if len(calls) == 3:  # the tick's re-enable fails
            raise SwitchError("busy")
        real_set(enabled)

    rig.board.set = racing_set  # type: ignore[method-assign]
    with pytest.raises(SwitchError):
        rig.switch.tick(live_jobs=0)
    # THEN the marker says "off", so the next submission (or tick with live jobs) enables
    assert rig.switch.marker().state == "off"
    rig.board.set = real_set  # type: ignore[method-assign]
    assert rig.switch.ensure_on() is True
    assert rig.on() == ALL_ON


def _deploy_disables(rig: Rig) -> None:
    """What a deploy does to a running deployment: the template says disabled, CloudFormation
    applies it to the rule and the mappings; the marker item is not CloudFormation's."""
    rig.events.disable_rule(Name=rig.rule)
    for uuid in rig.ids:
        rig.mappings.update_event_source_mapping(UUID=uuid, Enabled=False)


def test_a_deploy_that_disables_the_pollers_under_live_jobs_is_undone_by_the_next_tick(
    rig: Rig,
) -> None:
    rig.switch.ensure_on()
    _deploy_disables(rig)
    assert rig.on() == ALL_OFF and rig.switch.marker().state == "on"
    # WHEN a tick sees a live job (the marker says on: today's code believed it)
    assert rig.switch.tick(live_jobs=1) is Verdict.TURN_ON
    # THEN the real state was read and everything is on again
    assert rig.on() == ALL_ON
    assert rig.switch.tick(live_jobs=1) is Verdict.STAY_ON  # nothing left to repair


def test_a_submission_after_a_deploy_that_disabled_the_pollers_turns_them_on(rig: Rig) -> None:
    rig.switch.ensure_on()
    _deploy_disables(rig)
    assert rig.switch.ensure_on() is True
    assert rig.on() == ALL_ON
    assert rig.switch.ensure_on() is False
