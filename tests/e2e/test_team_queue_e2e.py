"""The issue's e2e (issue 26) on the local runtime, IAM enforced: a quota of 2 GPUs shared by
3 researchers submitting 9 one-GPU jobs; one researcher's monthly budget crossed (its jobs
held at 100% with the reason, the Slack alert in the channel; raised, they run); one job whose
GPUs stay idle warned in its Slack thread; every job completed with its work intact, in an
order the fair-share rule allows.

- The 2-GPU quota is the platform team's limit `team_gpus: 2` for the one team all three are
  in (the local runtime has no Service Quotas values; vCPU quotas are tested on the moto
  server, tests/control/test_admission.py). The admin's settings are written into the queue
  ledger as `respot queue --set-limits` leaves them.
- The researchers are three IAM users holding the researcher policy; the control plane
  verifies who submitted each job (STS), which is who the queue and the budgets count.
- The idle GPU: every instance here reports one GPU at 0% (a stand-in `pynvml` on the
  instances' PYTHONPATH); `idle_gpus` warns after 1 minute (its smallest period), so one job
  trains for longer than that and the others for much less.
- Fair order is checked against the rule, not timings: a GPU admitted now counts one hour
  of load, far above what seconds-long jobs leave in recent use, so each admission must go
  to a researcher with the fewest GPUs admitted among those with a job that could start
  (`respot.queue.admission`); within a researcher, submission order.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from infra.local import cloud
from infra.local.runtime import LocalRuntime, RuntimeOptions
from respot.aws.queueledger import QueueLedger
from respot.core.job import JobRecord
from respot.core.states import JobState
from respot.exceptions import ConcurrentUpdateError
from respot.wire.messages import new_job_id
from tests.e2e.helpers import counting_spec, expected_total, output, wait_all, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FAKE_GPU = Path(__file__).parent / "fakegpu"
QUOTA_GPUS = 2
TINY_BUDGET = 0.0001  # USD: crossed by the first seconds of one spot instance
STEPS = 40


@pytest.fixture(scope="module")
def rt() -> Iterator[LocalRuntime]:
    options = RuntimeOptions(
        time_scale=1.0 / 30.0,
        iam=True,
        idle_gpus={"threshold_pct": 5, "period_minutes": 1, "action": "warn"},
        agent_env={"PYTHONPATH": str(FAKE_GPU), "RESPOT_GPU_SAMPLE_SECONDS": "0.25"},
    )
    with LocalRuntime(options) as runtime:
        yield runtime


def _write_settings(ledger: QueueLedger, settings: dict[str, Any]) -> None:
    """The admin's settings into the ledger (compare-and-set, as `set_settings` does)."""
    for _ in range(20):
        state = ledger.read()
        try:
            ledger.write(replace(state, settings=settings))
            return
        except ConcurrentUpdateError:
            continue
    raise AssertionError("the queue ledger kept changing")


def _who(session: Any, rt: LocalRuntime) -> str:
    assert rt.deployment is not None
    sts = cloud.client_of(session, "sts", rt.deployment.endpoint_url)
    return str(sts.get_caller_identity()["Arn"])


def _fair_order_violations(
    records: list[JobRecord], exempt: dict[str, tuple[float, float]]
) -> list[str]:
    """Admissions that went to a researcher with more GPUs admitted than another researcher
    who had a job that could start then; `exempt`: researcher -> (from, to) seconds when the
    budget held it (not a candidate)."""
    problems = []
    for job in records:
        t = job.admitted_at
        assert t is not None
        running: dict[str, int] = {}
        waiting: set[str] = set()
        for other in records:
            owner = other.submission.submitted_by or "?"
            if other.admitted_at is not None and other.admitted_at < t:
                if other.finished_at is None or other.finished_at > t:
                    running[owner] = running.get(owner, 0) + 1
            elif other is not job and other.created_at < t:
                span = exempt.get(owner)
                if span is None or not span[0] <= t.timestamp() <= span[1]:
                    waiting.add(owner)
        me = job.submission.submitted_by or "?"
        mine = running.get(me, 0)
        fewer = [w for w in waiting if running.get(w, 0) < mine]
        if fewer:
            problems.append(
                f"{job.job_id} of {me} admitted at {t} with {mine} GPU(s) admitted, while "
                f"{fewer} had fewer and a job waiting"
            )
    return problems


