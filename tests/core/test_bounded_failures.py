"""Bounded failures: broken boots, refused launches and quotas end in a clear state, not a loop."""

from __future__ import annotations

from respot.core.events import (
    AgentReport,
    CapacityUnavailable,
    InstanceDown,
    InstanceUp,
    LaunchRefused,
    ReconcileTick,
    Submitted,
)
from respot.core.failures import boot_failures_in_a_row, launch_error_kind
from respot.core.job import AttemptEnd, Market
from respot.core.quotas import QuotaReading, quota_for
from respot.core.states import JobState
from respot.wire.messages import AgentBootFailed, AgentProgress, AgentStarted
from tests.core.factories import SETTINGS, agent, at, submission
from tests.core.test_lifecycle import Driver, started_job


def _boot_fails(d: Driver, instance_id: str, t: float, reason: str = "no agent package") -> None:
    assert d.job is not None
    att = d.job.current
    assert att is not None
    d.launch_ok(instance_id, t)
    d.apply(InstanceUp(instance_id, att.number, "running"), t + 1)
    body = AgentBootFailed(reason=reason, log_tail=["curl: (22) 403", "boot: giving up"])
    d.apply(AgentReport(agent(d.job, att.number, instance_id, body)), t + 2)


def test_three_boot_failures_in_a_row_fail_the_job_with_the_reason() -> None:
    # GIVEN a job whose instances all report a failed boot
    d = Driver()
    d.apply(Submitted(submission()))
    _boot_fails(d, "i-1", 1)
    # THEN the first two are replaced (a new launch each), not counted as interruptions
    assert d.state is JobState.REQUESTED
    assert len(d.launches()) == 2
    assert d.job is not None and d.job.interruptions == 0
    assert "i-1" in d.terminated()
    _boot_fails(d, "i-2", 10)
    assert d.state is JobState.REQUESTED and len(d.launches()) == 3
    # WHEN the third fails too
    _boot_fails(d, "i-3", 20, reason="agent package download from S3 failed: exit 1")
    # THEN the job is FAILED with that reason and the log tail, and nothing more is launched
    assert d.state is JobState.FAILED
    assert len(d.launches()) == 3
    assert d.job.reason is not None
    assert "3 instances in a row never started training" in d.job.reason
    assert "agent package download from S3 failed" in d.job.reason
    failed = d.job.timeline[-1]
    assert failed.kind == "failed" and failed.data["log_tail"][-1] == "boot: giving up"
    assert [a.end for a in d.job.attempts] == [AttemptEnd.BOOT_FAILED] * 3
    assert [e.kind for e in d.job.timeline].count("boot-failed") == 3


def test_a_duplicate_boot_report_counts_once() -> None:
    d = Driver()
    d.apply(Submitted(submission()))
    _boot_fails(d, "i-1", 1)
    assert d.job is not None
    body = AgentBootFailed(reason="no agent package")
    again = d.apply(AgentReport(agent(d.job, 1, "i-1", body)), 5)
    assert again.outcome == "duplicate"
    assert boot_failures_in_a_row(d.job) == 1


def test_instances_that_vanish_before_reporting_count_as_boot_failures() -> None:
    # GIVEN instances that come up, then shut down before any agent report (no boot report)
    d = Driver()
    d.apply(Submitted(submission()))
    for n, t in ((1, 0.0), (2, 10.0), (3, 20.0)):
        d.launch_ok(f"i-{n}", t + 1)
        d.apply(InstanceUp(f"i-{n}", n, "running"), t + 2)
        d.apply(InstanceDown(f"i-{n}", n, "terminated"), t + 3)
    # THEN the third failure fails the job, naming the vanished instance
    assert d.state is JobState.FAILED
    assert d.job is not None and d.job.reason is not None
    assert "i-3 was terminated before its agent reported" in d.job.reason
    assert d.job.interruptions == 0


def test_a_started_attempt_resets_the_count() -> None:
    # GIVEN two boot failures, then an instance that trains, then is lost without notice
    d = Driver()
    d.apply(Submitted(submission()))
    _boot_fails(d, "i-1", 1)
    _boot_fails(d, "i-2", 10)
    d.launch_ok("i-3", 20)
    assert d.job is not None
    d.apply(AgentReport(agent(d.job, 3, "i-3", AgentStarted())), 21)
    d.apply(AgentReport(agent(d.job, 3, "i-3", AgentProgress(step=5), seq=2)), 22)
    d.apply(InstanceDown("i-3", 3, "terminated"), 30)
    # THEN that loss is an interruption, the job goes on, and one more boot failure is not fatal
    assert d.job.interruptions == 1
    assert d.state is JobState.REQUESTED
    _boot_fails(d, "i-4", 40)
    assert d.state is JobState.REQUESTED
    assert boot_failures_in_a_row(d.job) == 1


