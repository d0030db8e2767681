"""The workspace supervisor: `python -m respot.workspace.serve`, a workspace job's command.

It runs on the job's own Python (standard library and `respot.commands` only) in the code
directory, with a command job's environment (docs/commands.md):
1. writes a note into the workspace when it was restored ("this workspace moved to a new
   instance ...; variables are gone; files are kept"), so the reloaded page says why;
2. starts `jupyter lab` on 127.0.0.1 (port 8888 on an instance; any free port where
   RESPOT_WORKSPACE_PORT is 0, as on the local runtime, whose instances share one host), its
   root the workspace (RESPOT_CHECKPOINT_DIR), Jupyter's token ON (read from the token
   object the agent downloaded as a data source, never an argument or a log line: Jupyter logs
   a configured token as '...', and every line of its output is copied with the token
   masked), JupyterLab's autosave short (RESPOT_WORKSPACE_AUTOSAVE_SECONDS, 10). JupyterLab
   runs in a session (process group) of its own, so the group's stop signal on the notice
   does not stop it: the supervisor stops it itself. It cannot outlive the supervisor: on
   Linux it gets SIGTERM when the supervisor dies (prctl PR_SET_PDEATHSIG: the agent's
   SIGKILL at the last safe moment), the supervisor stops it when the agent is gone (8), and
   the local runtime's machine kill takes every descendant, in any session;
3. writes the port it got beside the notice file (`workspace.json`), for the laptop's tunnel;
4. every RESPOT_WORKSPACE_SYNC_SECONDS (60) when files changed: `respot.checkpoint_saved`,
   so the agent snapshots the workspace and the checkpoint store uploads what changed;
5. on the notice (the notice file appears; the group's stop signal): snapshots what Jupyter
   saved at once; then keeps JupyterLab serving for the *save window* (`save_window`: as
   long as the notice allows, up to the moment the agent kills the group less what the
   shutdown after it takes), so a connected browser's autosave writes the edits not yet
   saved, even after slow saves stretched its interval; snapshots again, stops JupyterLab,
   takes the final snapshot if anything changed, and exits 0: an interruption, replaced and
   restored as for any command job. No window when no browser is there (`browser_seen`: no
   kernel connection and no request from a page for BROWSER_SEEN_SECONDS): nobody can have
   unsaved edits, and an unattended workspace is not slowed;
6. idle (`respot.workspace.idle`): no kernel activity and no connected browser for
   RESPOT_WORKSPACE_IDLE_MINUTES: says why (its log, and `workspace-stopped.txt` in the job's
   outputs), stops Jupyter, takes a final snapshot and exits 0: the job completes (stopped,
   not failed);
7. Jupyter ending on its own before any of that: a final snapshot, exit 1 (the job fails with
   the log's tail);
8. the agent gone (its parent process changed: the agent was killed with its machine, as the
   local runtime kills an instance's processes; the supervisor runs in a session of its own):
   stops Jupyter and exits at once, nothing left running (no snapshot: no agent takes it).
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import IO, Any

from respot.commands import channel, contract
from respot.workspace import names
from respot.workspace.idle import IdleWatch, last_active, parse_time

START_SECONDS = 300.0  # a loaded machine can take a while to start JupyterLab
STOP_SECONDS = 10.0  # Jupyter's own shutdown (its kernels) after the stop signal
DEFAULT_SYNC_SECONDS = 60.0
DEFAULT_POLL_SECONDS = 15.0
DEFAULT_AUTOSAVE_SECONDS = 10
PORT_TRIES = 5  # a free port can be taken between our look and Jupyter's bind
SNAPSHOT_SECONDS = 300.0  # checkpoint_saved: the agent's snapshot (hard links and copies)
# A save window shorter than the autosave interval and this margin (the save's round trip:
# the page's PUT through the tunnel, Jupyter's write aside and rename) is said in the log.
SAVE_MARGIN_SECONDS = 3.0
MIN_SYNC_SECONDS = 1.0  # a snapshot's time when none was measured yet
# An open JupyterLab page asks the server for its sessions and kernels every 10 s (tracked API
# activity); a notebook with a kernel keeps a websocket. Neither for this long: no page open.
BROWSER_SEEN_SECONDS = 60.0
COOKIE_SECRET = "cookie_secret"  # noqa: S105 - a file name


class WorkspaceError(RuntimeError):
    """The supervisor cannot run (the message says what is missing)."""


def _say(text: str) -> None:
    print(f"respot workspace: {text}", flush=True)


def free_port() -> int:
    """A port on 127.0.0.1 nobody listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def shutdown_reserve(sync_seconds: float) -> float:
    """What the shutdown after the save window takes at most: a snapshot, JupyterLab's stop
    (SIGKILL after STOP_SECONDS), and the final snapshot, each snapshot as long as the
    longest measured (`sync_seconds`, at least MIN_SYNC_SECONDS)."""
    return STOP_SECONDS + 2 * max(sync_seconds, MIN_SYNC_SECONDS)


