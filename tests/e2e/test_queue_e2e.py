"""The team's queue through the local runtime (issue 26): with a limit of one GPU per
researcher, three one-GPU jobs of one researcher run one at a time, the high-priority one
before the low one, each admitted when the one before ended (not on a guess), and all
complete with their work intact.

The admin's settings are written into the queue ledger as `respot queue --set-limits` leaves
them (the command's own path is tested on the moto server, tests/control/test_admission.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from infra.local.runtime import LocalRuntime, RuntimeOptions
from respot.aws.queueledger import LedgerState, QueueLedger
from respot.core.states import JobState
from respot.wire.messages import new_job_id
from tests.e2e.helpers import counting_spec, expected_total, output, wait_all, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def rt() -> Iterator[LocalRuntime]:
    with LocalRuntime(RuntimeOptions(time_scale=1.0 / 30.0)) as runtime:
        yield runtime


def test_one_gpu_per_researcher_runs_jobs_one_at_a_time_in_priority_order(
    rt: LocalRuntime,
) -> None:
    assert rt.deployment is not None
    ledger = QueueLedger(rt.deployment.table_name, rt.client("dynamodb"))
    ledger.write(LedgerState(settings={"enabled": True, "researcher_gpus": 1}))
    steps = 120
    specs = {
        name: counting_spec(f"q-{name}", seed=n, priority=prio, hyperparameters={"steps": steps})
        for n, (name, prio) in enumerate((("a", "normal"), ("b", "low"), ("c", "high")))
    }
    ids = {name: new_job_id(spec.name) for name, spec in specs.items()}
    # GIVEN job a admitted and running
    first = rt.run(specs["a"], job_id=ids["a"])
    wait_for(
        lambda: (r := first.record()) is not None and r.admitted_at is not None,
        60,
        "job a admitted",
    )
    # WHEN b (low) and c (high) are submitted while a holds the researcher's one GPU
    later = [rt.run(specs[n], job_id=ids[n]) for n in ("b", "c")]
    statuses = wait_all(rt, [first, *later], timeout=300)
    # THEN all three completed with an uninterrupted run's totals
    records = {}
    for name, status in zip(("a", "b", "c"), statuses, strict=True):
        record = status.record
        assert record is not None and record.state is JobState.COMPLETED, record
        assert int(output(rt, record.job_id, "weights.sha256")) == expected_total(
            steps, "abc".index(name)
        )
        records[name] = record
    a, b, c = records["a"], records["b"], records["c"]
    # AND b and c were held, then admitted one at a time: c (high) when a ended, b when c did
    assert all(any(e.kind == "held" for e in r.timeline) for r in (b, c))
    assert a.finished_at and c.finished_at and b.admitted_at and c.admitted_at
    assert a.finished_at <= c.admitted_at < b.admitted_at
    assert c.finished_at <= b.admitted_at
    # AND the ledger holds no lease once all ended
    wait_for(lambda: not ledger.read().leases, 30, "every lease released")
