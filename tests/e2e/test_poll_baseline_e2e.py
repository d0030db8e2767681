"""The poll-only baseline of the local runtime (benchmarks compare respot against it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.local.market import ChaosSchedule
from infra.local.runtime import LocalRuntime, RuntimeOptions
from respot.core.job import AttemptEnd
from respot.spec.training import TrainingEnvVar
from respot.wire.messages import new_job_id

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SESSIONS = Path(__file__).parent / "sessions"


def test_without_notices_a_lost_instance_is_found_by_the_poller_and_the_job_resumes() -> None:
    # GIVEN the runtime in its poll-only mode and a job interrupted once, 3 s after boot; the
    # session is not told, trains on through the 4-s notice window and must not finish in it:
    # at most 7 s, 350 steps of 20 ms, of 1200 (margin for a notice or a termination that
    # comes seconds late); the resumed attempt runs fast
    chaos = ChaosSchedule(job_ids=set())
    options = RuntimeOptions(time_scale=1 / 30, chaos=chaos, react_to_notices=False)
    spec = TrainingEnvVar(
        name="poll",
        entry_point="e2esessions.counting:CountingSession",
        source_dir=str(SESSIONS),
        hyperparameters={
            "steps": 1200,
            "step_seconds": 0.02,
            "resumed_step_seconds": 0.005,
            "checkpoint_every": 40,
        },
        seed=3,
    )
    job_id = new_job_id("poll")
    chaos.add(job_id, 1, 90.0)
    with LocalRuntime(options) as rt:
        assert rt.poller is not None
        # WHEN it runs to the end
        status = rt.run(spec, job_id=job_id).wait(timeout=480, poll_seconds=0.3)
        detections = list(rt.poller.detections)
    record = status.record
    # THEN it completed with the right total, after the poller (not a notice) found the loss
    assert record is not None and status.state == "COMPLETED", record and record.timeline[-3:]
    first = record.attempts[0]
    assert first.notice_at is None and first.end is AttemptEnd.LOST
    assert (job_id, first.instance_id) in detections
    # AND it resumed from a periodic checkpoint (a multiple of 40), never from the notice
    assert record.attempts[1].restored_step is not None
    assert record.attempts[1].restored_step % 40 == 0
    assert first.notice_checkpoint_at is None
