"""The container's activity switch never depends on what ran before in the process.

The defect these pin: `lambdas._activity` built the switch once per process from whichever
control plane was installed first, and built it (asking the control plane for its table and
queue clients) even when the environment configured no switch. So a valid submission in the
bad-input property test (whose control-plane stand-in has no clients) was reported as a
batch item failure, AttributeError, unless another test had built the switch first in the
same worker: order-dependent, so it showed in some full runs and not others.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

import lambdas._activity as activity_lambda
import lambdas._runtime as runtime
from infra.local.dispatcher import LambdaContext
from lambdas import commands
from respot.control.activity import ENV_MAPPINGS, ENV_RULE
from respot.control.service import Applied
from respot.spec.training import TrainingEnvVar
from respot.wire.messages import JobSubmission
from tests.conftest import aws_event

CONTEXT = LambdaContext("activity", 256, 60)


class SubmitOnly:
    """A control plane that only takes submissions: no table or queue clients at all."""

    def __init__(self) -> None:
        self.submitted: list[str] = []

    def submit(self, sub: JobSubmission, *, refused: Sequence[str] = ()) -> Applied:
        self.submitted.append(sub.job_id)
        return Applied(
            job_id=sub.job_id, event="Submitted", outcome="applied", state="QUEUED", version=1
        )


def _plane(name: str) -> Any:
    """A stand-in with the clients a switch is built on, each named after its control plane."""
    return SimpleNamespace(
        jobs=SimpleNamespace(client=f"{name}-ddb", table_name=f"{name}-table"),
        notifications=SimpleNamespace(client=f"{name}-sqs"),
    )


@pytest.fixture
def fresh_container(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str, str]]]:
    """A new container: nothing built yet, no switch in the environment, dead letters kept."""
    monkeypatch.delenv(ENV_RULE, raising=False)
    monkeypatch.delenv(ENV_MAPPINGS, raising=False)
    activity_lambda.install(None)
    dead: list[tuple[str, str, str]] = []
    yield dead
    runtime.install(None)
    activity_lambda.install(None)


def _batch(*bodies: str) -> dict[str, Any]:
    sample = aws_event("lambda-sqs-event")["Records"][0]
    return {"Records": [{**sample, "messageId": f"m{i}", "body": b} for i, b in enumerate(bodies)]}


def _submission_body() -> str:
    sub = JobSubmission(
        job_id="job-1",
        spec=TrainingEnvVar(name="ok", entry_point="a.b:C"),
        submitted_at=datetime(2026, 11, 21, tzinfo=UTC),
    )
    return json.dumps({"Type": "Notification", "Message": sub.model_dump_json()})


def test_a_valid_submission_after_an_empty_body_is_not_failed_in_a_new_container(
    fresh_container: list[tuple[str, str, str]],
) -> None:
    # GIVEN a new container whose stack configured no activity switch
    control = SubmitOnly()
    runtime.install(
        lambda: control, lambda body, reason, source: fresh_container.append((body, reason, source))
    )
    # WHEN a batch brings an empty (truncated) body, then a valid submission
    response = commands.handler(_batch("", _submission_body()), CONTEXT)
    # THEN the empty one is dead-lettered with its reason and the valid one is simply done
    assert response == {"batchItemFailures": []}
    assert [(body, source) for body, _, source in fresh_container] == [("", "commands")]
    assert control.submitted == ["job-1"]
    # AND no switch exists, so nothing was built on the control plane's clients
    assert activity_lambda.switch() is None


def test_a_switch_from_the_environment_follows_the_installed_control_plane(
    fresh_container: list[tuple[str, str, str]],
    aws_credentials: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a stack that configured a switch, and control plane A installed
    monkeypatch.setenv(ENV_RULE, "respot-reconcile")
    runtime.install(lambda: _plane("a"))
    first = activity_lambda.switch()
    assert first is not None and (first.ddb, first.table_name, first.sqs) == (
        "a-ddb",
        "a-table",
        "a-sqs",
    )
    assert activity_lambda.switch() is first  # built once for its control plane
    # WHEN another control plane is installed (the local runtime, the next test)
    runtime.install(lambda: _plane("b"))
    # THEN the switch is built again on its clients, not kept on A's
    second = activity_lambda.switch()
    assert second is not None and (second.ddb, second.table_name, second.sqs) == (
        "b-ddb",
        "b-table",
        "b-sqs",
    )
