"""Fair-share preemption in the control plane (issue 26), on the moto server: a quota of two
g5.xlarge held by bo's two running jobs, and ann (below her share) submits one. A pass
preempts bo's newer job (its agent asked to checkpoint and stop, the decision written in the
queue ledger first); nothing is admitted until it has stopped, so the quota is never
exceeded; once it is HELD again with its checkpoint, the next pass releases its lease and
admits ann's job, and bo's job waits its turn to resume. A pass racing another, a repeated
pass or a redelivered stop report preempts nothing more and admits nothing twice; with
`preemption: false` nothing is preempted."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from respot.aws.queueledger import QueueLedger
from respot.control.service import ControlPlane
from respot.core.events import AgentReport
from respot.core.lifecycle.stops import PREEMPTED
from respot.core.states import JobState
from respot.wire.messages import AgentMessage, AgentPreempted, CancelCommand
from tests.control.test_admission import QUOTA_VCPUS, Account, RacingLedger
from tests.control.test_budget_alerts import _settings
from tests.control.test_budget_hard import _control_object, save_training
from tests.handlers.test_handlers import Env, env, submission

__all__ = ["env"]

ANN = "arn:aws:iam::123456789012:user/ann"
BO = "arn:aws:iam::123456789012:user/bo"


@pytest.fixture
def queued(env: Env) -> Iterator[Env]:
    env.control.admission.account = Account(env)
    _settings(env, {"enabled": True})
    yield env


def _submit(env: Env, who: str, hours: float = 3.0) -> str:
    sub = submission(
        instance_types=["g5.xlarge"], estimated_runtime=timedelta(hours=hours)
    ).model_copy(update={"submitted_by": who})
    env.control.submit(sub)
    return sub.job_id


def _running(env: Env, job_id: str) -> None:
    """The job's agent started and checkpointed at step 40 (as its reports would record)."""
    record = env.control.jobs.get(job_id)
    assert record is not None and record.current is not None
    assert record.current.instance_id is not None
    now = datetime.now(UTC)
    att = record.current.model_copy(update={"started_at": now, "last_heard_at": now})
    save_training(env, record, att, now)


def _stop_report(env: Env, job_id: str, seq: int = 99) -> None:
    record = env.control.jobs.get(job_id)
    assert record is not None and record.current is not None
    instance = record.current.instance_id
    assert instance is not None
    body = AgentPreempted(step=44, checkpoint_step=44, notice="stop")
    message = AgentMessage(
        job_id=job_id,
        attempt=1,
        instance_id=instance,
        seq=seq,
        sent_at=datetime.now(UTC),
        body=body,
    )
    env.control.apply(job_id, AgentReport(message))


def _state(env: Env, job_id: str) -> JobState:
    record = env.control.jobs.get(job_id)
    assert record is not None
    return record.state


def _leased_vcpus(env: Env) -> int:
    ledger = QueueLedger(env.local.table_name, env.clients["dynamodb"]).read()
    return sum(lease.vcpus for lease in ledger.leases.values())


def _stopping(env: Env, *job_ids: str) -> list[str]:
    out = []
    for job_id in job_ids:
        record = env.control.jobs.get(job_id)
        if record is not None and "stopping" in record.policy:
            out.append(job_id)
    return out


def _bo_running(env: Env) -> tuple[str, str]:
    first, second = _submit(env, BO), _submit(env, BO)
    _running(env, first)
    _running(env, second)
    return first, second


