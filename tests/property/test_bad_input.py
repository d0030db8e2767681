"""Bad input, generated: malformed, truncated, oversize and foreign specs, messages and events.

Specs either validate or fail with `SpecError` lines that name a field; handlers never crash
their batch: unparseable messages go to the dead-letter queue with a reason, foreign events
are ignored, and nothing reaches the control plane unless it parsed.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lambdas._activity as activity_lambda
import lambdas._runtime as runtime
from infra.local.dispatcher import LambdaContext
from lambdas import (
    agent_events,
    commands,
    instance_state,
    spot_fulfillment,
    spot_interruption,
)
from respot.control.service import Applied
from respot.exceptions import SpecError
from respot.spec.training import TrainingEnvVar, validate_spec
from respot.wire.messages import AgentMessage, AgentProgress, JobSubmission
from tests.conftest import aws_event

CONTEXT = LambdaContext("fuzz", 256, 60)
FIELDS = sorted(TrainingEnvVar.model_fields)
FUZZ = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)


class RecordingControlPlane:
    """Stands in for the control plane: records what reaches it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.satellite_role_ids: tuple[str, ...] = ()  # as ControlPlane's, with no satellite

    def _applied(self, job_id: str) -> Applied:
        return Applied(job_id=job_id, event="x", outcome="applied", state="QUEUED", version=1)

    def submit(self, sub: Any, *, refused: Any = ()) -> Applied:
        self.calls.append(("submit", sub))
        return self._applied(sub.job_id)

    def cancel(self, cmd: Any, *, admins: tuple[str, ...] = ()) -> Applied:
        self.calls.append(("cancel", cmd))
        return self._applied(cmd.job_id)

    def apply(self, job_id: str, event: Any) -> Applied:
        self.calls.append(("apply", event))
        return self._applied(job_id)

    def instance_event(self, event: Any) -> Applied | None:
        self.calls.append(("instance", event))
        return None


@pytest.fixture
def plane() -> Iterator[tuple[RecordingControlPlane, list[tuple[str, str, str]]]]:
    control = RecordingControlPlane()
    dead: list[tuple[str, str, str]] = []
    # A new container every time: nothing built by an earlier test in this process (the
    # activity switch once was, so this suite passed or failed by test order).
    activity_lambda.install(None)
    runtime.install(
        lambda: control, lambda body, reason, source: dead.append((body, reason, source))
    )
    yield control, dead
    runtime.install(None)
    activity_lambda.install(None)


def sqs_event(*bodies: str) -> dict[str, Any]:
    sample = aws_event("lambda-sqs-event")["Records"][0]
    return {
        "Records": [
            {**copy.deepcopy(sample), "messageId": f"m{i}", "body": b} for i, b in enumerate(bodies)
        ]
    }


def valid_submission_body() -> str:
    sub = JobSubmission(
        job_id="job-1",
        spec=TrainingEnvVar(name="ok", entry_point="a.b:C"),
        submitted_at=datetime(2026, 11, 21, tzinfo=UTC),
    )
    return json.dumps({"Type": "Notification", "Message": sub.model_dump_json()})


# ---- the spec -------------------------------------------------------------------------------


@FUZZ
@given(
    st.dictionaries(st.sampled_from([*FIELDS, "instance_type", "lr", "x"]), json_values, max_size=8)
)
def test_any_mapping_validates_or_names_the_fields_at_fault(data: dict[str, Any]) -> None:
    try:
        spec = validate_spec(data)
    except SpecError as exc:
        assert exc.problems
        for line in exc.problems:
            head = line.split(":", 1)[0].split(".")[0].split("[")[0]
            assert head in FIELDS or head in data or head == "spec", line
    else:
        assert validate_spec(spec.to_json()) == spec  # what validates round-trips


@FUZZ
@given(st.text(max_size=200))
def test_any_text_as_a_spec_is_a_spec_error(text: str) -> None:
    with pytest.raises(SpecError):
        validate_spec(text)


# ---- queue-fed handlers ---------------------------------------------------------------------


