"""`respot notebook`'s clear errors (docs/notebooks.md): a name in use, a workspace of another
person, opening one that is stopped, a bad name; each exits 1 with one line naming the fix,
before anything is submitted. The job table is replaced by records made here."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from respot.cli import app
from respot.core.states import JobState
from respot.workspace import ops
from tests.workspace.test_pure import ALICE, BOB, job

RECORDS = [
    job(1, "nlp", ALICE, JobState.RUNNING),
    job(2, "old", ALICE, JobState.COMPLETED),
    job(3, "bobs", BOB, JobState.RUNNING),
]


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    submitted: list[Any] = []
    conn = SimpleNamespace(deployment=SimpleNamespace(bucket="b"), session=None, local=True)
    monkeypatch.setattr("respot.cli.notebook.connect", lambda local: conn)
    monkeypatch.setattr(ops, "records", lambda deployment, session: RECORDS)
    monkeypatch.setattr(ops, "caller_arn", lambda deployment, session: ALICE)
    monkeypatch.setattr(ops, "is_deleted", lambda deployment, session, job_id: False)
    monkeypatch.setattr("respot.client.handle.run", lambda *a, **k: submitted.append(a))
    return submitted


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, ["notebook", *args])


def test_a_name_in_use_is_refused_before_anything_is_submitted(cli: list[Any]) -> None:
    result = invoke("start", "nlp")
    assert result.exit_code == 1
    assert "workspace 'nlp' is in use: job nb-nlp-0001 is RUNNING" in result.output
    assert "respot notebook open nlp" in result.output
    assert cli == []


def test_a_workspace_of_another_person_is_refused_naming_the_owner(cli: list[Any]) -> None:
    for command in ("open", "stop"):
        result = invoke(command, "bobs")
        assert result.exit_code == 1, result.output
        assert f"workspace 'bobs' belongs to {BOB}" in result.output
        assert "only its owner may open, stop or delete it" in result.output


def test_opening_a_stopped_workspace_says_start(cli: list[Any]) -> None:
    result = invoke("open", "old")
    assert result.exit_code == 1
    assert "workspace 'old' is stopped" in result.output
    assert "respot notebook start old" in result.output


def test_bad_input_names_the_rule(cli: list[Any]) -> None:
    assert "lowercase letters" in invoke("start", "My Notebook").output
    assert "--idle-minutes" in invoke("start", "fine", "--idle-minutes", "0").output
    assert cli == []
