"""The pure parts of workspaces: names, the idle rule, the spec `start` builds, which jobs are
whose workspaces (the owner rule), the laptop's token file, the tunnel following its target."""

from __future__ import annotations

import contextlib
import json
import socket
import stat
import threading
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from respot.core.job import JobRecord
from respot.core.states import JobState
from respot.exceptions import NotOwnerError
from respot.storage import layout
from respot.wire.messages import JobSubmission
from respot.workspace import names
from respot.workspace.catalog import WorkspaceError, find, live_or_explain, mine, workspaces
from respot.workspace.idle import IdleWatch, last_active
from respot.workspace.serve import WorkspaceError as ServeError
from respot.workspace.serve import note_text, supervisor_from_env
from respot.workspace.spec import JUPYTERLAB, workspace_spec, write_code
from respot.workspace.tokens import ENV_DIR, new_token, read_token, save_token
from respot.workspace.tunnel import NotReachableError, Tunnel

T0 = datetime(2026, 11, 27, 1, 0, tzinfo=UTC)
ALICE = "arn:aws:iam::123456789012:user/alice"
BOB = "arn:aws:iam::123456789012:user/bob"


# ---- names -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "nlp", "alice-nlp-2", "x" * 32])
def test_good_names(name: str) -> None:
    assert names.check_name(name) == name


@pytest.mark.parametrize("name", ["", "A", "1abc", "-a", "a-", "a_b", "a b", "x" * 33, "é"])
def test_bad_names_say_the_rule(name: str) -> None:
    with pytest.raises(names.WorkspaceNameError, match="lowercase letters, digits and '-'"):
        names.check_name(name)


@pytest.mark.parametrize("minutes", [0, 0.5, 7 * 24 * 60 + 1, -3])
def test_idle_minutes_out_of_range_name_the_flag(minutes: float) -> None:
    with pytest.raises(ValueError, match="--idle-minutes"):
        names.check_idle_minutes(minutes)


# ---- the idle rule ---------------------------------------------------------------------------


def status(last: datetime, connections: int = 0) -> dict[str, object]:
    return {"last_activity": last.isoformat().replace("+00:00", "Z"), "connections": connections}


def test_no_activity_for_idle_minutes_is_idle() -> None:
    watch = IdleWatch(30 * 60, started=T0)
    quiet = status(T0)
    assert not watch.is_idle(T0 + timedelta(minutes=29))
    watch.observe(quiet, [], T0 + timedelta(minutes=29, seconds=59))
    assert not watch.is_idle(T0 + timedelta(minutes=29, seconds=59))
    watch.observe(quiet, [], T0 + timedelta(minutes=30))
    assert watch.is_idle(T0 + timedelta(minutes=30))
    assert "no kernel activity and no connected browser" in watch.reason(T0 + timedelta(minutes=30))


def test_a_busy_kernel_or_a_connected_notebook_is_activity_whatever_last_activity_says() -> None:
    watch = IdleWatch(60, started=T0)
    later = T0 + timedelta(minutes=10)
    busy = [{"execution_state": "busy", "connections": 0, "last_activity": T0.isoformat()}]
    assert watch.observe(status(T0), busy, later) == 0  # a silent hour-long cell is work
    watch2 = IdleWatch(60, started=T0)
    open_tab = [{"execution_state": "idle", "connections": 1, "last_activity": T0.isoformat()}]
    assert watch2.observe(status(T0), open_tab, later) == 0
    watch3 = IdleWatch(60, started=T0)
    assert watch3.observe(status(T0, connections=2), [], later) == 0


def test_api_activity_moves_the_clock_and_an_older_report_never_moves_it_back() -> None:
    watch = IdleWatch(60, started=T0)
    watch.observe(status(T0 + timedelta(seconds=50)), [], T0 + timedelta(seconds=55))
    assert watch.idle_for(T0 + timedelta(seconds=100)) == 50
    watch.observe(status(T0), [], T0 + timedelta(seconds=100))  # stale: ignored
    assert watch.active == T0 + timedelta(seconds=50)
    assert last_active({"last_activity": "garbage"}, [], T0) is None


# ---- the spec --------------------------------------------------------------------------------


JOB = "nb-nlp-20261127-0100-abcdef"


def spec_of(tmp_path: Path, **kwargs: object) -> object:
    return workspace_spec("nlp", job_id=JOB, bucket="jobs-bucket", source_dir=tmp_path, **kwargs)


