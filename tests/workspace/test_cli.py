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


REAL_IS_DELETED = ops.is_deleted


def cli_conn(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The connection the `cli` fixture gives every command."""
    from respot.cli import notebook

    return notebook.connect(False)


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


class FakeS3:
    """The few S3 calls `delete`, `ls` and `start` make, over a dict of keys."""

    def __init__(self, keys: list[str]) -> None:
        self.keys = set(keys)

    def get_paginator(self, name: str) -> Any:
        assert name == "list_objects_v2"
        keys = self.keys

        class Pages:
            def paginate(self, Bucket: str, Prefix: str) -> list[dict[str, Any]]:  # noqa: N803
                return [{"Contents": [{"Key": k} for k in sorted(keys) if k.startswith(Prefix)]}]

        return Pages()

    def delete_objects(self, Bucket: str, Delete: dict[str, Any]) -> None:  # noqa: N803
        self.keys -= {o["Key"] for o in Delete["Objects"]}

    def put_object(self, Bucket: str, Key: str, Body: bytes) -> None:  # noqa: N803
        self.keys.add(Key)

    def head_object(self, Bucket: str, Key: str) -> None:  # noqa: N803
        from botocore.exceptions import ClientError

        if Key not in self.keys:
            raise ClientError({"Error": {"Code": "404"}}, "HeadObject")

    def get_object(self, Bucket: str, Key: str) -> None:  # noqa: N803
        self.head_object(Bucket, Key)


def test_delete_asks_first_refuses_a_running_one_and_removes_only_that_workspaces_files(
    cli: list[Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(ENV_DIR, str(tmp_path))
    ours = ["jobs/nb-old-0002/checkpoints/manifests/1.json", "jobs/nb-old-0004/checkpoints/b/x"]
    others = ["jobs/nb-nlp-0001/checkpoints/manifests/1.json", "jobs/nb-old-0002/outputs/o"]
    s3 = FakeS3(ours + others)
    conn = cli_conn(monkeypatch)
    conn.client = lambda service: s3
    conn.deployment.client = lambda service, session=None: s3
    monkeypatch.setattr(ops, "is_deleted", REAL_IS_DELETED)
    # a running workspace: stop it first
    running = invoke("delete", "nlp", "--yes")
    assert running.exit_code == 1 and "respot notebook stop nlp" in running.output
    # asked, and told no: nothing goes
    declined = CliRunner().invoke(app, ["notebook", "delete", "old"], input="n\n")
    assert declined.exit_code == 1 and "nothing deleted" in declined.output
    assert s3.keys == set(ours + others)
    # asked, and told yes: the checkpoints of its jobs go, nothing else
    done = CliRunner().invoke(app, ["notebook", "delete", "old"], input="y\n")
    assert done.exit_code == 0, done.output
    assert s3.keys == {*others, "jobs/nb-old-0004/workspace-deleted"}  # on its newest job
    # it is gone from `ls`, and starting the name again starts empty
    listed = invoke("ls", "--json")
    assert listed.exit_code == 0 and '"old"' not in listed.output
    assert invoke("start", "old").exit_code == 0
    assert cli[-1].restore_from is None


def test_on_demand_reaches_the_spec_and_spot_stays_the_default(
    cli: list[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_DIR, str(tmp_path))
    result = invoke("start", "gpu", "--on-demand", "--json")
    assert result.exit_code == 0, result.output
    assert '"market": "on-demand"' in result.output
    assert invoke("start", "cheap").exit_code == 0
    on_demand, default = cli
    assert on_demand.market == "on-demand"  # the core launches it on-demand (tests/core)
    assert default.market == "spot"
    # the submitted JSON carries it (what the control plane reads)
    assert '"market":"on-demand"' in on_demand.to_json()


class _RefusingSsm:
    """StartSession as Session Manager answers a researcher without the grant."""

    meta = SimpleNamespace(region_name="us-east-1", endpoint_url="https://ssm.us-east-1")

    def __init__(self) -> None:
        self.sessions = 0

    def start_session(self, **request: Any) -> Any:
        from botocore.exceptions import ClientError

        self.sessions += 1
        raise ClientError(
            {"Error": {"Code": "AccessDeniedException", "Message": "not authorized"}},
            "StartSession",
        )


@pytest.fixture
def aws_open(
    cli: list[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[_RefusingSsm, dict[str, JobRecord]]:
    """`open nlp` on AWS: a running workspace with an instance and a token on this laptop; the
    job table answers what `table` holds now; Session Manager refuses."""
    from respot.workspace import ssm
    from respot.workspace.tokens import save_token

    monkeypatch.setenv(ENV_DIR, str(tmp_path))
    client = _RefusingSsm()
    conn = SimpleNamespace(
        deployment=SimpleNamespace(
            bucket="b", client=lambda name, session=None: client, session=lambda: None
        ),
        session=None,
        local=False,
    )
    monkeypatch.setattr("respot.cli.notebook.connect", lambda local: conn)
    running = ran(RECORDS[0])
    running.attempts[0].instance_id = "i-0123456789abcdef0"
    table = {"now": running}
    monkeypatch.setattr(ops, "records", lambda deployment, session: [running, *RECORDS[1:]])
    monkeypatch.setattr(
        "respot.workspace.local.table_of",
        lambda deployment, session: SimpleNamespace(get=lambda job_id: table["now"]),
    )
    monkeypatch.setattr(ssm, "plugin_problem", lambda *a, **k: None)
    save_token(running.job_id, "t0ken")
    return client, table


def _said_once(result: Any, words: str) -> None:
    """A clear `error:` line, exit 1, no traceback (typer's Exit, not the exception)."""
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    assert "error: " in result.output and words in result.output, result.output


def test_open_on_aws_a_refused_session_is_one_error_line(aws_open: Any) -> None:
    client, _ = aws_open
    result = invoke("open", "nlp", "--port", "8899")
    _said_once(result, "Session Manager refused a tunnel to i-0123456789abcdef0")
    assert "AccessDeniedException" in result.output
    assert "docs/notebooks-platform.md" in result.output  # the fix: its owner, workspaces on
    assert client.sessions == 1  # refused once: not retried


def test_open_on_aws_without_the_plugin_stops_before_any_url_or_session(
    aws_open: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from respot.workspace import ssm

    client, _ = aws_open
    monkeypatch.setattr(ssm, "plugin_problem", lambda *a, **k: "session-manager-plugin is gone")
    result = invoke("open", "nlp", "--port", "8899")
    _said_once(result, "session-manager-plugin is gone")
    assert "127.0.0.1:8899" not in result.output and client.sessions == 0


def test_open_on_aws_of_a_workspace_that_stopped_says_start(aws_open: Any) -> None:
    client, table = aws_open
    # the job ended between the ls and the tunnel (the idle stop, `respot notebook stop`)
    table["now"] = table["now"].model_copy(update={"state": JobState.COMPLETED})
    result = invoke("open", "nlp", "--port", "8899")
    _said_once(result, "workspace 'nlp' stopped")
    assert "respot notebook start nlp" in result.output and client.sessions == 0


@pytest.fixture
def stops(cli: list[Any], monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    """What `respot notebook stop` publishes and how long it waits (no deployment)."""
    from respot.client.handle import JobHandle
    from respot.client.status import JobStatus

    seen: dict[str, list[Any]] = {"sent": [], "waits": []}

    def wait(self: JobHandle, timeout: float | None = None, **kwargs: Any) -> JobStatus:
        seen["waits"].append(timeout)
        if seen.get("late"):
            raise TimeoutError(f"job {self.job_id} is still RUNNING")
        reason = "workspace nlp stopped by its owner by ana; its checkpoint at step 3 is kept"
        return JobStatus(self.job_id, "CANCELLED", None, None, 0, 1, reason, None)

    monkeypatch.setattr(JobHandle, "publish", lambda self, command: seen["sent"].append(command))
    monkeypatch.setattr(JobHandle, "wait", wait)
    return seen


def test_stop_saves_first_says_so_and_waits_until_it_is_stopped(
    stops: dict[str, list[Any]],
) -> None:
    result = invoke("stop", "nlp")
    assert result.exit_code == 0, result.output
    (command,) = stops["sent"]
    assert command.job_id == RECORDS[0].job_id and command.checkpoint_first is True
    assert "saving the workspace, then stopping" in result.output
    assert "stopped (cancelled: " in result.output and "step 3 is kept" in result.output
    assert stops["waits"] == [ops.STOP_WAIT_SECONDS]  # bounded


def test_stop_without_waiting_and_a_stop_that_outlasts_the_wait(
    stops: dict[str, list[Any]],
) -> None:
    quick = invoke("stop", "nlp", "--no-wait")
    assert quick.exit_code == 0 and stops["waits"] == [], quick.output
    assert "saving the workspace, then stopping" in quick.output
    assert stops["sent"][-1].checkpoint_first is True
    stops["late"] = [True]
    late = invoke("stop", "nlp")
    assert late.exit_code == 1 and "is still RUNNING" in late.output, late.output
    assert "respot notebook ls" in late.output and "Traceback" not in late.output
