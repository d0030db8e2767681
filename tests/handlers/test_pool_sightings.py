"""A pool's history keeps an interruption that a reconcile tick raced (respot/core/pool_watch.py).

The race behind the pools e2e flake: the reconcile tick reads a healthy job (its instance
running, no notice), writes nothing to the job, and records a "running" sighting (1) for the
pool. If the interruption notice is handled between that read and that sighting's write, the
notice's 0 lands first and the tick's late 1 for the same tick used to overwrite it: the pool
the job had just been taken from looked available. The reconcile schedule and the market's
trace both turn at tick boundaries, so in the local runtime the two meet often.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from lambdas import reconcile, spot_fulfillment, spot_interruption
from respot.aws.pools import PoolTable
from respot.core.pool_watch import PoolKey, Sighting
from respot.core.states import JobState
from tests.handlers.test_handlers import CONTEXT, Env, env, submit_job

__all__ = ["env"]  # the fixture, shared with the other handler tests

TICK = {"source": "aws.events", "detail-type": "Scheduled Event"}


def test_a_notice_handled_during_a_reconcile_tick_stays_the_pools_last_word(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a job whose spot instance is running, and a clock fixed inside one policy tick
    now = datetime.now(UTC).replace(second=10, microsecond=0)
    monkeypatch.setattr(env.control, "clock", lambda: now)
    job_id, iid = submit_job(env)
    spot_fulfillment.handler(env.ec2_event("spot-request-fulfillment", iid), CONTEXT)
    record = env.control.jobs.get(job_id)
    assert record is not None and record.state is JobState.STARTING
    assert record.current is not None
    pool = PoolKey.of(record.current.placement)
    pools = env.control.pools
    assert isinstance(pools, PoolTable)
    # AND the notice arrives after the tick read the job and before it recorded what it saw
    real_record = pools.record
    raced: list[Sighting] = []

    def notice_first(sighting: Sighting) -> Any:
        if sighting.why == "running" and not raced:
            raced.append(sighting)
            result = spot_interruption.handler(
                env.ec2_event("spot-interruption-warning", iid), CONTEXT
            )
            assert result["state"] == "REQUESTED", result
        return real_record(sighting)

    monkeypatch.setattr(pools, "record", notice_first)
    # WHEN the reconcile tick runs
    reconcile.handler(TICK, CONTEXT)
    # THEN the race really happened (the tick's sighting was judged before the notice) ...
    assert raced and raced[0].seen and raced[0].pool == pool
    # ... and the pool's history ends with the interruption, not the stale "running"
    stored = pools.get(pool)
    assert stored is not None and stored.value_at(raced[0].tick) == 0, stored
    assert stored.last == 0, stored
