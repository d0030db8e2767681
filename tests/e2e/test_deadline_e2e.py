"""The deadline policy live: the reconcile tick and the placement ask it for jobs with deadlines.

Wall-clock durations of the job (deadline, estimate) are real seconds; EC2's are scaled (x30).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from infra.local.market import Trace
from infra.local.runtime import LocalRuntime, RuntimeOptions
from respot.core.job import Market
from tests.e2e.helpers import counting_spec, expected_total, output, wait_no_live_instances

pytestmark = pytest.mark.e2e

SCALE = 1.0 / 30.0


@pytest.fixture
def rt(request: pytest.FixtureRequest) -> Iterator[LocalRuntime]:
    traces = getattr(request, "param", [])
    options = RuntimeOptions(time_scale=SCALE, traces=traces, changeover_seconds=8.0)
    with LocalRuntime(options) as runtime:
        yield runtime


@pytest.mark.parametrize("rt", [[Trace("no-spot", 600, (0,) * 10)]], indirect=True)
def test_a_tight_deadline_without_spot_buys_on_demand_in_time(rt: LocalRuntime) -> None:
    # GIVEN no spot capacity anywhere, a job that needs ~6 s due in 30 s, and an hour of
    # max_spot_wait that a job without a deadline would spend waiting
    handle = rt.run(
        counting_spec(
            "due-soon",
            deadline="+30s",
            estimated_runtime="6s",
            max_spot_wait="1h",
            hyperparameters={"steps": 150, "step_seconds": 0.02},
        )
    )
    status = handle.wait(timeout=240, poll_seconds=0.3)
    record = status.record
    # THEN the policy bought on-demand once waiting for spot would put the deadline at risk
    assert record is not None and status.state == "COMPLETED", record.timeline[-4:]
    assert [a.placement.market for a in record.attempts] == [Market.ON_DEMAND]
    fallback = next(e for e in record.timeline if e.kind == "fallback")
    assert "deadline policy" in fallback.text
    assert record.spec.deadline is not None and record.finished_at is not None
    assert record.finished_at <= record.spec.deadline
    assert int(output(rt, handle.job_id, "weights.sha256")) == expected_total(150, 2)


def test_a_spot_job_falling_behind_stays_on_spot(rt: LocalRuntime) -> None:
    # GIVEN a job estimated at 3 s, due in 24 s, that really needs ~16 s of training on spot
    # (the estimate leaves 21 s of slack, more than two 8-s changeovers, so it starts on spot;
    # with less, live placement takes on-demand at once: docs/policy.md, "Live use")
    handle = rt.run(
        counting_spec(
            "slower-than-said",
            deadline="+24s",
            estimated_runtime="3s",
            hyperparameters={"steps": 800, "step_seconds": 0.02, "checkpoint_every": 50},
        )
    )
    status = handle.wait(timeout=360, poll_seconds=0.3)
    record = status.record
    # THEN once its measured pace leaves no slack, it trains on where it is: a move to
    # on-demand would pay a changeover and finish later still (docs/policy.md, "Live use")
    assert record is not None and status.state == "COMPLETED", record.timeline[-6:]
    assert [a.placement.market for a in record.attempts] == [Market.SPOT]
    assert record.interruptions == 0
    kinds = [e.kind for e in record.timeline]
    assert "fallback" not in kinds and "switched" not in kinds, kinds
    assert int(output(rt, handle.job_id, "weights.sha256")) == expected_total(800, 2)
    wait_no_live_instances(rt, handle.job_id)
