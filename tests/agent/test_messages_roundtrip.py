"""What the agent sends must decode on the control plane's side, None fields included."""

from __future__ import annotations

import pytest

from respot.wire.messages import (
    AgentBootFailed,
    AgentCompleted,
    AgentFailed,
    AgentMessage,
    AgentPreempted,
    AgentProgress,
    encode,
    utcnow,
)


def roundtrip(body: object) -> AgentMessage:
    message = AgentMessage(
        job_id="j", attempt=1, instance_id="i-1", seq=1, sent_at=utcnow(), body=body
    )
    return AgentMessage.model_validate_json(encode(message))


def test_messages_with_values_round_trip() -> None:
    assert roundtrip(AgentPreempted(step=5, checkpoint_step=5, notice="stop")).body.kind == (
        "preempted"
    )
    assert roundtrip(AgentProgress()).body.kind == "progress"


@pytest.mark.parametrize(
    "body",
    [
        AgentCompleted(step=None, outputs_prefix="jobs/j/outputs/", train_seconds=1.0),
        AgentPreempted(step=3, checkpoint_step=None, notice="spot-interruption"),
    ],
    ids=["completed-without-step", "preempted-without-checkpoint"],
)
def test_messages_with_none_fields_round_trip(body: AgentCompleted | AgentPreempted) -> None:
    assert roundtrip(body).body == body


def test_boot_failed_travels_in_the_agent_envelope() -> None:
    # What infra/bootstrap/agent-bootstrap.sh sends before powering off (seq 0).
    text = (
        '{"schema_version": 1, "job_id": "j", "attempt": 2, "instance_id": "i-1", "seq": 0,'
        ' "sent_at": "2026-01-01T00:00:00Z", "body": {"kind": "boot_failed",'
        ' "reason": "no Python", "log_tail": ["a", "b"]}}'
    )
    body = AgentMessage.model_validate_json(text).body
    assert isinstance(body, AgentBootFailed)
    assert (body.reason, body.log_tail) == ("no Python", ["a", "b"])
    assert roundtrip(AgentFailed(reason="pip", stage="environment")).body.kind == "failed"
