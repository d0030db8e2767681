"""End to end: at rest the switched pollers are off; a job turns them on; its end turns them off.

Through the local runtime: the real submit and reconcile handlers, the activity marker in
the job table (moto), the reconcile schedule as an EventBridge rule in moto (the dispatcher
ticks only while it is ENABLED) and the event source mappings of infra/local/mappings.py
(the dispatcher polls a queue only while its mapping is Enabled).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

import lambdas._activity as activity_lambda
from infra.local.runtime import LocalRuntime, RuntimeOptions
from respot.control.activity import ActivitySwitch, Switchboard
from tests.e2e.helpers import counting_spec

pytestmark = pytest.mark.e2e

SCALE = 1.0 / 30.0  # reconcile every 2 s, the 5-minute grace is 10 s
ALL_OFF = {
    "queue:agent-events": False,
    "queue:notifications": False,
    "queue:sweep-events": False,
    "queue:launch-retries": False,
    "schedule:reconcile": False,
}
ALL_ON = {k: True for k in ALL_OFF}


@pytest.fixture(scope="module")
def rt() -> Iterator[LocalRuntime]:
    with LocalRuntime(RuntimeOptions(time_scale=SCALE)) as runtime:
        yield runtime


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def ticks(rt: LocalRuntime) -> int:
    assert rt.dispatcher is not None
    return sum(1 for i in rt.dispatcher.invocations if i.function == "reconcile")


def test_pollers_off_at_rest_on_while_a_job_lives_off_after(rt: LocalRuntime) -> None:
    # GIVEN a fresh deployment at rest
    assert rt.pollers_on() == ALL_OFF
    time.sleep(rt.scale.real(60) * 2.5)  # two and a half reconcile periods
    # THEN nothing ticks and the switched queues are not polled
    assert ticks(rt) == 0
    assert rt.pollers_on() == ALL_OFF
    # WHEN a job is submitted
    handle = rt.run(counting_spec("activity", hyperparameters={"steps": 120}))
    # THEN the pollers come on while it is live, and the schedule ticks
    wait_for(lambda: rt.pollers_on() == ALL_ON, 120, "the pollers to come on")
    status = handle.wait(timeout=360, poll_seconds=0.3)
    assert status.state == "COMPLETED"
    assert ticks(rt) > 0
    # AND once it is over and its Slack news delivered, they go off again (after the grace)
    assert rt.wait_notifications(timeout=120)
    wait_for(lambda: rt.pollers_on() == ALL_OFF, 240, "the pollers to go off at rest")
    record = rt.job_record(handle.job_id)
    assert record is not None and record.state.value == "COMPLETED"
    # AND stay off: no more ticks
    settled = ticks(rt)
    time.sleep(rt.scale.real(60) * 2.5)
    assert ticks(rt) == settled
    assert rt.pollers_on() == ALL_OFF


def test_a_job_submitted_while_the_pollers_are_being_turned_off_still_gets_them(
    rt: LocalRuntime,
) -> None:
    # GIVEN the pollers on for a job that ends, and a tick about to turn them off
    first = rt.run(counting_spec("activity-first", hyperparameters={"steps": 60}))
    assert first.wait(timeout=360, poll_seconds=0.3).state == "COMPLETED"
    raced: dict[str, str] = {}
    submitted_and_on = threading.Event()
    build = rt._build_activity_switch

    def racing_switch() -> ActivitySwitch | None:
        switch = build()
        assert switch is not None
        board: Switchboard = switch.board
        real_set = board.set

        def set_(enabled: bool) -> None:
            if not enabled and not raced:
                # A researcher submits right now: the job goes through the real intake,
                # whose submit handler marks "on" and enables, before this disable runs.
                epoch = switch.marker().epoch
                raced["job"] = rt.run(counting_spec("activity-raced")).job_id
                wait_for(lambda: switch.marker().epoch > epoch, 120, "the submission's 'on'")
                submitted_and_on.set()
            real_set(enabled)

        board.set = set_  # type: ignore[method-assign]
        return switch

    activity_lambda.install(racing_switch)
    try:
        # WHEN the tick at rest disables the pollers after the submission enabled them
        wait_for(submitted_and_on.is_set, 240, "the raced submission")
        # THEN the tick's re-read saw the submission and enabled again: the job completes
        # (its agent messages are handled only while the agent-events mapping is on)
        status = rt.handle(raced["job"]).wait(timeout=360, poll_seconds=0.3)
        assert status.state == "COMPLETED"
    finally:
        activity_lambda.install(rt._build_activity_switch)
    wait_for(lambda: rt.pollers_on() == ALL_OFF, 240, "the pollers to go off at rest")
