"""Loans of reserved room in the control plane (issue 26, admission rule 6), on the moto
server: a quota of 8 vCPUs; bo's one-GPU job (4 vCPUs, 3 h) is launching, ann's g5.2xlarge
job (8 vCPUs) waits for the quota, reserved for it from bo's end. cy's 5-hour job fits the
free room but would outlast the reservation: it is admitted on loan, says so (its timeline,
`respot queue`), and its lease in the queue ledger names ann's job. When bo's job ends,
the loan is taken back (cy's agent asked to checkpoint and stop); ann's job is admitted
only once cy's has stopped, so the quota is never exceeded, and cy's job waits its turn to
resume."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from respot.aws.queueledger import QueueLedger
from respot.cli.queue import queue_view
from respot.core.states import JobState
from respot.wire.messages import CancelCommand
from tests.control.test_admission import QUOTA_VCPUS
from tests.control.test_preemption import (
    ANN,
    BO,
    _leased_vcpus,
    _running,
    _state,
    _stop_report,
    _stopping,
    queued,
)
from tests.handlers.test_handlers import Env, env, submission

__all__ = ["env", "queued"]

CY = "arn:aws:iam::123456789012:user/cy"


def _submit(env: Env, who: str, instance_type: str, hours: float) -> str:
    sub = submission(
        instance_types=[instance_type], estimated_runtime=timedelta(hours=hours)
    ).model_copy(update={"submitted_by": who})
    env.control.submit(sub)
    return sub.job_id


def _ledger(env: Env) -> QueueLedger:
    return QueueLedger(env.local.table_name, env.clients["dynamodb"])


def test_reserved_room_is_lent_and_taken_back_when_its_holder_can_start(queued: Env) -> None:
    env = queued
    allowed = (*env.control.settings.allowed_instance_types, "g5.2xlarge")
    env.control.settings = replace(env.control.settings, allowed_instance_types=allowed)
    bo = _submit(env, BO, "g5.xlarge", 3.0)  # launching, not training: never preempted
    ann = _submit(env, ANN, "g5.2xlarge", 3.0)
    assert _state(env, ann) is JobState.HELD
    # WHEN cy submits a job that fits the free room but runs past the reservation's time
    cy = _submit(env, CY, "g5.xlarge", 5.0)
    # THEN it is admitted on loan, and its record and the ledger say for whom
    assert _state(env, cy) is JobState.REQUESTED and len(env.live_instances(cy)) == 1
    record = env.control.jobs.get(cy)
    assert record is not None
    assert any("on loan" in e.text and ann in e.text for e in record.timeline)
    leases = _ledger(env).read().leases
    assert leases[cy].loan_for == ann and leases[bo].loan_for is None
    assert queue_view([], _ledger(env).read(), datetime.now(UTC))["on_loan"] == {cy: ann}
    assert _leased_vcpus(env) <= QUOTA_VCPUS and _state(env, ann) is JobState.HELD
    _running(env, cy)
    env.control.admit("the tick")
    assert _stopping(env, cy) == []  # bo still runs: ann could not start even without it
    # WHEN bo's job ends (cancelled)
    env.control.cancel(CancelCommand(job_id=bo, requested_at=datetime.now(UTC), requested_by=BO))
    # THEN cy's loan is taken back, and ann's job waits until cy's has stopped
    assert _stopping(env, cy) == [cy]
    assert _state(env, ann) is JobState.HELD and _leased_vcpus(env) <= QUOTA_VCPUS
    ledger = _ledger(env).read()
    assert set(ledger.preempting) == {cy} and "taken back" in ledger.preempting[cy]["reason"]
    # WHEN cy's agent reports it stopped after its checkpoint
    _stop_report(env, cy)
    # THEN cy waits in the queue again, and ann's job is admitted at once
    assert _state(env, cy) is JobState.HELD
    assert _state(env, ann) is JobState.REQUESTED and len(env.live_instances(ann)) == 1
    ledger = _ledger(env).read()
    assert set(ledger.leases) == {ann} and ledger.leases[ann].loan_for is None
    assert _leased_vcpus(env) <= QUOTA_VCPUS