def save_window(*, reclaim_at: datetime | None, now: datetime, sync_seconds: float) -> float:
    """Seconds JupyterLab keeps serving after the notice (`now`): as long as the notice allows,
    so that the shutdown after it (`shutdown_reserve`) ends before the agent kills the group
    (`contract.seconds_to_kill`); 0 when the notice is too short for any.

    Not one autosave interval: JupyterLab sets a page's next autosave at the interval or 10
    times its last save's duration, whichever is longer (its SaveHandler), so a slow save (a
    loaded machine, a large notebook, a slow tunnel) stretches it by an amount the supervisor
    cannot see. The time is not lost: the replacement boots meanwhile, and waits for this
    attempt's last snapshot in any case."""
    room = contract.seconds_to_kill(reclaim_at, now) - shutdown_reserve(sync_seconds)
    return max(0.0, room)


def browser_seen(status: Any, kernels: Any, now: datetime) -> bool:
    """Is a JupyterLab page (possibly with unsaved edits) open, by Jupyter's /api/status and
    /api/kernels: a kernel connection or busy kernel, or a tracked request within
    BROWSER_SEEN_SECONDS (Jupyter's `last_activity` starts at its start: no request since
    then is no page). Unreadable answers count as seen (the window is the safe side)."""
    if not isinstance(status, dict) or not isinstance(kernels, list):
        return True
    active = last_active(status, [k for k in kernels if isinstance(k, dict)], now)
    started = parse_time(status.get("started"))
    if active is None or (started is not None and active <= started):
        return False
    return (now - active).total_seconds() <= BROWSER_SEEN_SECONDS


def _linux_parent_death_signal() -> Callable[[], None] | None:
    """A preexec function: the child gets SIGTERM when its parent dies (Linux's prctl
    PR_SET_PDEATHSIG), or None where there is no prctl. Resolved here, before any fork."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the prctl: no signal would come
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def lab_settings(directory: Path, autosave_seconds: int) -> Path:
    """JupyterLab's user settings directory with autosave every `autosave_seconds`."""
    plugin = directory / "@jupyterlab" / "docmanager-extension"
    plugin.mkdir(parents=True, exist_ok=True)
    body = {"autosave": True, "autosaveInterval": autosave_seconds}
    (plugin / "plugin.jupyterlab-settings").write_text(json.dumps(body))
    return directory


def note_text(job_id: str, attempt: str, resumed: bool, at: datetime) -> str | None:
    """The note the reloaded page shows, or None on a workspace's very first start."""
    if not resumed:
        return None
    when = at.isoformat(timespec="seconds")
    return (
        "# This workspace moved\n\n"
        f"It restarted on a new instance at {when} (job {job_id}, attempt {attempt}): after a "
        "spot interruption, or `respot notebook start` after a stop.\n\n"
        "**Variables are gone; files are kept.** Every kernel started fresh: run your "
        "notebooks again from the top. Every file is as it was last saved and synced "
        "(JupyterLab autosaves open notebooks every few seconds, and on the interruption "
        "the workspace waited for an open page's autosave; edits typed after that, or in a "
        "page that could not reach the workspace then, are missing).\n\n"
        "To carry state across, save it into this directory (e.g. `torch.save`, "
        "`df.to_parquet`) and load it at the top of your notebook.\n"
    )


