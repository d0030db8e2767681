"""`respot notebook`'s clear errors (docs/notebooks.md): a name in use, a workspace of another
person, opening one that is stopped, a bad name; each exits 1 with one line naming the fix,
before anything is submitted. The job table is replaced by records made here."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from respot.cli import app
from respot.core.job import Attempt, JobRecord, Placement
from respot.core.placement import Market
from respot.core.states import JobState
from respot.workspace import names, ops
from respot.workspace.tokens import ENV_DIR
from tests.workspace.test_pure import ALICE, BOB, job


def ran(record: JobRecord) -> JobRecord:
    """The record with one attempt (it launched, so it may hold a checkpoint)."""
    attempt = Attempt(
        number=1,
        placement=Placement(
            market=Market.SPOT,
            instance_type="g5.xlarge",
            subnet_id="subnet-1",
            availability_zone="us-east-1a",
        ),
        client_token="t",
        requested_at=record.created_at,
    )
    return record.model_copy(update={"attempts": [attempt]})


RECORDS = [
    job(1, "nlp", ALICE, JobState.RUNNING),
    ran(job(2, "old", ALICE, JobState.COMPLETED)),
    job(4, "old", ALICE, JobState.FAILED),  # refused at submission: never launched
    job(3, "bobs", BOB, JobState.RUNNING),
    ran(job(5, "bobs", BOB, JobState.CANCELLED)),
]


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    submitted: list[Any] = []
    conn = SimpleNamespace(
        deployment=SimpleNamespace(bucket="jobs-bucket"), session=None, local=True
    )
    monkeypatch.setattr("respot.cli.notebook.connect", lambda local: conn)
    monkeypatch.setattr(ops, "records", lambda deployment, session: RECORDS)
    monkeypatch.setattr(ops, "caller_arn", lambda deployment, session: ALICE)
    monkeypatch.setattr(ops, "is_deleted", lambda deployment, session, job_id: False)
    monkeypatch.setattr(ops, "put_token", lambda *a: None)

    def run(spec: Any, **kwargs: Any) -> Any:
        submitted.append(spec)
        return SimpleNamespace(job_id=kwargs["job_id"])

    monkeypatch.setattr("respot.client.handle.run", run)
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


def test_starting_a_stopped_workspace_continues_from_its_newest_launched_job(
    cli: list[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_DIR, str(tmp_path))
    result = invoke("start", "old", "--json")
    assert result.exit_code == 0, result.output
    (spec,) = cli
    assert spec.restore_from == "nb-old-0002"  # not the refused nb-old-0004
    assert spec.tags == {names.TAG: "old"}
    # a new name starts empty, even where someone else has one by that name
    assert invoke("start", "bobs").exit_code == 0
    assert cli[1].restore_from is None