def test_three_researchers_share_two_gpus_fairly_within_budgets(rt: LocalRuntime) -> None:
    assert rt.deployment is not None and rt.iam is not None and rt.slack is not None
    slack = rt.slack
    ledger = QueueLedger(rt.deployment.table_name, rt.client("dynamodb"))
    sessions = {
        name: cloud.session_for(rt.iam.add_researcher(f"queue-{name}"))
        for name in ("ann", "bo", "cy")
    }
    arn = {name: _who(s, rt) for name, s in sessions.items()}
    settings = {
        "enabled": True,
        "team_gpus": QUOTA_GPUS,
        "researcher_budgets": {arn["cy"]: TINY_BUDGET},
    }
    _write_settings(ledger, settings)

    # GIVEN 9 one-GPU jobs: ann's first trains for longer than the idle period, the rest for
    # a second or two; ann submits hers first, then bo, then cy
    plan: list[tuple[str, str, int, float]] = []  # (researcher, job id, seed, step seconds)
    for name in ("ann", "bo", "cy"):
        for k in range(3):
            long = name == "ann" and k == 0
            plan.append((name, new_job_id(f"tq-{name}{k}"), len(plan), 2.0 if long else 0.03))
    handles = {}
    for name, job_id, seed, step_seconds in plan:
        spec = counting_spec(
            f"tq-{name}",
            seed=seed,
            instance_types=["g5.xlarge"],
            hyperparameters={"steps": STEPS, "step_seconds": step_seconds, "checkpoint_every": 20},
        )
        handles[job_id] = rt.run(spec, job_id=job_id, session=sessions[name])
    ids = {name: [j for n, j, _, _ in plan if n == name] for name in arn}

    # THEN cy's jobs after the first are held for its budget once its first has run, and the
    # channel says cy crossed 100%
    def cy_held_for_budget() -> bool:
        # cy's next job waits for the budget; the one behind it waits its turn behind it
        for job_id in ids["cy"][1:]:
            r = rt.handle(job_id).record()
            if r is None or r.state is not JobState.HELD or r.queue_wait is None:
                return False
            if f"budget: researcher {arn['cy']} has spent $" not in r.queue_wait.reason:
                return False
        return True

    wait_for(cy_held_for_budget, 600, "cy's later jobs held for its budget")
    held_from = time.time()
    budget_alert = f"Budget 100%: researcher {arn['cy']}"
    wait_for(
        lambda: any(
            budget_alert in m.text for m in slack.workspace.top_level(rt.options.slack_channel)
        ),
        120,
        "the 100% budget alert for cy in the channel",
    )
    said = rt.handle(ids["cy"][1]).record()
    assert said is not None and said.queue_wait is not None
    assert said.queue_wait.kind == "budget"
    assert said.queue_wait.reason.startswith(f"budget: researcher {arn['cy']} has spent $")

    # AND the job whose GPUs stay idle gets its warning in its Slack thread
    idle_id = ids["ann"][0]

    def idle_warned() -> bool:
        r = rt.handle(idle_id).record()
        if r is None or "slack" not in r.notify:
            return False
        thread = slack.thread(r.notify["slack"]["channel"], r.notify["slack"]["ts"])
        return any("GPUs idle" in m.text for m in thread.replies)

    wait_for(idle_warned, 600, "the idle-GPU warning in the idle job's thread")

    # WHEN ann's and bo's jobs are all over, the platform team raises cy's budget
    wait_all(rt, [handles[j] for j in ids["ann"] + ids["bo"]], timeout=600)
    for job_id in ids["cy"][1:]:
        r = rt.handle(job_id).record()
        assert r is not None and r.state is JobState.HELD, (job_id, r and r.state)
    raised = time.time()
    _write_settings(ledger, {**settings, "researcher_budgets": {arn["cy"]: 1000.0}})

    # THEN every job completes with an uninterrupted run's totals
    statuses = wait_all(rt, [handles[j] for _, j, _, _ in plan], timeout=600)
    records = []
    for (_, job_id, seed, _), status in zip(plan, statuses, strict=True):
        record = status.record
        assert record is not None and record.state is JobState.COMPLETED, record
        assert int(output(rt, job_id, "weights.sha256")) == expected_total(STEPS, seed)
        assert record.submission.submitted_by in arn.values()
        records.append(record)
    # AND never more than the quota's GPUs admitted at once
    edges = sorted(
        [(r.admitted_at, 1) for r in records if r.admitted_at]
        + [(r.finished_at, -1) for r in records if r.finished_at]
    )
    admitted = 0
    for _, step in edges:
        admitted += step
        assert admitted <= QUOTA_GPUS
    # AND each researcher's jobs were admitted in submission order
    for name in arn:
        mine = [r for r in records if r.job_id in ids[name]]
        starts: list[datetime] = [r.admitted_at for r in mine if r.admitted_at]
        assert starts == sorted(starts), name
    # AND every admission went to a researcher with the fewest GPUs among those waiting (cy
    # not a candidate while its budget held it)
    cy_first = next(r for r in records if r.job_id == ids["cy"][0])
    assert cy_first.admitted_at is not None and cy_first.admitted_at.timestamp() < held_from
    held_span = (cy_first.admitted_at.timestamp(), raised)
    assert _fair_order_violations(records, {arn["cy"]: held_span}) == []
    # AND cy's held jobs started only once its budget was raised
    for job_id in ids["cy"][1:]:
        r = next(r for r in records if r.job_id == job_id)
        assert r.admitted_at is not None and r.admitted_at.timestamp() >= raised