def test_a_silent_instance_past_boot_timeout_counts_as_a_boot_failure() -> None:
    d = Driver()
    d.apply(Submitted(submission()))
    d.launch_ok("i-1", 1)
    d.apply(InstanceUp("i-1", 1, "running"), 2)
    limit = SETTINGS.boot_timeout.total_seconds()
    # WHEN the reconcile tick finds it silent past boot_timeout
    d.apply(ReconcileTick(at(limit + 10)), limit + 10)
    assert d.job is not None
    assert d.job.attempts[0].end is AttemptEnd.LOST
    assert d.job.attempts[0].boot_failure is not None
    assert "no report from i-1's agent" in d.job.attempts[0].boot_failure
    assert d.job.interruptions == 0
    assert d.state is JobState.REQUESTED  # replaced: 1 of 3


def test_a_boot_report_after_training_started_is_ignored() -> None:
    d = started_job()
    assert d.job is not None
    outcome = d.apply(AgentReport(agent(d.job, 1, "i-1", AgentBootFailed(reason="x"), seq=9)), 9)
    assert outcome.outcome.startswith("ignored")
    assert d.state is JobState.RUNNING


def test_a_refused_launch_fails_the_job_at_once_with_aws_text() -> None:
    # GIVEN a job whose launch EC2 refuses (a mistyped instance type)
    d = Driver()
    d.apply(Submitted(submission(instance_types=["g5.xlarg"])))
    launch = d.launches()[-1]
    message = "Invalid value 'g5.xlarg' for InstanceType."
    d.apply(LaunchRefused(launch.attempt, launch.client_token, "InvalidParameterValue", message), 1)
    # THEN it is FAILED at once, the reason quoting AWS, and nothing else is launched
    assert d.state is JobState.FAILED
    assert d.job is not None and d.job.reason is not None
    assert "InvalidParameterValue: Invalid value 'g5.xlarg' for InstanceType." in d.job.reason
    assert len(d.launches()) == 1


def test_a_stale_refusal_is_ignored() -> None:
    d = Driver()
    d.apply(Submitted(submission()))
    outcome = d.apply(LaunchRefused(1, "rs-old-token", "UnauthorizedOperation", "no"), 1)
    assert outcome.outcome.startswith("ignored")
    assert d.state is JobState.REQUESTED


def test_launch_errors_are_classified() -> None:
    assert launch_error_kind("InsufficientInstanceCapacity") == "capacity"
    assert launch_error_kind("VcpuLimitExceeded") == "quota"
    assert launch_error_kind("MaxSpotInstanceCountExceeded") == "quota"
    assert launch_error_kind("InternalError") == "transient"
    for code in ("InvalidParameterValue", "KMS.DisabledException"):
        assert launch_error_kind(code) == "refused"
    # retried a bounded number of times (a deploy moves the image IAM names first)
    assert launch_error_kind("UnauthorizedOperation") == "unauthorized"


def _quota_error(d: Driver, market: Market, value: float | None, t: float) -> None:
    launch = d.launches()[-1]
    quota = quota_for(launch.placement.instance_type, market)
    assert quota is not None
    reading = QuotaReading(quota=quota, value=value, vcpus=4, region="us-east-1")
    code = "MaxSpotInstanceCountExceeded" if market is Market.SPOT else "VcpuLimitExceeded"
    d.apply(CapacityUnavailable(launch.attempt, launch.client_token, code, "over", reading), t)


def test_a_spot_quota_of_zero_moves_the_job_to_on_demand_and_names_the_fix() -> None:
    # GIVEN a job for g5/g4dn (both "G and VT") and a spot G quota of 0
    d = Driver()
    d.apply(Submitted(submission()))
    _quota_error(d, Market.SPOT, 0.0, 1)
    # THEN no other spot pool of the same quota is tried: the next launch is on-demand
    launch = d.launches()[-1]
    assert len(d.launches()) == 2
    assert launch.placement.market is Market.ON_DEMAND
    assert d.job is not None
    quota_note = next(e for e in d.job.timeline if e.kind == "quota")
    assert "All G and VT Spot Instance Requests" in quota_note.text
    assert "L-3819A6DF" in quota_note.text and "is 0 vCPUs" in quota_note.text
    assert quota_note.data["command"] == (
        "aws service-quotas request-service-quota-increase --service-code ec2 "
        "--quota-code L-3819A6DF --desired-value 4 --region us-east-1"
    )
    assert any(e.kind == "fallback" for e in d.job.timeline)