@FUZZ
@given(st.integers(min_value=0), st.sampled_from(["submit", "cancel", "agent"]))
def test_truncated_messages_are_dead_lettered_and_never_fail_the_batch(
    plane: tuple[RecordingControlPlane, list[tuple[str, str, str]]], cut: int, kind: str
) -> None:
    control, dead = plane
    control.calls.clear()
    dead.clear()
    good = {
        "submit": valid_submission_body(),
        "cancel": json.dumps(
            {
                "Type": "Notification",
                "Message": json.dumps(
                    {"command": "cancel", "job_id": "j", "requested_at": "2026-11-21T00:00:00Z"}
                ),
            }
        ),
        "agent": AgentMessage(
            job_id="j",
            attempt=1,
            instance_id="i-1",
            seq=1,
            sent_at=datetime(2026, 11, 21, tzinfo=UTC),
            body=AgentProgress(step=3),
        ).model_dump_json(),
    }[kind]
    body = good[: cut % len(good)]  # every strict prefix is broken JSON
    handler = {"submit": commands, "cancel": commands, "agent": agent_events}[kind].handler
    response = handler(sqs_event(body, good), CONTEXT)
    assert response == {"batchItemFailures": []}
    assert [d[0] for d in dead] == [body] and dead[0][1]
    assert len(control.calls) == 1  # only the intact message got through


@FUZZ
@given(json_values)
def test_foreign_json_on_the_queues_is_dead_lettered_with_a_reason(
    plane: tuple[RecordingControlPlane, list[tuple[str, str, str]]], value: Any
) -> None:
    control, dead = plane
    control.calls.clear()
    dead.clear()
    body = json.dumps(value)
    for module in (commands, agent_events):
        assert module.handler(sqs_event(body), CONTEXT) == {"batchItemFailures": []}
    assert control.calls == []
    assert len(dead) == 2 and all(reason for _, reason, _ in dead)


def test_oversize_agent_message_is_dead_lettered(
    plane: tuple[RecordingControlPlane, list[tuple[str, str, str]]],
) -> None:
    control, dead = plane
    huge = json.dumps(
        {
            "job_id": "j",
            "attempt": 1,
            "instance_id": "i",
            "seq": 1,
            "sent_at": "2026-11-21T00:00:00Z",
            "body": {"kind": "failed", "reason": "x" * 300_000, "bogus": 1},
        }
    )
    assert agent_events.handler(sqs_event(huge), CONTEXT) == {"batchItemFailures": []}
    assert control.calls == [] and len(dead) == 1


# ---- EventBridge-fed handlers ---------------------------------------------------------------


@FUZZ
@given(json_values)
def test_foreign_events_are_ignored(
    plane: tuple[RecordingControlPlane, list[tuple[str, str, str]]], value: Any
) -> None:
    control, _ = plane
    control.calls.clear()
    for module in (spot_fulfillment, spot_interruption, instance_state):
        result = module.handler(value, CONTEXT)
        assert result["outcome"].startswith("ignored")
    assert control.calls == []


@FUZZ
@given(
    st.sampled_from(
        [
            "spot-request-fulfillment",
            "spot-interruption-warning",
            "rebalance-recommendation",
            "instance-state-change",
        ]
    ),
    st.sampled_from(["detail", "detail-type", "source"]),
    json_values,
)
def test_ec2_events_with_a_mangled_part_never_raise(
    plane: tuple[RecordingControlPlane, list[tuple[str, str, str]]],
    name: str,
    part: str,
    junk: Any,
) -> None:
    event = aws_event(name)
    event[part] = junk
    for module in (spot_fulfillment, spot_interruption, instance_state):
        result = module.handler(event, CONTEXT)
        assert "outcome" in result


def test_agent_messages_must_come_from_the_instance_they_name(
    plane: tuple[RecordingControlPlane, list[tuple[str, str, str]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN the stack's instance role id, as the agent_events function gets it on AWS
    control, dead = plane
    monkeypatch.setenv("RESPOT_AGENT_ROLE_ID", "AROAEXAMPLEROLEID")
    body = AgentMessage(
        job_id="j",
        attempt=1,
        instance_id="i-0abc",
        seq=1,
        sent_at=datetime(2026, 11, 21, tzinfo=UTC),
        body=AgentProgress(step=3),
    ).model_dump_json()
    event = sqs_event(body, body)
    event["Records"][0]["attributes"]["SenderId"] = "AROAEXAMPLEROLEID:i-0abc"
    event["Records"][1]["attributes"]["SenderId"] = "AROAEXAMPLEROLEID:i-0evil"
    # WHEN both are handled THEN only the message from i-0abc itself gets through
    assert agent_events.handler(event, CONTEXT) == {"batchItemFailures": []}
    assert len(control.calls) == 1
    assert len(dead) == 1 and "i-0evil" in dead[0][1]
