"""A replacement requested just before the job completes, and EC2's late answer to its launch.

The chaos e2e failed `assert_launches_match_attempts` once under load (72a81fc, and again in
a rerun of that test alone): the job's instance got its interruption notice at the last
checkpoint, the replacement attempt was requested, the old instance's agent completed the job
within its notice, and only then was EC2's answer to the replacement's launch applied. No
instance was left unrecorded; the record's last attempt simply has none. These tests play that
interleaving through the pure core, no timing: whatever EC2 answers late, every instance it
started is an attempt's, and nothing the job no longer needs stays up.
"""

from __future__ import annotations

from respot.core.events import (
    AgentReport,
    CapacityLaunched,
    CapacityUnavailable,
    InterruptionNotice,
)
from respot.core.job import AttemptEnd
from respot.core.states import JobState
from respot.wire.messages import AgentCompleted
from tests.core.factories import agent
from tests.core.launch_record import launch_mismatch
from tests.core.test_lifecycle import Driver, started_job


def _notice_then_completion() -> Driver:
    """Attempt 1 on i-1 gets its notice; attempt 2 is requested; attempt 1 completes the job
    before EC2's answer to attempt 2's launch is applied."""
    d = started_job("i-1")
    d.apply(InterruptionNotice("i-1", 1, "interruption", "terminate"), 10)
    assert d.state is JobState.REQUESTED
    assert [launch.attempt for launch in d.launches()] == [1, 2]
    assert d.job is not None
    done = AgentCompleted(step=400, outputs_prefix="o/", train_seconds=8.0)
    d.apply(AgentReport(agent(d.job, 1, "i-1", done, seq=9, sent=11)), 11)
    assert d.state is JobState.COMPLETED
    return d


def test_a_late_capacity_refusal_leaves_an_attempt_that_launched_nothing() -> None:
    # GIVEN the replacement requested, then the job completed by the noticed instance
    d = _notice_then_completion()
    # WHEN EC2's refusal of the replacement's launch is applied after the completion
    replacement = d.launches()[-1]
    late = d.apply(
        CapacityUnavailable(2, replacement.client_token, "InsufficientInstanceCapacity"), 12
    )
    # THEN it changes nothing and launches nothing more
    assert late.record is None and late.effects == []
    assert len(d.launches()) == 2
    assert d.job is not None
    second = d.job.attempt(2)
    assert second is not None
    assert (second.instance_id, second.end) == (None, AttemptEnd.SUPERSEDED)
    # AND the launch invariant holds: EC2 started i-1 only, the one attempt with an instance
    assert launch_mismatch(["i-1"], d.job) is None


def test_a_late_launch_is_recorded_and_terminated() -> None:
    # GIVEN the same interleaving, but EC2 did start the replacement
    d = _notice_then_completion()
    replacement = d.launches()[-1]
    # WHEN its launch result lands after the completion
    d.apply(CapacityLaunched(2, replacement.client_token, "i-2", "sir-2", None, 0.3), 12)
    # THEN the instance is the replacement's (recorded, so no orphan) and is terminated at once
    assert d.job is not None
    second = d.job.attempt(2)
    assert second is not None and second.instance_id == "i-2"
    assert "i-2" in d.terminated()
    assert launch_mismatch(["i-1", "i-2"], d.job) is None


def test_the_invariant_still_names_an_orphan_and_an_instance_ec2_never_started() -> None:
    d = _notice_then_completion()
    assert d.job is not None
    # an instance EC2 started that no attempt records
    orphan = launch_mismatch(["i-1", "i-9"], d.job)
    assert orphan is not None and "no attempt records ['i-9']" in orphan
    # an attempt's instance EC2 never started
    unknown = launch_mismatch([], d.job)
    assert unknown is not None and "EC2 never started ['i-1']" in unknown
    # an attempt without an instance that is still open (a launch still owed)
    live = started_job("i-1")
    live.apply(InterruptionNotice("i-1", 1, "interruption", "terminate"), 10)
    assert live.job is not None
    owed = launch_mismatch(["i-1"], live.job)
    assert owed is not None and "attempts [2] have no instance" in owed