def test_a_job_below_its_share_preempts_the_newest_job_above_it_and_starts_once_it_stopped(
    queued: Env,
) -> None:
    env = queued
    bo1, bo2 = _bo_running(env)
    # WHEN ann submits a job while bo's two fill the quota (the submission's pass)
    ann = _submit(env, ANN)
    # THEN bo's newer job is asked to checkpoint and stop, the decision in the ledger first
    assert _state(env, ann) is JobState.HELD
    assert _stopping(env, bo1, bo2) == [bo2]
    said = _control_object(env, bo2)
    assert said is not None and said["notice"] == "stop"
    assert "preempted for fair share" in str(said["reason"])
    ledger = QueueLedger(env.local.table_name, env.clients["dynamodb"]).read()
    assert set(ledger.preempting) == {bo2}
    # AND nothing is admitted while it stops: the quota is not exceeded
    assert set(ledger.leases) == {bo1, bo2} and _leased_vcpus(env) <= QUOTA_VCPUS
    held = env.control.jobs.get(ann)
    assert held is not None and held.queue_wait is not None
    assert "room is being freed" in held.queue_wait.reason
    # AND another pass preempts nothing more
    env.control.admit("the tick")
    assert _stopping(env, bo1, bo2) == [bo2] and _state(env, ann) is JobState.HELD
    # WHEN bo2's agent reports it stopped after its checkpoint
    _stop_report(env, bo2)
    # THEN bo2 is HELD again, its checkpoint kept, its instance going; nothing relaunched
    record = env.control.jobs.get(bo2)
    assert record is not None and record.state is JobState.HELD
    assert record.checkpoint is not None and record.checkpoint.step == 40
    assert record.policy[PREEMPTED]["count"] == 1
    assert env.live_instances(bo2) == [] and len(env.instances(bo2)) == 1
    # AND at once, without waiting for a tick, the pass the requeue runs releases bo2's
    # lease and admits ann's job
    assert _state(env, ann) is JobState.REQUESTED and len(env.live_instances(ann)) == 1
    env.control.admit("the tick")
    assert _state(env, ann) is JobState.REQUESTED and len(env.live_instances(ann)) == 1
    ledger = QueueLedger(env.local.table_name, env.clients["dynamodb"]).read()
    assert set(ledger.leases) == {bo1, ann} and ledger.preempting == {}
    assert _leased_vcpus(env) <= QUOTA_VCPUS
    # AND bo2 waits its turn in the queue; bo1 is not preempted for it
    assert _state(env, bo2) is JobState.HELD and _stopping(env, bo1) == []
    # AND a redelivered stop report and more passes admit nothing twice, launch nothing more
    _stop_report(env, bo2, seq=100)
    env.control.admit("the tick")
    env.control.admit("the tick")
    assert _state(env, bo2) is JobState.HELD and len(env.instances(bo2)) == 1
    assert len(env.instances(ann)) == 1
    assert set(QueueLedger(env.local.table_name, env.clients["dynamodb"]).read().leases) == {
        bo1,
        ann,
    }
    # WHEN bo1 ends, bo2 is admitted again: a second attempt, which restores its checkpoint
    env.control.cancel(CancelCommand(job_id=bo1, requested_at=datetime.now(UTC), requested_by=BO))
    record = env.control.jobs.get(bo2)
    assert record is not None and record.state is JobState.REQUESTED
    assert [a.number for a in record.attempts] == [1, 2] and len(env.live_instances(bo2)) == 1


def test_two_passes_racing_preempt_once(queued: Env) -> None:
    env = queued
    bo1, bo2 = _bo_running(env)
    env.control._admitting = True  # the submission's own pass is kept from running
    ann = _submit(env, ANN)
    env.control._admitting = False
    assert _stopping(env, bo1, bo2) == []
    other = ControlPlane(
        jobs=env.control.jobs,
        capacity=env.control.capacity,
        s3=env.control.s3,
        bucket=env.control.bucket,
        settings=env.control.settings,
        admission=None,
    )
    other.admission.account = Account(env)
    other.admission.ledger = env.control.admission.ledger
    real = env.control.admission.ledger
    env.control.admission.ledger = RacingLedger(real, lambda: other.admit("the rival"))
    # WHEN one pass reads the ledger, a rival pass runs whole (and preempts), then the first
    # goes on: its write loses, it reads again and plans with the rival's preemption counted
    env.control.admit("the first")
    # THEN one job is stopping, not two, and ann's job waits for it
    assert _stopping(env, bo1, bo2) == [bo2]
    assert set(real.read().preempting) == {bo2}
    assert _state(env, ann) is JobState.HELD and _leased_vcpus(env) <= QUOTA_VCPUS


def test_with_preemption_off_nothing_is_preempted(queued: Env) -> None:
    env = queued
    _settings(env, {"enabled": True, "preemption": False})
    bo1, bo2 = _bo_running(env)
    ann = _submit(env, ANN)
    env.control.admit("the tick")
    assert _stopping(env, bo1, bo2) == [] and _state(env, ann) is JobState.HELD
    assert _control_object(env, bo2) is None
