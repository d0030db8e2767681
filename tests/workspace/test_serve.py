"""The workspace supervisor against a real `jupyter lab` on 127.0.0.1.

The agent's side of the command channel is played by a thread that copies the workspace on
each `checkpoint_saved` (as the agent's snapshot does), so the tests see what would be uploaded.
Every wait is bounded by an event (the port file, the process's exit), never by a guess.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from respot.commands import contract
from respot.commands.channel import ChannelReader
from respot.workspace import names

pytest.importorskip("jupyterlab")

TOKEN = "t" * 48
WAIT = 240.0  # bound on events only (JupyterLab's start on a loaded machine)


class FakeAgent:
    """Takes the supervisor's checkpoint_saved messages: a copy of the workspace per step."""

    def __init__(self, channel: Path, workspace: Path, snapshots: Path) -> None:
        self.reader = ChannelReader(channel)
        self.workspace = workspace
        self.snapshots = snapshots
        self.steps: list[int] = []
        self.metrics: dict[str, float] = {}  # the newest of each reported, as the agent keeps
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            for message in self.reader.poll():
                if message.kind == "checkpoint":
                    shutil.copytree(self.workspace, self.snapshots / str(message.step))
                    self.steps.append(message.step)
                    ChannelReader.done(message)
                elif message.kind == "report":
                    self.metrics.update(message.metrics)

    def drain(self) -> None:
        """After the supervisor's exit: what it wrote last (the agent's final drain)."""
        self.stop()
        for message in self.reader.poll():
            if message.kind == "report":
                self.metrics.update(message.metrics)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


@pytest.fixture
def job(tmp_path: Path):
    root = tmp_path / "attempt"
    code, ws, ipc, out = root / "code", root / "checkpoint", root / "ipc", root / "output"
    token = root / "data" / names.TOKEN_DATA_PATH / names.TOKEN_OBJECT
    for d in (code, ws, ipc / "channel", out, token.parent):
        d.mkdir(parents=True)
    token.write_text(TOKEN)  # where the agent downloads the job's token object
    agent = FakeAgent(ipc / "channel", ws, tmp_path / "snapshots")
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "sdk"),
        contract.ENV_CHECKPOINT_DIR: str(ws),
        contract.ENV_NOTICE_FILE: str(ipc / "notice"),
        contract.ENV_CHANNEL_DIR: str(ipc / "channel"),
        contract.ENV_OUTPUT_DIR: str(out),
        contract.ENV_DATA_DIR: str(root / "data"),
        contract.ENV_JOB_ID: "ws-test",
        contract.ENV_ATTEMPT: "1",
        contract.ENV_RESUMED: "0",
        names.ENV_PORT: "0",
        names.ENV_SYNC_SECONDS: "3600",  # only the final sync, unless a test says otherwise
        names.ENV_POLL_SECONDS: "0.5",
        names.ENV_IDLE_MINUTES: "60",
    }
    yield root, env, agent
    agent.stop()


def start(root: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", names.SUPERVISOR_MODULE],
        cwd=root / "code",
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # a process group, as the agent starts a command
    )


def wait_port(root: Path, proc: subprocess.Popen[bytes]) -> int:
    port_file = root / "ipc" / names.PORT_FILE
    deadline = time.monotonic() + WAIT
    while not port_file.exists():
        if proc.poll() is not None:
            out = proc.stdout.read().decode() if proc.stdout else ""
            pytest.fail(f"the supervisor exited {proc.returncode} before serving:\n{out}")
        assert time.monotonic() < deadline, "JupyterLab did not come up"
        time.sleep(0.1)
    return int(json.loads(port_file.read_text())["port"])


def api(port: int, path: str, method: str = "GET", body: object = None, token: str = TOKEN):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=data,
        method=method,
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as answer:
        return json.loads(answer.read().decode() or "null")


def finish(proc: subprocess.Popen[bytes]) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=WAIT)
    return proc.returncode, out.decode()


