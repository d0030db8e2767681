"""Bounded failures end to end: a broken boot and a mistyped instance type end in FAILED."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from infra.local.runtime import LocalRuntime, RuntimeOptions
from respot.core.job import JobRecord
from respot.spec.training import TrainingEnvVar

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def rt() -> Iterator[LocalRuntime]:
    # No allowed list: a mistyped type reaches EC2 (the local market answers as EC2 does).
    options = RuntimeOptions(slack=True, allowed_instance_types=(), log_level="ERROR")
    with LocalRuntime(options) as runtime:
        yield runtime


def _final(rt: LocalRuntime, job_id: str, timeout: float = 180.0) -> JobRecord:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        record = rt.job_record(job_id)
        if record is not None and record.state.is_terminal():
            return record
        time.sleep(0.1)
    raise AssertionError(f"{job_id} did not end: {rt.job_record(job_id)}")


def test_a_broken_boot_fails_the_job_after_three_attempts_with_its_reason(
    rt: LocalRuntime,
) -> None:
    assert rt.fleet is not None
    rt.fleet.broken_boot = ("agent package download from S3 failed: AccessDenied", True)
    try:
        job = rt.run(TrainingEnvVar(name="broken", entry_point="pkg.mod:Session"))
        record = _final(rt, job.job_id)
    finally:
        rt.fleet.broken_boot = None
    assert record.state.value == "FAILED"
    assert record.reason is not None and "3 instances in a row never started" in record.reason
    # the reason is the real boot script's own (the sandbox's S3 endpoint is cut)
    assert "could not download" in record.reason, record.reason
    assert len(record.attempts) == 3 and record.interruptions == 0
    # and the team hears why, in the job's Slack thread
    rt.wait_notifications(60)
    end = time.monotonic() + 30
    while "could not download" not in rt.slack_thread(job.job_id) and time.monotonic() < end:
        time.sleep(0.5)  # the last reply may still be on its way on a loaded machine
    assert "could not download" in rt.slack_thread(job.job_id), rt.slack_thread(job.job_id)


def test_a_mistyped_instance_type_fails_at_once_with_aws_text(rt: LocalRuntime) -> None:
    job = rt.run(
        TrainingEnvVar(name="typo", entry_point="pkg.mod:Session", instance_types=["g5.xlarg"])
    )
    record = _final(rt, job.job_id, timeout=120)
    assert record.state.value == "FAILED"
    assert record.reason is not None
    assert "InvalidParameterValue: Invalid value 'g5.xlarg' for InstanceType." in record.reason
    assert rt.fleet is not None and rt.fleet.of_job(job.job_id) == []