def test_a_spot_quota_of_zero_without_fallback_fails_the_job() -> None:
    d = Driver()
    d.apply(Submitted(submission(on_demand_fallback=False)))
    _quota_error(d, Market.SPOT, 0.0, 1)
    assert d.state is JobState.FAILED
    assert d.job is not None and d.job.reason is not None
    assert "on_demand_fallback is off" in d.job.reason and "L-3819A6DF" in d.job.reason
    assert len(d.launches()) == 1


def test_an_on_demand_quota_of_zero_fails_the_job() -> None:
    d = Driver()
    d.apply(Submitted(submission()))
    _quota_error(d, Market.SPOT, 0.0, 1)
    _quota_error(d, Market.ON_DEMAND, 0.0, 2)
    assert d.state is JobState.FAILED
    assert d.job is not None and d.job.reason is not None
    assert "Running On-Demand G and VT instances" in d.job.reason
    assert "L-DB2E81BA" in d.job.reason


def test_a_quota_in_use_by_others_waits_like_no_capacity() -> None:
    # GIVEN a spot quota big enough for an instance, but used up by other instances now
    d = Driver()
    d.apply(Submitted(submission()))
    for t in range(4):  # every pool refuses
        _quota_error(d, Market.SPOT, 64.0, t + 1)
    # THEN the job waits (the quota note says which quota), as for a capacity shortage
    assert d.state is JobState.QUEUED
    assert d.job is not None
    assert any(e.kind == "quota" and "64 vCPUs" in e.text for e in d.job.timeline)


def test_quota_codes() -> None:
    g_spot = quota_for("g5.xlarge", Market.SPOT)
    assert g_spot is not None and g_spot.code == "L-3819A6DF"
    g_od = quota_for("g4dn.12xlarge", Market.ON_DEMAND)
    assert g_od is not None and g_od.code == "L-DB2E81BA"
    p_spot = quota_for("p3.2xlarge", Market.SPOT)
    assert p_spot is not None and p_spot.code == "L-7212CCBC"
    std = quota_for("m5.large", Market.SPOT)
    assert std is not None and std.code == "L-34B43A08"
    inf = quota_for("inf2.xlarge", Market.SPOT)
    assert inf is not None and inf.quota_class == "Inf"
    unknown = QuotaReading(quota_for("dl1.24xlarge", Market.ON_DEMAND), None, 96)  # type: ignore[arg-type]
    assert "list-service-quotas" in unknown.increase_command()


def test_a_type_outside_the_allowed_list_fails_at_submit_naming_the_allowed_types() -> None:
    from dataclasses import replace

    from respot.core.lifecycle import decide
    from tests.core.factories import T0

    settings = replace(SETTINGS, allowed_instance_types=("g5.xlarge", "g4dn.xlarge"))
    sub = submission(instance_types=["g5.xlarge", "p4d.24xlarge"])
    decision = decide(None, Submitted(sub), now=T0, settings=settings)
    assert decision.record is not None and decision.record.state is JobState.FAILED
    assert decision.record.reason == (
        "instance_types: p4d.24xlarge is not allowed by this deployment; choose from "
        "g5.xlarge, g4dn.xlarge (the platform team sets allowed_instance_types)"
    )
    assert decision.follow_up is None and decision.effects == []
    ok = decide(
        None, Submitted(submission(instance_types=["g4dn.xlarge"])), now=T0, settings=settings
    )
    assert ok.record is not None and ok.record.state is JobState.QUEUED


def test_a_submission_refused_before_launch_is_failed_with_every_reason_and_no_launch() -> None:
    from dataclasses import replace

    from respot.core.lifecycle import decide
    from tests.core.factories import T0

    # GIVEN the commands function found what the instances may not read, and the type is off
    settings = replace(SETTINGS, allowed_instance_types=("g5.xlarge",))
    sub = submission(instance_types=["p4d.24xlarge"])
    refused = ("secrets.K: respot's instances read only secrets named respot/jobs/...; create it",)
    decision = decide(None, Submitted(sub, refused), now=T0, settings=settings)
    # THEN the job is created FAILED with both problem lines, and nothing is launched
    record = decision.record
    assert decision.outcome == "created"
    assert record is not None and record.state is JobState.FAILED
    assert record.reason == (
        f"{refused[0]}; instance_types: p4d.24xlarge is not allowed by this deployment; "
        "choose from g5.xlarge (the platform team sets allowed_instance_types)"
    )
    assert decision.follow_up is None and decision.effects == [] and record.attempts == []
    assert [n.kind for n in decision.notes] == ["queued", "failed"]
    # AND its redelivery, or any submission with that id, changes nothing
    again = decide(record, Submitted(sub, refused), now=T0, settings=settings)
    assert again.outcome == "duplicate" and again.record is None and again.notes == []