def test_notice_syncs_the_saved_file_and_exits_as_an_interruption(job) -> None:
    root, env, agent = job
    env[contract.ENV_RESUMED] = "1"  # a replacement: the page must say why it reloaded
    env[contract.ENV_ATTEMPT] = "2"
    proc = start(root, env)
    try:
        port = wait_port(root, proc)
        # The token is on: no token, no answer.
        with pytest.raises(urllib.error.HTTPError) as refused:
            api(port, "/api/contents", token="wrong")
        assert refused.value.code == 403
        api(port, "/api/contents/notes.txt", "PUT", {"type": "file", "format": "text",
                                                     "content": "kept across"})  # fmt: skip
        notice_in(root, 20)  # a short notice: a save window of 3 s (a page made requests)
        os.killpg(proc.pid, signal.SIGTERM)  # the agent signals the whole group
        code, out = finish(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert code == 0, out
    assert agent.steps == [1], out  # one final snapshot, after the file was written
    snapshot = root.parent / "snapshots" / "1"
    assert (snapshot / "notes.txt").read_text() == "kept across"
    assert "Variables are gone; files are kept" in (snapshot / names.NOTE_FILE).read_text()
    assert TOKEN not in out  # Jupyter's log and ours: the token is never printed
    assert not (root / "ipc" / names.PORT_FILE).exists()


def test_idle_workspace_syncs_says_why_and_completes(job) -> None:
    root, env, agent = job
    env[names.ENV_IDLE_MINUTES] = str(4 / 60)  # 4 s without kernel activity or browser
    proc = start(root, env)
    try:
        port = wait_port(root, proc)
        api(port, "/api/contents/a.txt", "PUT", {"type": "file", "format": "text",
                                                 "content": "a"})  # fmt: skip
        code, out = finish(proc)  # returns once the idle rule stops it
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert code == 0, out  # a clean end: the job completes (stopped, not failed)
    assert "idle for" in out
    assert agent.steps == [1]
    assert (root.parent / "snapshots" / "1" / "a.txt").read_text() == "a"
    stopped = (root / "output" / "workspace-stopped.txt").read_text()
    assert "no kernel activity and no connected browser" in stopped
    # AND the idle stop is reported through the channel, so the completion carries it to
    # Slack (tests/workspace/test_slack.py): the minutes idle, at least idle_minutes
    agent.drain()
    assert agent.metrics.get(names.IDLE_METRIC, 0) >= round(4 / 60, 1), agent.metrics


def test_without_the_token_file_jupyter_never_starts(job) -> None:
    root, env, _ = job
    (root / "data" / names.TOKEN_DATA_PATH / names.TOKEN_OBJECT).unlink()
    proc = start(root, env)
    code, out = finish(proc)
    assert code == 2 and "no Jupyter token" in out


def gone(pid: int) -> bool:
    """Exited (a zombie whose new parent has not reaped it counts)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return True
    return state in ("Z", "X")


def test_when_the_agent_dies_jupyter_and_the_supervisor_leave_nothing_running(job) -> None:
    """The local runtime kills an instance's process group; the supervisor, in a session of
    its own as every command is, must not outlive the agent with its JupyterLab."""
    root, env, _ = job
    agent = subprocess.Popen(  # stands for the agent: starts the command, prints its pid
        [sys.executable, "-c",
         "import subprocess, sys\n"
         f"p = subprocess.Popen([sys.executable, '-m', '{names.SUPERVISOR_MODULE}'], "
         "start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
         "print(p.pid, flush=True)\n"
         "p.wait()\n"],
        cwd=root / "code",
        env=env,
        stdout=subprocess.PIPE,
    )  # fmt: skip
    assert agent.stdout is not None
    supervisor = int(agent.stdout.readline())
    try:
        port = wait_port(root, agent)
        assert api(port, "/api/status") is not None
        agent.kill()  # the machine goes: SIGKILL to the agent, nothing to the command
        agent.wait()
        deadline = time.monotonic() + WAIT
        while not gone(supervisor):
            assert time.monotonic() < deadline, "the supervisor outlived its agent"
            time.sleep(0.1)
        with pytest.raises(OSError):  # and its JupyterLab is gone with it
            api(port, "/api/status")
    finally:
        if not gone(supervisor):
            os.killpg(supervisor, signal.SIGKILL)


def test_periodic_syncs_take_each_change_and_only_changes(job) -> None:
    root, env, agent = job
    env[names.ENV_SYNC_SECONDS] = "1"
    proc = start(root, env)

    def synced(steps: list[int]) -> None:
        deadline = time.monotonic() + WAIT
        while agent.steps != steps:
            assert time.monotonic() < deadline and proc.poll() is None, agent.steps
            time.sleep(0.1)

    try:
        port = wait_port(root, proc)
        for step, name in ((1, "one.txt"), (2, "two.txt")):
            api(port, f"/api/contents/{name}", "PUT",
                {"type": "file", "format": "text", "content": name})  # fmt: skip
            synced(list(range(1, step + 1)))
        notice_in(root, 20)  # a short notice: a save window of 3 s (a page made requests)
        os.killpg(proc.pid, signal.SIGTERM)
        code, out = finish(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert code == 0, out
    assert agent.steps == [1, 2]  # nothing changed after the second: no third snapshot
    assert sorted(p.name for p in (root.parent / "snapshots" / "2").iterdir()) == [
        "one.txt",
        "two.txt",
    ]


class Lines:
    """The supervisor's output, read as it comes: a wait for a line is bounded by the line
    (or the process's exit), never by a guess."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc, self.lines = proc, []  # type: list[str]
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in iter(self.proc.stdout.readline, b""):
            with self._changed:
                self.lines.append(raw.decode(errors="replace"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def text(self) -> str:
        with self._changed:
            return "".join(self.lines)

    def wait_for(self, needle: str) -> None:
        deadline = time.monotonic() + WAIT
        with self._changed:
            while not any(needle in line for line in self.lines):
                if not self._thread.is_alive():
                    pytest.fail(f"the supervisor ended without {needle!r}:\n{self.text()}")
                assert time.monotonic() < deadline, f"no {needle!r} in:\n{self.text()}"
                self._changed.wait(1.0)

    def finish(self) -> tuple[int, str]:
        code = self.proc.wait(WAIT)
        self._thread.join(WAIT)
        return code, self.text()


def notice_in(root: Path, seconds: float) -> None:
    from datetime import UTC, datetime, timedelta

    reclaim = datetime.now(UTC) + timedelta(seconds=seconds)
    contract.write_notice(root / "ipc" / "notice", "spot-interruption", reclaim)


def test_an_edit_saved_after_the_notice_within_the_save_window_is_synced(job) -> None:
    """Issue 27's "every open notebook is saved": the page's autosave lands after the notice.
    JupyterLab (in a session of its own) serves on through the save window while the group's
    stop signal stops only the supervisor; what the page saves then is in the last snapshot."""
    root, env, agent = job
    proc = start(root, env)
    lines = Lines(proc)
    try:
        port = wait_port(root, proc)
        put = {"type": "file", "format": "text", "content": "saved before"}
        api(port, "/api/contents/before.txt", "PUT", put)  # a page's request: a browser is there
        # A 30-s notice: the window is what it leaves (22.5 s to the agent's kill, less the
        # shutdown's 12 s), short enough for a test
        notice_in(root, 30)
        os.killpg(proc.pid, signal.SIGTERM)  # the agent signals the whole group at once
        lines.wait_for("for an open page's autosave")
        # what the browser's autosave does: PUT the notebook through the contents API
        typed = {"cells": [{"cell_type": "code", "source": "typed after the notice",
                            "metadata": {}, "outputs": [], "execution_count": None}],
                 "metadata": {}, "nbformat": 4, "nbformat_minor": 5}  # fmt: skip
        api(port, "/api/contents/typed.ipynb", "PUT", {"type": "notebook", "content": typed})
        code, out = lines.finish()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert code == 0, out
    assert agent.steps == [1, 2], out  # at once (before.txt), after the window (typed.ipynb)
    first, last = (root.parent / "snapshots" / str(n) for n in (1, 2))
    assert (first / "before.txt").read_text() == "saved before"
    assert not (first / "typed.ipynb").exists()
    saved = json.loads((last / "typed.ipynb").read_text())
    assert "typed after the notice" in json.dumps(saved["cells"])
    assert (last / "before.txt").read_text() == "saved before"
    with pytest.raises(OSError):  # and JupyterLab is stopped once the supervisor exits
        api(port, "/api/status")


def test_without_an_open_page_the_notice_takes_no_save_window(job) -> None:
    root, env, _ = job
    proc = start(root, env)
    lines = Lines(proc)
    try:
        port = wait_port(root, proc)
        assert api(port, "/api/status?no_track_activity=1") is not None  # not a page's request
        notice_in(root, 120)
        os.killpg(proc.pid, signal.SIGTERM)
        code, out = lines.finish()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert code == 0, out
    assert "no save window" in out and "for an open page's autosave" not in out, out


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl PR_SET_PDEATHSIG: Linux")
def test_jupyter_does_not_outlive_a_supervisor_killed_at_the_last_safe_moment(job) -> None:
    """JupyterLab runs outside the command's process group (the save window), so the agent's
    SIGKILL of the group at the last safe moment reaches the supervisor only: JupyterLab must
    go with it (its parent-death signal), not serve on with nobody to stop it."""
    root, env, _ = job
    proc = start(root, env)
    jupyter = None
    try:
        port = wait_port(root, proc)
        (jupyter,) = children(proc.pid)
        assert os.getsid(jupyter) != os.getsid(proc.pid)  # a session of its own
        os.killpg(proc.pid, signal.SIGKILL)  # the group: the supervisor only
        proc.wait(WAIT)
        deadline = time.monotonic() + WAIT
        while not gone(jupyter):
            assert time.monotonic() < deadline, "JupyterLab outlived its supervisor"
            time.sleep(0.1)
        with pytest.raises(OSError):
            api(port, "/api/status")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        if jupyter is not None and not gone(jupyter):
            os.kill(jupyter, signal.SIGKILL)
