"""An instance that goes down carries EC2's StateReason; the lifecycle decides by it.

- A launch EC2 ends (pending -> terminated) for capacity or a quota is placed again and is
  not a boot failure; a KMS refusal fails the job at once with AWS's text.
- An instance its own operating system shut down (its agent, after its final report) is not
  replaced before that report has had its chance: the report and the state change are handled
  in either order (docs/limitations.md).
"""

from __future__ import annotations

from respot.core.events import (
    AgentReport,
    InstanceDown,
    InstanceUp,
    ReconcileTick,
    Submitted,
)
from respot.core.failures import (
    MAX_LAUNCH_FAILURES,
    boot_failures_in_a_row,
    describe_state_reason,
    state_reason_kind,
)
from respot.core.job import AttemptEnd
from respot.core.states import JobState
from respot.wire.messages import AgentCompleted, AgentProgress
from tests.core.factories import SETTINGS, agent, at, submission
from tests.core.test_lifecycle import Driver, started_job

VOLUME = ("Client.VolumeLimitExceeded", "Client.VolumeLimitExceeded: Volume limit exceeded")
KMS = ("Client.InternalError", "Client.InternalError: Client error on launch")
CAPACITY = (
    "Server.InsufficientInstanceCapacity",
    "Server.InsufficientInstanceCapacity: Insufficient capacity",
)
OS_SHUTDOWN = (
    "Client.InstanceInitiatedShutdown",
    "Client.InstanceInitiatedShutdown: Instance initiated shutdown",
)


def _ended_at_launch(d: Driver, instance_id: str, t: float, reason: tuple[str, str]) -> None:
    """The newest launch returns `instance_id`, which EC2 ends before it runs (no report)."""
    assert d.job is not None and d.job.current is not None
    number = d.job.current.number
    d.launch_ok(instance_id, t)
    code, message = reason
    d.apply(
        InstanceDown(instance_id, number, "shutting-down", reason=code, reason_message=message),
        t + 1,
    )
    d.apply(
        InstanceDown(instance_id, number, "terminated", reason=code, reason_message=message), t + 2
    )


def test_state_reasons_are_classified_as_aws_documents_them() -> None:
    assert state_reason_kind("Client.VolumeLimitExceeded") == "quota"
    assert state_reason_kind("Server.InsufficientInstanceCapacity") == "capacity"
    assert state_reason_kind("Server.SpotInstanceTermination") == "capacity"
    assert state_reason_kind("Client.InternalError") == "refused"
    assert state_reason_kind("Client.InstanceInitiatedShutdown") == "os-shutdown"
    assert state_reason_kind(None) == "unknown"
    text = describe_state_reason(*KMS)
    assert text.startswith("Client.InternalError: Client error on launch (") and "KMS" in text


def test_launches_ended_by_a_quota_are_placed_again_not_counted_as_boot_failures() -> None:
    d = Driver()
    d.apply(Submitted(submission()))
    for n in range(1, 4):
        _ended_at_launch(d, f"i-{n}", n * 10, VOLUME)
    # three ended launches would have failed the job as boot failures (max_boot_failures=3)
    assert SETTINGS.max_boot_failures == 3
    assert d.state is JobState.REQUESTED and len(d.launches()) == 4
    assert d.job is not None and boot_failures_in_a_row(d.job) == 0
    assert d.job.interruptions == 0
    notes = [e for e in d.job.timeline if e.kind == "capacity"]
    assert len(notes) == 3
    assert "Client.VolumeLimitExceeded" in notes[-1].text and "not a boot failure" in notes[-1].text
    assert all(a.launch_failure for a in d.job.attempts[:3])


def test_launches_ended_by_ec2_are_bounded_and_the_reason_is_said() -> None:
    d = Driver()
    d.apply(Submitted(submission()))
    for n in range(1, MAX_LAUNCH_FAILURES + 1):
        _ended_at_launch(d, f"i-{n}", n * 10, CAPACITY if n % 2 else VOLUME)
    assert d.state is JobState.FAILED
    assert len(d.launches()) == MAX_LAUNCH_FAILURES  # none after the bound
    assert d.job is not None and d.job.reason is not None
    assert f"{MAX_LAUNCH_FAILURES} launches in a row ended by EC2" in d.job.reason
    assert "Client.VolumeLimitExceeded" in d.job.reason and "Service Quotas" in d.job.reason


