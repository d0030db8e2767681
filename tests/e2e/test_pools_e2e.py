"""Live placement across pools: the local market simulates each pool from its own trace.

Pools are instance type x zone (g5.xlarge and g4dn.xlarge in us-east-1a and us-east-1b).
A trace tick is one simulated minute (the reconcile period, the policy's tick): 2 real
seconds at x30. The job's own times (deadline, estimate) are real seconds.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from infra.local.market import Trace
from infra.local.runtime import LocalRuntime, RuntimeOptions
from respot.aws.pools import PoolTable
from respot.core.job import AttemptEnd, JobRecord, Market
from respot.core.pool_watch import PoolKey
from tests.e2e.helpers import (
    counting_spec,
    expected_total,
    output,
    wait_for,
    wait_no_live_instances,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SCALE = 1.0 / 30.0
TICK = 60  # simulated seconds per trace entry
A = "us-east-1a"
B = "us-east-1b"


def trace(name: str, pattern: list[int], length: int = 400) -> Trace:
    """`pattern`, then its last value repeated."""
    return Trace(name, TICK, tuple(pattern + [pattern[-1]] * (length - len(pattern))))


@pytest.fixture
def rt(request: pytest.FixtureRequest) -> Iterator[LocalRuntime]:
    options = RuntimeOptions(time_scale=SCALE, pool_traces=request.param, changeover_seconds=6.0)
    with LocalRuntime(options) as runtime:
        yield runtime


def pools_of(record: JobRecord) -> list[str]:
    return [
        f"{a.placement.market.value} {a.placement.instance_type}/{a.placement.availability_zone}"
        for a in record.attempts
        if a.instance_id
    ]


def _training_in(rt: LocalRuntime, job_id: str, pool: str) -> bool:
    record = rt.control_plane().jobs.get(job_id)
    att = record.current if record else None
    return bool(
        att
        and att.started_at
        and f"{att.placement.instance_type}/{att.placement.availability_zone}" == pool
        and record is not None
        and (record.progress.step or 0) >= 100
    )


GOES_AWAY = {
    f"g5.xlarge/{A}": trace("a-until-the-test-takes-it", [1]),
    f"g5.xlarge/{B}": trace("b-stays", [1]),
    f"g4dn.xlarge/{A}": trace("g4dn-a-never", [0]),
    f"g4dn.xlarge/{B}": trace("g4dn-b-never", [0]),
}


@pytest.mark.parametrize("rt", [GOES_AWAY], indirect=True)
def test_a_job_whose_pool_goes_away_continues_in_another_pool(rt: LocalRuntime) -> None:
    # GIVEN a deadline job on the first pool, which loses its spot capacity for good
    handle = rt.run(
        counting_spec(
            "chases-capacity",
            deadline="+90s",
            estimated_runtime="12s",
            hyperparameters={"steps": 600, "step_seconds": 0.02, "checkpoint_every": 50},
        )
    )
    wait_for(lambda: _training_in(rt, handle.job_id, f"g5.xlarge/{A}"), timeout=60)
    assert rt.market is not None
    rt.market.set_pool_trace(f"g5.xlarge/{A}", trace("a-gone", [0]))
    status = handle.wait(timeout=480, poll_seconds=0.3)
    record = status.record
    assert record is not None and status.state == "COMPLETED", record.timeline[-6:]
    # THEN it was interrupted there and resumed on spot in the pool that still has capacity
    assert pools_of(record)[0] == f"spot g5.xlarge/{A}", pools_of(record)
    assert pools_of(record)[-1] == f"spot g5.xlarge/{B}", pools_of(record)
    assert record.attempts[0].end is AttemptEnd.INTERRUPTED
    assert all(a.placement.market is Market.SPOT for a in record.attempts), [
        e.text for e in record.timeline
    ]
    assert int(output(rt, handle.job_id, "weights.sha256")) == expected_total(600, 2)
    # AND the account remembers what it saw of both pools, for every job
    table = PoolTable(rt.sdk_deployment().table_name, rt.client("dynamodb"))
    seen = table.load([PoolKey("g5.xlarge", A), PoolKey("g5.xlarge", B)])
    a_runs, b_runs = seen[PoolKey("g5.xlarge", A)].runs, seen[PoolKey("g5.xlarge", B)].runs
    assert a_runs[-1][0] == 0 and any(v == 1 for v, _ in a_runs), a_runs
    assert b_runs[-1][0] == 1 and b_runs[-1][1] >= 2, b_runs  # its run aged tick by tick
    wait_no_live_instances(rt, handle.job_id)
    # AND the next job is handed none of that (a job learns from the account's sightings
    # since its own start only: pool_watch.view), so it asks in the fixed order, is refused
    # once by the pool seen gone, and trains in the other
    second = rt.run(
        counting_spec(
            "learns-from-the-first",
            deadline="+30m",
            estimated_runtime="10m",
            hyperparameters={"steps": 100_000, "step_seconds": 0.02},
        )
    )
    wait_for(lambda: _training_in(rt, second.job_id, f"g5.xlarge/{B}"), timeout=60)
    record = rt.control_plane().jobs.get(second.job_id)
    assert record is not None
    assert pools_of(record) == [f"spot g5.xlarge/{B}"], pools_of(record)
    refusal = f"spot/g5.xlarge/{A}: InsufficientInstanceCapacity"
    assert record.attempts[0].tried == [refusal], record.attempts[0].tried
    second.cancel()
    wait_no_live_instances(rt, second.job_id)