def test_the_spec_is_a_tagged_command_job_with_a_max_runtime_and_no_token(tmp_path: Path) -> None:
    assert len(new_token()) == 48
    reqs = write_code(tmp_path, None)
    assert reqs is None and sorted(p.name for p in tmp_path.iterdir()) == ["README.txt"]
    spec = spec_of(tmp_path, requirements=reqs, idle_minutes=5, local=True, max_runtime="8h")
    assert spec.command == names.COMMAND and spec.tags == {names.TAG: "nlp"}
    assert spec.max_runtime == timedelta(hours=8)
    assert spec.hyperparameters == {"idle_minutes": 5, "port": 0}
    # the token is an object of its own, named (not held) by the spec: the agent downloads it
    (source,) = spec.data
    assert source.s3_uri == f"s3://jobs-bucket/{layout.workspace_token_key(JOB)}"
    assert source.local_path == names.TOKEN_DATA_PATH
    assert layout.WORKSPACE_TOKEN == names.TOKEN_OBJECT  # the key the researcher policy denies
    aws = workspace_spec("nlp", job_id=JOB, bucket="jobs-bucket", source_dir=tmp_path, local=False)
    assert "port" not in aws.hyperparameters  # JupyterLab on 8888 of the instance
    assert aws.max_runtime == timedelta(hours=12)  # every workspace has one


def test_requirements_get_jupyterlab_and_a_missing_file_is_named(tmp_path: Path) -> None:
    mine_ = tmp_path / "mine.txt"
    mine_.write_text("pandas==2.2.3\n")
    assert write_code(tmp_path / "code", mine_) == "requirements.txt"
    lines = (tmp_path / "code" / "requirements.txt").read_text().splitlines()
    assert lines == ["pandas==2.2.3", JUPYTERLAB]
    with pytest.raises(FileNotFoundError, match="--requirements"):
        write_code(tmp_path / "code2", tmp_path / "nope.txt")


def test_bad_settings_are_refused_before_anything_is_spent(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--idle-minutes"):
        spec_of(tmp_path, idle_minutes=0)
    with pytest.raises(ValueError, match="workspace settings"):
        spec_of(tmp_path, settings={"idel_minutes": 1})
    with pytest.raises(names.WorkspaceNameError):
        workspace_spec("NLP", job_id=JOB, bucket="jobs-bucket", source_dir=tmp_path)


# ---- which jobs are whose workspaces ---------------------------------------------------------


def job(n: int, name: str, owner: str, state: JobState, *, workspace: bool = True) -> JobRecord:
    command = names.COMMAND if workspace else ["python", "train.py"]
    body = {"name": f"nb-{name}", "command": command, "tags": {names.TAG: name}}
    job_id = f"nb-{name}-{n:04d}"
    return JobRecord(
        job_id=job_id,
        state=state,
        created_at=T0 + timedelta(minutes=n),
        updated_at=T0,
        submission=JobSubmission.model_validate(
            {"job_id": job_id, "spec": body, "submitted_at": T0, "submitted_by": owner}
        ),
    )


def test_names_are_per_owner_and_only_the_owner_finds_theirs() -> None:
    records = [
        job(1, "nlp", ALICE, JobState.CANCELLED),
        job(2, "nlp", ALICE, JobState.RUNNING),
        job(3, "nlp", BOB, JobState.RUNNING),
        job(4, "cv", BOB, JobState.COMPLETED),
        job(5, "nlp", ALICE, JobState.COMPLETED, workspace=False),  # a job, not a workspace
    ]
    assert {(w.owner, w.name) for w in workspaces(records)} == {
        (ALICE, "nlp"),
        (BOB, "nlp"),
        (BOB, "cv"),
    }
    alices = find(records, "nlp", ALICE)
    assert alices is not None and [j.job_id for j in alices.jobs] == ["nb-nlp-0002", "nb-nlp-0001"]
    assert alices.state == "running" and alices.live is records[1]
    assert [w.name for w in mine(records, ALICE)] == ["nlp"]
    with pytest.raises(NotOwnerError, match=f"belongs to {BOB}"):
        find(records, "cv", ALICE)  # only Bob has a 'cv': Alice may not open or stop it
    assert find(records, "other", ALICE) is None


def test_opening_a_stopped_or_unknown_workspace_says_start() -> None:
    records = [job(1, "nlp", ALICE, JobState.COMPLETED)]
    stopped = find(records, "nlp", ALICE)
    assert stopped is not None and stopped.state == "stopped"
    with pytest.raises(WorkspaceError, match="respot notebook start nlp"):
        live_or_explain(stopped, "nlp")
    with pytest.raises(WorkspaceError, match="respot notebook start ghost"):
        live_or_explain(None, "ghost")


# ---- the laptop's token ----------------------------------------------------------------------


def test_the_token_file_is_0600_in_a_0700_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_DIR, str(tmp_path / "nb"))
    path = save_token("nb-nlp-0001", "secret")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert read_token("nb-nlp-0001") == "secret" and read_token("nb-nlp-0002") is None


