"""A job moves to a satellite region: interrupted at home, resumed in us-west-2 from the
checkpoint copied there, finished, its outputs back home, the move in its ledger once.

Two regions on the moto server: the home deployment in us-east-1 and a satellite in
us-west-2 (`RuntimeOptions(extra_regions=...)`, infra/local/satellite.py). Instances are
real agent processes booted from each region's launch template's user data; the spot market
refuses home capacity once the test takes it. A trace tick is one simulated minute.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from infra.local.market import Trace
from infra.local.runtime import LocalRuntime, RuntimeOptions
from respot.core.cost import ledger
from respot.core.job import AttemptEnd
from respot.storage import layout
from tests.e2e.helpers import (
    counting_spec,
    expected_total,
    output,
    wait_for,
    wait_no_live_instances,
)

pytestmark = pytest.mark.e2e

SCALE = 1.0 / 30.0
WEST = "us-west-2"
A, B = "us-east-1a", "us-east-1b"


def trace(name: str, value: int, length: int = 400) -> Trace:
    return Trace(name, 60, (value,) * length)


@pytest.fixture
def rt() -> Iterator[LocalRuntime]:
    options = RuntimeOptions(
        time_scale=SCALE,
        instance_types=("g5.xlarge",),
        extra_regions=(WEST,),
        pool_traces={
            f"g5.xlarge/{A}": trace("home-a-until-the-test-takes-it", 1),
            f"g5.xlarge/{B}": trace("home-b-never", 0),
            f"g5.xlarge/{WEST}a": trace("west-a", 1),
            f"g5.xlarge/{WEST}b": trace("west-b", 1),
        },
    )
    with LocalRuntime(options) as runtime:
        yield runtime


def test_an_interrupted_job_resumes_in_a_satellite_region(rt: LocalRuntime) -> None:
    assert rt.market is not None and rt.satellites
    west_bucket = rt.satellites[0].bucket
    # GIVEN a job training at home with a checkpoint (no deadline: pools in the fixed order)
    handle = rt.run(
        counting_spec(
            "moves-west",
            hyperparameters={"steps": 600, "step_seconds": 0.02, "checkpoint_every": 50},
        )
    )

    def home_checkpointed() -> bool:
        record = rt.control_plane().jobs.get(handle.job_id)
        return bool(record and record.checkpoint and record.checkpoint.step >= 100)

    wait_for(home_checkpointed, timeout=360)
    # WHEN spot capacity goes from the home pool (the market interrupts the instance)
    rt.market.set_pool_trace(f"g5.xlarge/{A}", trace("home-a-gone", 0))
    status = handle.wait(timeout=720, poll_seconds=0.3)
    record = status.record
    assert record is not None and status.state == "COMPLETED", record and record.timeline[-8:]

    # THEN it was interrupted at home and finished in us-west-2, launched there
    zones = [a.placement.availability_zone for a in record.attempts if a.instance_id]
    assert zones[0] == A and zones[-1].startswith(WEST), zones
    first, last = record.attempts[0], record.attempts[-1]
    assert first.end is AttemptEnd.INTERRUPTED
    # AND it restored there the last checkpoint the home instance wrote: no step lost
    home_steps = [
        parsed[0]
        for key in _keys(rt, rt.sdk_deployment().bucket, layout.manifests_prefix(handle.job_id))
        if (parsed := layout.parse_manifest_key(key)) is not None and parsed[1] == first.number
    ]
    assert last.restored_step == max(home_steps), (last.restored_step, home_steps)
    # AND there it checkpointed into its region's bucket, not across regions to the home one
    west = _keys(rt, west_bucket, layout.manifests_prefix(handle.job_id), client=WEST)
    home = _keys(rt, rt.sdk_deployment().bucket, layout.manifests_prefix(handle.job_id))

    def of_last(keys: list[str]) -> list[str]:
        parsed = [(k, layout.parse_manifest_key(k)) for k in keys]
        return [k for k, p in parsed if p is not None and p[1] == last.number]

    assert of_last(west), west
    assert not of_last(home), home
    # AND the session's result is the uninterrupted one, read from the home bucket
    assert int(output(rt, handle.job_id, "weights.sha256")) == expected_total(600, 2)
    # AND the move is counted once in the ledger, at $0.02/GB of the checkpoint moved
    moved = [a for a in record.attempts if a.transfer_bytes]
    assert [a.number for a in moved] == [last.number] and last.transfer_from == "us-east-1"
    lines = ledger(record, datetime.now(UTC))
    assert sum(1 for line in lines if line.transfer_usd > 0) == 1
    wait_no_live_instances(rt, handle.job_id)


def _keys(rt: LocalRuntime, bucket: str, prefix: str, client: str | None = None) -> list[str]:
    if client is None:
        s3 = rt.client("s3")
    else:
        assert rt.satellites
        s3 = rt.satellites[0].client("s3", rt.sdk_deployment().endpoint_url or "")
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=prefix)
    return [o["Key"] for o in listed.get("Contents", [])]