class Jupyter:
    """`jupyter lab` as a child process; its output copied with the token masked."""

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        token: str,
        out: IO[str] | None = None,
        cwd: Path | None = None,
        own_session: bool = True,
    ) -> None:
        self.argv = argv
        self.own_session = own_session
        self.cwd = cwd
        self.env = env
        self.token = token
        self.out = out or sys.stdout
        self.proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(  # noqa: S603 - our own argv, no shell
            self.argv,
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            close_fds=True,
            # Not in the command's group: the notice's stop signal reaches the supervisor
            # only; JupyterLab serves on through the save window, and goes when its parent does.
            start_new_session=self.own_session,
            preexec_fn=_linux_parent_death_signal() if self.own_session else None,  # noqa: PLW1509
        )
        assert self.proc.stdout is not None
        self._reader = threading.Thread(target=self._copy, args=(self.proc.stdout,), daemon=True)
        self._reader.start()

    def _copy(self, stream: IO[bytes]) -> None:
        for raw in iter(stream.readline, b""):
            line = raw.decode(errors="replace")
            if self.token:
                line = line.replace(self.token, "<token>")
            with contextlib.suppress(Exception):
                self.out.write(line)
                self.out.flush()

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def stop(self, wait: float = STOP_SECONDS) -> int | None:
        """SIGTERM (Jupyter shuts its kernels down), then SIGKILL after `wait`."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(wait)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._reader is not None:
            self._reader.join(timeout=2.0)
        return self.proc.returncode


def api_get(port: int, token: str, path: str, timeout: float = 5.0) -> Any:
    """GET Jupyter's REST API on 127.0.0.1 with the token; never counted as activity."""
    sep = "&" if "?" in path else "?"
    url = f"http://127.0.0.1:{port}{path}{sep}no_track_activity=1"
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310 - 127.0.0.1
        return json.loads(answer.read().decode())


