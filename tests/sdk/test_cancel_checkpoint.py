"""A cancel that checkpoints first from the laptop (issue 27): `JobHandle.cancel(...,
checkpoint_first=True)` and `respot cancel --checkpoint` publish it; a non-boolean is refused
naming the field before anything is published; a plain cancel's message is what it always
was (no new key an older control plane would refuse)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from respot.cli import app
from respot.client.handle import JobHandle
from respot.client.status import JobStatus
from respot.core.states import JobState
from respot.wire.messages import CancelCommand, encode

JOB = "train-20261127000000-abc123"


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[CancelCommand]:
    published: list[CancelCommand] = []
    monkeypatch.setattr(JobHandle, "publish", lambda self, command: published.append(command))
    return published


def handle() -> JobHandle:
    return JobHandle(JOB, SimpleNamespace())  # type: ignore[arg-type]


def test_the_sdk_publishes_checkpoint_first_only_when_asked(sent: list[CancelCommand]) -> None:
    handle().cancel("enough", checkpoint_first=True)
    handle().cancel("enough")
    handle().cancel("enough", checkpoint_first=False)
    first, plain, off = sent
    assert json.loads(encode(first))["checkpoint_first"] is True
    for command in (plain, off):
        assert command.checkpoint_first is None and "checkpoint_first" not in encode(command)


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_the_sdk_refuses_a_non_boolean_naming_the_field(
    sent: list[CancelCommand], value: Any
) -> None:
    with pytest.raises(TypeError, match="checkpoint_first must be True or False"):
        handle().cancel("enough", checkpoint_first=value)
    assert sent == []


def test_respot_cancel_checkpoint(
    sent: list[CancelCommand], monkeypatch: pytest.MonkeyPatch
) -> None:
    waits: list[float | None] = []

    def wait(self: JobHandle, timeout: float | None = None, **kwargs: Any) -> JobStatus:
        waits.append(timeout)
        return JobStatus(self.job_id, "CANCELLED", None, None, 0, 1, "kept", None)

    monkeypatch.setattr(JobHandle, "wait", wait)
    conn = SimpleNamespace(
        local=True,
        record=lambda job_id: SimpleNamespace(state=JobState.RUNNING),
        handle=lambda job_id: handle(),
    )
    monkeypatch.setattr("respot.cli.jobs.connect", lambda local: conn)
    asked = CliRunner().invoke(app, ["cancel", JOB, "--checkpoint", "--json"])
    assert asked.exit_code == 0, asked.output
    assert json.loads(asked.stdout)["state"] == "CHECKPOINT AND STOP REQUESTED"
    waited = CliRunner().invoke(app, ["cancel", JOB, "--checkpoint", "--wait"])
    assert waited.exit_code == 0 and "CANCELLED" in waited.output, waited.output
    plain = CliRunner().invoke(app, ["cancel", JOB])
    assert plain.exit_code == 0 and "CANCEL REQUESTED" in plain.output
    assert [c.checkpoint_first for c in sent] == [True, True, None]
    from respot.cli.jobs import CHECKPOINT_WAIT_SECONDS

    assert waits == [CHECKPOINT_WAIT_SECONDS]  # bounded
