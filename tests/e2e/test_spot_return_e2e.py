"""On-demand -> spot on the local runtime: the real handlers, agents, market and Slack.

Pools are g5.xlarge in us-east-1a and us-east-1b (the job asks for that type only). A trace
tick is one simulated minute, the reconcile period and the policy's tick: 2 real seconds at
x30; d = 6 real seconds. The job's own times (deadline, estimate) are real seconds.

Why the estimate is pessimistic: a job of seconds has the availability prior of its union of
pools (worth two hours) all to itself, so with an accurate estimate the policy takes
on-demand only near its safety net, with less slack than the return needs (two changeovers:
docs/policy.md, "Live use"). A job that is faster than it said gains the slack back once its
pace is measured (5% of the steps), which is what lets it leave on-demand here; on real jobs
of hours the policy buys on-demand earlier, with slack to spare.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from infra.local.market import Trace
from infra.local.runtime import LocalRuntime, RuntimeOptions
from respot.core.cost import ledger
from respot.core.job import AttemptEnd, JobRecord, Market
from respot.storage import layout
from tests.e2e.helpers import (
    Invariants,
    counting_spec,
    expected_total,
    output,
    wait_for,
    wait_no_live_instances,
)

pytestmark = pytest.mark.e2e

SCALE = 1.0 / 30.0
TICK = 60  # simulated seconds per trace entry
A, B = "us-east-1a", "us-east-1b"
STEPS = 1000  # 0.02 s each: 20 s of training
NO_SPOT = Trace("no-spot", TICK, (0,) * 400)
SPOT_BACK = Trace("spot-back", TICK, (1,) * 400)


@pytest.fixture
def rt() -> Iterator[LocalRuntime]:
    traces = {f"g5.xlarge/{A}": NO_SPOT, f"g5.xlarge/{B}": NO_SPOT}
    options = RuntimeOptions(time_scale=SCALE, pool_traces=traces, changeover_seconds=6.0)
    with LocalRuntime(options) as runtime:
        yield runtime


def record_of(rt: LocalRuntime, job_id: str) -> JobRecord:
    record = rt.control_plane().jobs.get(job_id)
    assert record is not None
    return record


def training_on(rt: LocalRuntime, job_id: str, market: Market) -> bool:
    record = rt.control_plane().jobs.get(job_id)  # None until the submission is handled
    att = record.current if record is not None else None
    return bool(att and att.started_at and att.end is None and att.placement.market is market)


def test_a_job_pushed_to_on_demand_goes_back_to_spot_when_spot_returns(rt: LocalRuntime) -> None:
    invariants = Invariants(rt)
    # GIVEN no spot in any pool, and a deadline job (estimated at 40 s, due in 60 s) that
    # really needs 20 s
    handle = rt.run(
        counting_spec(
            "comes-back",
            deadline="+60s",
            estimated_runtime="40s",
            instance_types=["g5.xlarge"],
            hyperparameters={"steps": STEPS, "step_seconds": 0.02, "checkpoint_every": 50},
        )
    )
    # WHEN every pool refuses it long enough, the policy buys on-demand
    wait_for(lambda: training_on(rt, handle.job_id, Market.ON_DEMAND), 40, "on on-demand")
    record = record_of(rt, handle.job_id)
    assert all(a.placement.market is Market.ON_DEMAND for a in record.attempts if a.instance_id)
    refused = [e.text for e in record.timeline if "InsufficientInstanceCapacity" in e.text]
    assert any(B in text for text in refused), [e.text for e in record.timeline]
    # AND spot comes back in us-east-1b, where another job of the account (no deadline) gets it
    assert rt.market is not None
    rt.market.set_pool_trace(f"g5.xlarge/{B}", SPOT_BACK)
    scout = rt.run(
        counting_spec(
            "scout",
            instance_types=["g5.xlarge"],
            hyperparameters={"steps": 100_000, "step_seconds": 0.02},
        )
    )
    try:
        status = handle.wait(timeout=360, poll_seconds=0.3)
    finally:
        scout.cancel()
        invariants.stop()
    record = status.record
    assert record is not None and status.state == "COMPLETED", [e.text for e in record.timeline]
    # THEN the control plane moved it back to spot (a planned stop, not an interruption) and
    # it finished there, by its deadline
    used = [(a.placement.market, a.placement.availability_zone) for a in record.attempts]
    assert [market for market, _ in used] == [Market.ON_DEMAND, Market.SPOT], used
    assert used[1][1] == B, used
    assert record.interruptions == 0 and record.policy.get("spot_returns") == 1
    kinds = [e.kind for e in record.timeline]
    for kind in ("fallback", "spot-return", "returned", "switched"):
        assert kind in kinds, kinds
    assert kinds.index("fallback") < kinds.index("spot-return") < kinds.index("returned")
    assert kinds.index("returned") < kinds.index("switched")
    assert record.spec.deadline is not None and record.finished_at is not None
    assert record.finished_at <= record.spec.deadline
    # AND spot first: the spot instance was launched while the on-demand one trained on, and
    # the on-demand one stopped only after that (asked once the launch was recorded); the two
    # lived together only for that hand-off
    od, spot = record.attempts
    assert od.notice_at is not None and spot.launched_at is not None and od.ended_at is not None
    assert spot.launched_at <= od.notice_at < od.ended_at
    fleet = {i.instance_id: i for i in rt.fleet.of_job(handle.job_id)} if rt.fleet else {}
    od_inst, spot_inst = fleet[od.instance_id or ""], fleet[spot.instance_id or ""]
    assert od_inst.ended_at is not None and spot_inst.launched_at < od_inst.ended_at
    assert not invariants.violations, invariants.violations[:3]
    assert invariants.max_live[handle.job_id] == 2, dict(invariants.max_live)
    assert invariants.handoffs[handle.job_id] == {(od.instance_id, spot.instance_id)}
    # AND no step lost: spot awaited the on-demand attempt's hand-off and resumed from the
    # checkpoint it wrote when asked to stop; the result is exact
    assert od.end is AttemptEnd.INTERRUPTED and od.checkpoint_step
    assert spot.restored_step == od.checkpoint_step == od.last_step
    assert spot_inst.tags.get("respot:await-handoff") == str(od.number), spot_inst.tags
    # AND the stop was held: the on-demand instance trained on after the spot launch until
    # its successor said it was warm, so the successor's first step came soon after the
    # on-demand's last (the pause is the final checkpoint and the restore, not the boot)
    ready = json.loads(
        rt.client("s3")
        .get_object(
            Bucket=rt.sdk_deployment().bucket, Key=layout.successor_ready_key(handle.job_id, 1)
        )["Body"]
        .read()
    )
    assert od.last_step_at is not None and spot.first_step_at is not None
    assert spot.launched_at < od.last_step_at
    pause = (spot.first_step_at - od.last_step_at).total_seconds()
    print(f"return pause: {pause:.2f}s (on-demand's last step -> spot's first step)")
    (resumed,) = [e for e in record.timeline if e.kind == "resumed" and e.data["attempt"] == 2]
    assert spot.started_at is not None
    since_stop = (spot.started_at - od.notice_at).total_seconds()
    print(
        f"return downtime in the resumed note: {resumed.data['downtime_seconds']:.2f}s "
        f"(counted from the stop request, as until 2026-11-24: {since_stop:.2f}s)"
    )
    assert datetime.fromisoformat(ready["at"]) <= od.last_step_at, (ready, od.last_step_at)
    assert 0 <= pause < 20, pause
    assert int(output(rt, handle.job_id, "weights.sha256")) == expected_total(STEPS, 2)
    # AND the cost ledger bills both, each for its own instance's life: they overlap by the
    # hand-off (spot launched before the on-demand one ended)
    lines = ledger(record, datetime.now(UTC))
    assert [(line.market, line.end) for line in lines] == [
        ("on-demand", "interrupted"),
        ("spot", "completed"),
    ]
    assert all(line.hours > 0 and line.paid_usd > 0 for line in lines), lines
    assert lines[1].started is not None and lines[0].ended is not None
    assert lines[1].started < lines[0].ended
    # AND the Slack thread says what happened, in order (once the notifications drain: the
    # last one is posted after the job is written COMPLETED)
    assert rt.slack is not None and rt.wait_notifications(30)
    where = record.notify["slack"]
    thread = rt.slack.thread(where["channel"], where["ts"])
    texts = [m.text for m in thread.replies]
    fell = next(i for i, t in enumerate(texts) if "Falling back to on-demand" in t)
    back = next(i for i, t in enumerate(texts) if "Back to spot" in t)
    assert fell < back, texts
    # The reply names where it went and why. Whether the scout's launch in us-east-1b was
    # recorded before the return's tick (then "seen up") or not ("to be asked first": a
    # return asks pools nobody asked) is a race this test does not control; each wording is
    # pinned down in tests/core/test_spot_return.py.
    reply = texts[back]
    assert "g5.xlarge us-east-1b" in reply, reply
    assert "spot seen up in" in reply or "spot to be asked first in" in reply, reply
    assert any("Completed" in t for t in texts[back:]), texts
    wait_no_live_instances(rt, handle.job_id)