class Supervisor:
    """One attempt of a workspace: see the module docstring."""

    def __init__(
        self,
        *,
        workspace: Path,
        notice_file: Path,
        token: str,
        port: int,
        idle_seconds: float,
        sync_seconds: float = DEFAULT_SYNC_SECONDS,
        poll_seconds: float = DEFAULT_POLL_SECONDS,
        autosave_seconds: int = DEFAULT_AUTOSAVE_SECONDS,
        output_dir: Path | None = None,
        start_step: int = 0,
        python: str = sys.executable,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.workspace = workspace
        self.notice_file = notice_file
        self.port_file = notice_file.with_name(names.PORT_FILE)
        self.token = token
        self.wanted_port = port
        self.port = port
        self.idle_seconds = idle_seconds
        self.sync_seconds = sync_seconds
        self.poll_seconds = poll_seconds
        self.autosave_seconds = autosave_seconds
        self.output_dir = output_dir
        self.step = start_step
        self.python = python
        self.clock = clock
        self.parent = os.getppid()  # the agent; another parent means it is gone
        self.stop_requested = threading.Event()
        self.jupyter: Jupyter | None = None
        self.synced = contract.signature(workspace)  # what was restored counts as synced
        self.sync_took = 0.0  # the longest snapshot measured (the save window's reserve)
        self._private = Path(tempfile.mkdtemp(prefix="respot-ws-"))  # 0700: this user only

    # ---- Jupyter -------------------------------------------------------------------------------

    def _argv(self, port: int) -> list[str]:
        root = ["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
        return [
            self.python,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={port}",
            "--port-retries=0",
            f"--ServerApp.root_dir={self.workspace}",
            f"--ServerApp.cookie_secret_file={self._private / COOKIE_SECRET}",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.news_url=",
            "--LabApp.extension_manager=readonly",  # an instance installs no extensions
            *root,  # a container or CI as root; an instance's agent user is not
        ]

    def _env(self, token_file: Path) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("JUPYTER_TOKEN", None)  # the token comes from its file only
        env["JUPYTER_TOKEN_FILE"] = str(token_file)
        env["JUPYTER_CONFIG_DIR"] = str(self._private / "config")
        env["JUPYTER_RUNTIME_DIR"] = str(self._private / "runtime")
        env["JUPYTERLAB_SETTINGS_DIR"] = str(
            lab_settings(self._private / "lab-settings", self.autosave_seconds)
        )
        env["JUPYTERLAB_WORKSPACES_DIR"] = str(self._private / "lab-workspaces")
        return env

    def start_jupyter(self) -> None:
        """Start JupyterLab and wait (bounded) until its API answers with the token."""
        token_file = self._private / "token"
        token_file.write_text(self.token)
        token_file.chmod(0o600)
        # The login cookie outlives the instance: its secret derives from the token, the same
        # on every instance of the workspace, so the page reloaded after an interruption is
        # still logged in (with Jupyter's random secret per server it got the login page).
        secret = self._private / COOKIE_SECRET
        secret.write_bytes(hmac.digest(self.token.encode(), b"respot-workspace-cookie", "sha256"))
        secret.chmod(0o600)
        env = self._env(token_file)
        for _ in range(PORT_TRIES):
            self.port = self.wanted_port or free_port()
            # In the workspace: a kernel started without a notebook's path works there too.
            self.jupyter = Jupyter(self._argv(self.port), env, self.token, cwd=self.workspace)
            self.jupyter.start()
            if self._wait_ready():
                return
            if self.stop_requested.is_set() or self.notice_file.exists():
                return
            code = self.jupyter.stop(wait=2.0)
            if self.wanted_port:
                raise WorkspaceError(
                    f"JupyterLab did not start on 127.0.0.1:{self.port} (exit {code}); its "
                    "output above says why"
                )
            _say(f"JupyterLab did not start on port {self.port} (exit {code}); another port")
        raise WorkspaceError(f"JupyterLab did not start in {PORT_TRIES} tries; see above")

    def _wait_ready(self) -> bool:
        assert self.jupyter is not None
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.jupyter.exit_code() is not None:
                return False
            if self.stop_requested.is_set() or self.notice_file.exists() or self.orphaned():
                return False
            try:
                api_get(self.port, self.token, "/api/status", timeout=2.0)
                return True
            except (OSError, ValueError):
                time.sleep(0.2)
        return False

    def orphaned(self) -> bool:
        """Is the agent that started us gone?"""
        return os.getppid() != self.parent

    def write_port_file(self) -> None:
        body = {"port": self.port, "pid": os.getpid(), "attempt": os.environ.get("RESPOT_ATTEMPT")}
        partial = self.port_file.with_name(f".{self.port_file.name}.partial")
        partial.write_text(json.dumps(body))
        os.replace(partial, self.port_file)

    # ---- sync ----------------------------------------------------------------------------------

    def sync(self, why: str) -> bool:
        """Snapshot the workspace if it changed since the last one; False if the agent said no."""
        now = contract.signature(self.workspace)
        if now == self.synced:
            return True
        if self.orphaned():
            _say(f"no {why} sync: the agent is gone")
            return False
        step = self.step + 1
        began = time.monotonic()
        saved = channel.checkpoint_saved(step, timeout=SNAPSHOT_SECONDS)
        self.sync_took = max(self.sync_took, time.monotonic() - began)
        if not saved:
            _say(f"the {why} sync of the workspace failed (the agent's log says why)")
            return False
        self.step, self.synced = step, now
        channel.report(step)
        _say(f"synced the workspace ({why}, {len(now)} files, sync {step})")
        return True

    # ---- the attempt ---------------------------------------------------------------------------

    def run(self) -> int:
        """Serve until the notice, idle, or Jupyter's end; the exit status for the agent."""
        try:
            self.start_jupyter()
        except WorkspaceError as exc:
            _say(str(exc))
            return 1
        if self.orphaned():
            return self._on_agent_gone()
        if not (self.stop_requested.is_set() or self.notice_file.exists()):
            self.write_port_file()
            _say(f"JupyterLab answers on 127.0.0.1:{self.port} (root: the workspace)")
        watch = IdleWatch(self.idle_seconds, self.clock())
        next_sync = time.monotonic() + self.sync_seconds
        next_poll = time.monotonic()
        try:
            while True:
                if self.stop_requested.is_set() or self.notice_file.exists():
                    return self._on_notice()
                if self.orphaned():
                    return self._on_agent_gone()
                assert self.jupyter is not None
                code = self.jupyter.exit_code()
                if code is not None:
                    if self.stop_requested.wait(0.5) or self.notice_file.exists():
                        return self._on_notice()  # it got the notice's signal first
                    _say(f"JupyterLab exited by itself (status {code}); a last sync, then stop")
                    self.sync("final")
                    return 1
                now = time.monotonic()
                if now >= next_sync:
                    next_sync = now + self.sync_seconds
                    self.sync("periodic")
                if now >= next_poll:
                    next_poll = now + self.poll_seconds
                    if self._idle(watch):
                        return self._on_idle(watch)
                self.stop_requested.wait(0.2)
        finally:
            if self.jupyter is not None:
                self.jupyter.stop()
            self.port_file.unlink(missing_ok=True)
            shutil.rmtree(self._private, ignore_errors=True)

    def _idle(self, watch: IdleWatch) -> bool:
        try:
            status = api_get(self.port, self.token, "/api/status")
            kernels = api_get(self.port, self.token, "/api/kernels")
        except (OSError, ValueError) as exc:
            _say(f"could not ask Jupyter whether it is idle ({exc}); asking again later")
            return False
        if not isinstance(status, dict) or not isinstance(kernels, list):
            return False
        now = self.clock()
        watch.observe(status, [k for k in kernels if isinstance(k, dict)], now)
        return watch.is_idle(now)

    def _on_notice(self) -> int:
        notice = contract.read_notice(self.notice_file) or {}
        noticed = self.clock()
        _say(
            f"the notice ({notice.get('notice', 'a stop signal')}): open notebooks autosave, "
            "the workspace is synced, JupyterLab stops; the next instance restores it "
            "(variables are gone; files are kept)"
        )
        # What Jupyter saved is on disk (it writes aside and renames): snapshot it at once.
        self.sync("notice")
        window = save_window(
            reclaim_at=contract.reclaim_time(notice), now=noticed, sync_seconds=self.sync_took
        )
        # Then JupyterLab serves on for the save window, so an open page's autosave writes
        # what was typed since its last save; snapshot that, stop JupyterLab, snapshot again.
        if window > 0 and self._serving() and self._browser_seen():
            _say(f"JupyterLab serves {window:.0f} s more, for an open page's autosave")
            if window < self.autosave_seconds + SAVE_MARGIN_SECONDS:
                _say(
                    f"the notice leaves less than one autosave interval "
                    f"({self.autosave_seconds} s): edits typed since the last may be lost"
                )
            end = time.monotonic() + window
            while time.monotonic() < end and self._serving():
                time.sleep(min(0.2, max(0.0, end - time.monotonic())))
            if self.orphaned():
                return self._on_agent_gone()
            self.sync("saved")
        if self.jupyter is not None:
            self.jupyter.stop()
        self.sync("final")
        return 0  # any exit after the notice is an interruption (docs/commands.md)

    def _serving(self) -> bool:
        """JupyterLab still runs and the agent is still there."""
        return self.jupyter is not None and self.jupyter.exit_code() is None and not self.orphaned()

    def _browser_seen(self) -> bool:
        try:
            status = api_get(self.port, self.token, "/api/status")
            kernels = api_get(self.port, self.token, "/api/kernels")
        except (OSError, ValueError) as exc:
            _say(f"could not ask Jupyter whether a page is open ({exc}); keeping the window")
            return True
        if browser_seen(status, kernels, self.clock()):
            return True
        _say("no open page (no kernel connection, no request for a minute): no save window")
        return False

    def _on_agent_gone(self) -> int:
        _say("the agent is gone (its machine is going away): JupyterLab stops, nothing is left")
        if self.jupyter is not None:
            self.jupyter.stop()
        return 1

    def _on_idle(self, watch: IdleWatch) -> int:
        why = watch.reason(self.clock())
        _say(why)
        if self.jupyter is not None:
            self.jupyter.stop()
        ok = self.sync("final")
        if self.output_dir is not None:
            with contextlib.suppress(OSError):
                self.output_dir.mkdir(parents=True, exist_ok=True)
                (self.output_dir / names.STOPPED_OUTPUT).write_text(why + "\n")
        if ok:  # the reason travels with the completion: Slack says it (notify's cards)
            idle = round(watch.idle_for(self.clock()) / 60, 1)
            channel.report(self.step, None, **{names.IDLE_METRIC: idle})
            channel.flush()
        return 0 if ok else 1


def _settings(env: dict[str, str]) -> dict[str, str]:
    """The workspace's settings: the job's hyperparameters (`respot notebook start` puts them
    there; RESPOT_* environment names are respot's own), under the RESPOT_WORKSPACE_* names
    (which the tests may set directly)."""
    try:
        params = json.loads(env.get(contract.ENV_HYPERPARAMETERS) or "{}")
    except ValueError:
        params = {}
    merged = {k: v for k, v in env.items() if k.startswith("RESPOT_WORKSPACE_")}
    if isinstance(params, dict):
        for key, name in names.SETTINGS.items():
            if key in params:
                merged[name] = str(params[key])
    return merged


def _float(env: dict[str, str], name: str, default: float) -> float:
    text = env.get(name)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise WorkspaceError(f"{name}={text!r} is not a number") from None
    if value <= 0:
        raise WorkspaceError(f"{name}={text!r} must be above 0")
    return value


def supervisor_from_env(env: dict[str, str], cwd: Path) -> Supervisor:
    """The supervisor a workspace job's environment describes; WorkspaceError if not one."""
    missing = [n for n in (contract.ENV_CHECKPOINT_DIR, contract.ENV_NOTICE_FILE) if not env.get(n)]
    if missing:
        raise WorkspaceError(
            f"{', '.join(missing)} unset: respot.workspace.serve runs as a workspace job's "
            "command (`respot notebook start`), not by hand"
        )
    data = Path(env.get(contract.ENV_DATA_DIR) or cwd / "data")
    token_path = data / names.TOKEN_DATA_PATH / names.TOKEN_OBJECT
    try:
        token = token_path.read_text().strip()
    except OSError:
        token = ""
    if not token:
        raise WorkspaceError(
            f"no Jupyter token ({token_path}; the job's data source {names.TOKEN_OBJECT}): "
            "start workspaces with `respot notebook start`, which generates it"
        )
    settings = _settings(env)
    port_text = settings.get(names.ENV_PORT, str(names.REMOTE_PORT))
    if not port_text.isdigit() or int(port_text) > 65535:
        raise WorkspaceError(f"{names.ENV_PORT}={port_text!r}: give a port, or 0 for any")
    resume = env.get(contract.ENV_RESUME_STEP, "")
    idle_minutes = _float(settings, names.ENV_IDLE_MINUTES, float(names.DEFAULT_IDLE_MINUTES))
    return Supervisor(
        workspace=Path(env[contract.ENV_CHECKPOINT_DIR]),
        notice_file=Path(env[contract.ENV_NOTICE_FILE]),
        token=token,
        port=int(port_text),
        idle_seconds=60 * idle_minutes,
        sync_seconds=_float(settings, names.ENV_SYNC_SECONDS, DEFAULT_SYNC_SECONDS),
        poll_seconds=_float(settings, names.ENV_POLL_SECONDS, DEFAULT_POLL_SECONDS),
        autosave_seconds=int(
            _float(settings, names.ENV_AUTOSAVE_SECONDS, float(DEFAULT_AUTOSAVE_SECONDS))
        ),
        output_dir=Path(env[contract.ENV_OUTPUT_DIR]) if env.get(contract.ENV_OUTPUT_DIR) else None,
        start_step=int(resume) if resume.isdigit() else 0,
    )


def main() -> int:
    try:
        sup = supervisor_from_env(dict(os.environ), Path.cwd())
    except WorkspaceError as exc:
        _say(str(exc))
        return 2

    def on_signal(signum: int, frame: FrameType | None) -> None:
        sup.stop_requested.set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, on_signal)
    env = os.environ
    note = note_text(
        env.get(contract.ENV_JOB_ID, "?"),
        env.get(contract.ENV_ATTEMPT, "?"),
        env.get(contract.ENV_RESUMED) == "1",
        datetime.now(UTC),
    )
    if note is not None:
        with contextlib.suppress(OSError):
            (sup.workspace / names.NOTE_FILE).write_text(note)
            sup.synced = ()  # the note is news: the next sync takes it
    return sup.run()


if __name__ == "__main__":
    sys.exit(main())