# ---- the supervisor's settings and note ------------------------------------------------------


def test_the_supervisor_reads_its_settings_from_the_hyperparameters(tmp_path: Path) -> None:
    token = tmp_path / "data" / names.TOKEN_DATA_PATH / names.TOKEN_OBJECT
    token.parent.mkdir(parents=True)
    token.write_text("tok")
    env = {
        "RESPOT_DATA_DIR": str(tmp_path / "data"),
        "RESPOT_CHECKPOINT_DIR": str(tmp_path / "ws"),
        "RESPOT_NOTICE_FILE": str(tmp_path / "ipc" / "notice"),
        "RESPOT_HYPERPARAMETERS": json.dumps({"idle_minutes": 2, "port": 0}),
        "RESPOT_RESUME_STEP": "7",
    }
    (tmp_path / "ws").mkdir()
    sup = supervisor_from_env(env, tmp_path)
    assert (sup.idle_seconds, sup.wanted_port, sup.step, sup.token) == (120, 0, 7, "tok")
    env["RESPOT_HYPERPARAMETERS"] = json.dumps({"idle_minutes": "soon"})
    with pytest.raises(ServeError, match="is not a number"):
        supervisor_from_env(env, tmp_path)
    with pytest.raises(ServeError, match="not by hand"):
        supervisor_from_env({}, tmp_path)


def test_the_note_says_variables_are_gone_files_are_kept_only_when_restored() -> None:
    assert note_text("j", "1", False, T0) is None
    note = note_text("j", "2", True, T0)
    assert note is not None and "Variables are gone; files are kept" in note


# ---- the tunnel ------------------------------------------------------------------------------


class Echo:
    """A TCP server on 127.0.0.1 that answers each connection with its own tag."""

    def __init__(self, tag: bytes) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.tag = tag
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.recv(1024)
                conn.sendall(self.tag)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept: nothing listens after
        self.sock.close()


def ask(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET / HTTP/1.1\r\n\r\n")
        chunks = []
        while data := s.recv(4096):
            chunks.append(data)
    return b"".join(chunks)


def test_each_new_connection_follows_the_workspace_to_its_current_instance() -> None:
    first, second = Echo(b"first"), Echo(b"second")
    where: dict[str, object] = {"target": ("127.0.0.1", first.port)}

    def resolve() -> tuple[str, int]:
        target = where["target"]
        if isinstance(target, str):
            raise NotReachableError(target)
        return target  # type: ignore[return-value]

    with Tunnel(resolve, cache_seconds=0) as tunnel:
        assert ask(tunnel.port) == b"first"
        where["target"] = "JupyterLab is starting on i-2: variables are gone; files are kept"
        moving = ask(tunnel.port)
        assert moving.startswith(b"HTTP/1.1 503") and b"variables are gone" in moving
        where["target"] = ("127.0.0.1", second.port)
        assert ask(tunnel.port) == b"second"  # the same local port, the replacement
    first.close()
    second.close()


def test_a_cached_target_that_stopped_answering_is_asked_again() -> None:
    gone = Echo(b"old")
    new = Echo(b"new")
    targets = [("127.0.0.1", gone.port), ("127.0.0.1", new.port)]
    calls: list[int] = []

    def resolve() -> tuple[str, int]:
        calls.append(1)
        return targets[min(len(calls) - 1, 1)]

    with Tunnel(resolve, cache_seconds=3600) as tunnel:
        assert ask(tunnel.port) == b"old"
        gone.close()  # the instance went away; the cache still names it
        assert ask(tunnel.port) == b"new"
    new.close()


def test_a_taken_port_is_said_plainly() -> None:
    busy = socket.create_server(("127.0.0.1", 0))
    try:
        with pytest.raises(OSError, match="give another --port"):
            Tunnel(lambda: ("127.0.0.1", 1), port=busy.getsockname()[1])
    finally:
        busy.close()


def test_the_tunnel_listens_on_loopback_only() -> None:
    with Tunnel(lambda: ("127.0.0.1", 1)) as tunnel:
        assert tunnel._server.getsockname()[0] == "127.0.0.1"
        with pytest.raises(urllib.error.HTTPError) as answer:  # nothing behind: a 503 page
            urllib.request.urlopen(f"http://127.0.0.1:{tunnel.port}/", timeout=10)
        assert answer.value.code == 503
