"""The instance_state function reads the StateReason EC2 gives a respot instance going down
(the state-change event carries none) and the job's timeline and failure say it."""

from __future__ import annotations

import pytest

from lambdas import instance_state
from respot.core.states import JobState
from tests.handlers.test_handlers import CONTEXT, Env, env, submit_job

__all__ = ["env"]  # the fixture, shared with the other handler tests


def test_the_state_reason_of_a_vanished_instance_is_read_from_ec2_and_said(env: Env) -> None:
    job_id, iid = submit_job(env)
    instance_state.handler(env.ec2_event("instance-state-change", iid, state="running"), CONTEXT)
    env.clients["ec2"].terminate_instances(InstanceIds=[iid])  # EC2: Client.UserInitiatedShutdown
    instance_state.handler(env.ec2_event("instance-state-change", iid, state="terminated"), CONTEXT)
    record = env.control.jobs.get(job_id)
    assert record is not None
    assert record.attempts[0].boot_failure is not None
    assert "EC2 says Client.UserInitiatedShutdown" in record.attempts[0].boot_failure


def test_a_launch_ec2_ended_for_a_kms_key_fails_the_job_with_aws_text(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id, iid = submit_job(env)
    asked: list[str] = []

    def kms_refused(instance_id: str) -> tuple[str, str]:
        asked.append(instance_id)
        return "Client.InternalError", "Client.InternalError: Client error on launch"

    monkeypatch.setattr(env.control.capacity, "state_reason", kms_refused)
    result = instance_state.handler(
        env.ec2_event("instance-state-change", iid, state="shutting-down"), CONTEXT
    )
    assert asked == [iid]
    assert result["state"] == "FAILED"
    record = env.control.jobs.get(job_id)
    assert record is not None and record.state is JobState.FAILED
    assert record.reason is not None
    assert "Client.InternalError: Client error on launch" in record.reason
    assert env.live_instances(job_id) == []  # nothing relaunched


def test_an_unreadable_state_reason_leaves_the_event_as_it_was(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id, iid = submit_job(env)

    def broken(instance_id: str) -> tuple[str, str]:
        raise RuntimeError("RequestLimitExceeded")

    monkeypatch.setattr(env.control.capacity, "state_reason", broken)
    result = instance_state.handler(
        env.ec2_event("instance-state-change", iid, state="terminated"), CONTEXT
    )
    assert result["state"] == "REQUESTED"  # a boot failure, replaced as before
    record = env.control.jobs.get(job_id)
    assert record is not None and len(record.attempts) == 2
    assert "EC2 says" not in (record.attempts[0].boot_failure or "")