def test_a_launch_ended_for_a_kms_key_fails_the_job_at_once_with_aws_text() -> None:
    d = Driver()
    d.apply(Submitted(submission()))
    _ended_at_launch(d, "i-1", 1, KMS)
    assert d.state is JobState.FAILED
    assert len(d.launches()) == 1
    assert d.job is not None and d.job.reason is not None
    assert "Client.InternalError: Client error on launch" in d.job.reason
    assert "KMS key" in d.job.reason and "respot doctor" in d.job.reason


def test_an_unexplained_vanishing_is_still_a_boot_failure_and_names_ec2s_reason() -> None:
    d = Driver()
    d.apply(Submitted(submission()))
    d.launch_ok("i-1", 1)
    d.apply(InstanceUp("i-1", 1, "running"), 2)
    d.apply(
        InstanceDown("i-1", 1, "terminated", reason=OS_SHUTDOWN[0], reason_message=OS_SHUTDOWN[1]),
        3,
    )
    assert d.job is not None
    assert d.job.attempts[0].boot_failure is not None
    assert "Client.InstanceInitiatedShutdown" in d.job.attempts[0].boot_failure
    assert boot_failures_in_a_row(d.job) == 1


def _completed(d: Driver, instance_id: str, t: float) -> None:
    assert d.job is not None
    body = AgentCompleted(step=100, outputs_prefix="jobs/job-1/outputs/", train_seconds=99.0)
    d.apply(AgentReport(agent(d.job, 1, instance_id, body, seq=9, sent=t)), t)


def test_a_shutdown_handled_before_the_completion_launches_no_replacement() -> None:
    # GIVEN a running job whose agent sent "completed" and powered its instance off
    d = started_job("i-1")
    assert d.job is not None
    d.apply(AgentReport(agent(d.job, 1, "i-1", AgentProgress(step=50), seq=2, sent=50)), 50)
    launches = len(d.launches())
    # WHEN the instance's state changes are handled first (shutting-down, then terminated)
    code, message = OS_SHUTDOWN
    d.apply(InstanceDown("i-1", 1, "shutting-down", reason=code, reason_message=message), 61)
    d.apply(InstanceDown("i-1", 1, "terminated", reason=code, reason_message=message), 62)
    # THEN nothing is replaced yet, and no interruption is said
    assert d.state is JobState.RUNNING
    assert len(d.launches()) == launches
    # WHEN the completion lands
    _completed(d, "i-1", 63)
    # THEN the job is COMPLETED once, no replacement was ever launched, no "interrupted" note
    assert d.state is JobState.COMPLETED
    assert len(d.launches()) == launches == 1
    kinds = [e.kind for e in d.job.timeline]
    assert kinds.count("completed") == 1
    assert "interrupted" not in kinds
    assert d.job.interruptions == 0
    assert d.job.attempts[0].end is AttemptEnd.COMPLETED


def test_a_shutdown_without_a_final_report_is_replaced_after_the_heartbeat_timeout() -> None:
    d = started_job("i-1")
    code, message = OS_SHUTDOWN
    d.apply(InstanceDown("i-1", 1, "terminated", reason=code, reason_message=message), 10)
    wait = SETTINGS.heartbeat_timeout.total_seconds()
    d.apply(ReconcileTick(at(3 + wait - 60)), 3 + wait - 60)  # last heard at t=3
    assert d.state is JobState.RUNNING and len(d.launches()) == 1
    d.apply(ReconcileTick(at(3 + wait + 1)), 3 + wait + 1)
    assert len(d.launches()) == 2  # replaced: the final report never came
    assert d.job is not None and d.job.attempts[0].end is AttemptEnd.LOST


def test_a_spot_reclaim_without_notice_is_replaced_at_once() -> None:
    d = started_job("i-1")
    d.apply(
        InstanceDown(
            "i-1",
            1,
            "terminated",
            reason="Server.SpotInstanceTermination",
            reason_message="Server.SpotInstanceTermination: Spot instance termination",
        ),
        10,
    )
    assert len(d.launches()) == 2
    assert d.job is not None
    (note,) = [e for e in d.job.timeline if e.kind == "interrupted"]
    assert "Server.SpotInstanceTermination" in note.text
