"""The session's child process, seen from the agent: start it, talk to it, log it, stop it.

The child is `[<job python>, "-c", SESSION_BOOT, <respot's site>, "--launch", ...]` (an argv
list, never a shell), with its own environment; SESSION_BOOT appends respot's own site
directory to the job's `sys.path` (after the job's packages, which it never shadows) and runs
`respot.agent.session_main`. A launcher may come first (torchrun, `docker run ...`: see
`respot.agent.launch`); then the pipes are named pipes in the attempt's directory and the
notice also goes to a file every rank watches. The child writes protocol lines on one pipe
and reads notices from another (`respot.agent.protocol`); its stdout and stderr go, line by
line, to a log file, and the last lines are kept for `AgentFailed.log_tail`.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from pydantic import ValidationError

from respot.agent.protocol import (
    CHILD_LINE,
    CheckpointLine,
    CheckpointRequestLine,
    DoneLine,
    FailedLine,
    InterruptLine,
    Notice,
    ReadyLine,
    ReportLine,
    ResumeLine,
    SessionLaunch,
    line,
)
from respot.spec.jobid import check_job_id

logger = logging.getLogger(__name__)

# Run by the job's Python: respot (and the agent's packages) come after the job's own.
SESSION_BOOT = (
    "import runpy, site, sys; site.addsitedir(sys.argv.pop(1)); "
    "runpy.run_module('respot.agent.session_main', run_name='__main__', alter_sys=True)"
)
LOG_TAIL_LINES = 50
MAX_LOG_LINE_CHARS = 1000
_READER_JOIN_SECONDS = 5.0


def copy_output(
    stream: IO[bytes],
    log_path: Path,
    on_output: Callable[[bytes], None] | None,
    tail: collections.deque[str],
    tail_lock: threading.Lock,
) -> None:
    """A child's output, line by line until it closes: appended to `log_path`, handed to
    `on_output` (log shipping; a failure there never stops the log file), and its last lines
    kept in `tail` (for `AgentFailed.log_tail`). A session's and a command's alike."""
    with open(log_path, "ab") as log:
        for raw in stream:
            log.write(raw)
            log.flush()
            if on_output is not None:
                try:
                    on_output(raw)
                except Exception:  # shipping logs must never stop the log file
                    logger.exception("handling an output line failed")
            text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            with tail_lock:
                tail.append(text[:MAX_LOG_LINE_CHARS])


@dataclass(frozen=True)
class SessionExited:
    """The child process ended; every line it wrote before has been delivered."""

    exit_code: int


SessionEvent = ReportLine | CheckpointLine | DoneLine | FailedLine | ReadyLine | SessionExited


class SessionProcess:
    """One run of the session in a child process; events go to `on_event` (from threads)."""

    def __init__(
        self,
        launch: SessionLaunch,
        *,
        launch_path: Path,
        env: Mapping[str, str],
        log_path: Path,
        on_event: Callable[[SessionEvent], None],
        on_output: Callable[[bytes], None] | None = None,
        launcher: list[str] | None = None,
        named_pipes: bool = False,
    ) -> None:
        self.launch = launch
        # Everything before SESSION_BOOT: the job's Python, after torchrun or `docker run`.
        self.launcher = launcher or [sys.executable]
        self.named_pipes = named_pipes
        self.launch_path = launch_path
        self.env = dict(env)
        self.log_path = log_path
        self._on_event = on_event
        self._on_output = on_output  # each raw output line too (log shipping); must not block
        self._tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
        self._tail_lock = threading.Lock()
        self._control: IO[str] | None = None
        self._control_lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._threads: list[threading.Thread] = []
        self._events_fifo: Path | None = None

    @property
    def pid(self) -> int | None:
        """The child's process id once started."""
        return self._proc.pid if self._proc else None

    def start(self) -> None:
        """Write the launch file and start the child."""
        self.launch_path.parent.mkdir(parents=True, exist_ok=True)
        self.launch_path.write_text(self.launch.model_dump_json(indent=1))
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = [
            *self.launcher,
            "-c",
            SESSION_BOOT,
            respot_site(),
            "--launch",
            str(self.launch_path),
        ]
        events_r = self._start_named(argv) if self.named_pipes else self._start_fds(argv)
        readers = [
            threading.Thread(target=self._read_events, args=(events_r,), daemon=True),
            threading.Thread(target=self._read_output, daemon=True),
        ]
        for t in readers:
            t.start()
        waiter = threading.Thread(target=self._wait, args=(readers,), daemon=True)
        waiter.start()
        self._threads = [*readers, waiter]

    def _popen(self, argv: list[str], pass_fds: tuple[int, ...] = ()) -> None:
        self._proc = subprocess.Popen(  # noqa: S603 - a fixed argv, no shell
            argv,
            cwd=self.launch.code_dir,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            pass_fds=pass_fds,
            close_fds=True,
        )

    def _start_fds(self, argv: list[str]) -> int | str:
        events_r, events_w = os.pipe()
        control_r, control_w = os.pipe()
        try:
            self._popen(
                [*argv, "--events-fd", str(events_w), "--control-fd", str(control_r)],
                pass_fds=(events_w, control_r),
            )
        finally:
            os.close(events_w)
            os.close(control_r)
        self._control = open(control_w, "w", encoding="utf-8")  # noqa: SIM115 - closed in _wait
        return events_r

    def _start_named(self, argv: list[str]) -> int | str:
        ipc = self.launch_path.parent
        events, control = ipc / "events.fifo", ipc / "control.fifo"
        for fifo in (events, control):
            fifo.unlink(missing_ok=True)
            os.mkfifo(fifo, 0o600)
        if self.launch.notice_file:
            Path(self.launch.notice_file).unlink(missing_ok=True)
        # O_RDWR never blocks on Linux, and keeps the pipe open until we close it.
        self._control = open(os.open(control, os.O_RDWR), "w", encoding="utf-8")  # noqa: SIM115
        self._events_fifo = events
        self._popen([*argv, "--events-fifo", str(events), "--control-fifo", str(control)])
        return str(events)

    # ---- talking to the child ----------------------------------------------------------------

    def interrupt(self, notice: Notice) -> None:
        """Tell the session an interruption notice arrived (it should checkpoint and return)."""
        if self.launch.notice_file:
            path = Path(self.launch.notice_file)
            partial = path.with_name(path.name + ".partial")
            partial.write_text(notice)
            partial.replace(path)
        self._tell(line(InterruptLine(notice=notice)))

    def request_checkpoint(self) -> None:
        """Tell the session to checkpoint soon (a rebalance recommendation)."""
        self._tell(line(CheckpointRequestLine()))

    def resume(self, resume_step: int | None) -> None:
        """Warm start: the checkpoint is in place; the waiting session may train now."""
        self._tell(line(ResumeLine(resume_step=resume_step)))

    def _tell(self, text: str) -> None:
        with self._control_lock:
            if self._control is None:
                return
            try:
                self._control.write(text)
                self._control.flush()
            except (OSError, ValueError):
                logger.warning("the session process is not listening any more")

    def terminate(self, grace_seconds: float = 10.0) -> None:
        """SIGTERM the child (the session sees a "stop" notice), then SIGKILL after a grace."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_seconds)
        except subprocess.TimeoutExpired:
            proc.kill()

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the child to end; its exit code, or None on timeout."""
        if self._proc is None:
            return None
        try:
            return self._proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def log_tail(self) -> list[str]:
        """The last lines the child printed (at most 50)."""
        with self._tail_lock:
            return list(self._tail)

    # ---- threads -----------------------------------------------------------------------------

    def _read_events(self, fd: int | str) -> None:
        # A named pipe's open waits for rank 0 to open its end (or for _wait to release it).
        with open(fd, encoding="utf-8", errors="replace") as events:
            for raw in events:
                try:
                    message = CHILD_LINE.validate_json(raw)
                except ValidationError:
                    logger.warning("ignoring a malformed line from the session: %r", raw[:200])
                    continue
                try:
                    self._on_event(message)
                except Exception:
                    logger.exception("handling %s failed", message)

    def _read_output(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        copy_output(self._proc.stdout, self.log_path, self._on_output, self._tail, self._tail_lock)

    def _wait(self, readers: list[threading.Thread]) -> None:
        assert self._proc is not None
        code = self._proc.wait()
        if self._events_fifo is not None:
            # Rank 0 may never have opened its end: open it ourselves so the reader ends.
            with contextlib.suppress(OSError):
                os.close(os.open(self._events_fifo, os.O_WRONLY | os.O_NONBLOCK))
        # A process the session forked may hold the pipes open: do not wait for it forever.
        for t in readers:
            t.join(timeout=_READER_JOIN_SECONDS)
        with self._control_lock:
            if self._control is not None:
                with contextlib.suppress(OSError):
                    self._control.close()
                self._control = None
        self._on_event(SessionExited(code))


def respot_site() -> str:
    """The directory respot is imported from (the agent package's site directory)."""
    # This file is <site>/respot/agent/process.py.
    return str(Path(__file__).resolve().parents[2])


def describe_exit(code: int) -> str:
    """'exit code 1' or 'killed by SIGKILL'."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def session_environment(
    launch: SessionLaunch, user_env: Mapping[str, str], base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The child's environment: the agent's, the researcher's `environment`, and RESPOT_*."""
    import json

    env = dict(os.environ if base is None else base)
    # The agent's own settings are not the session's business.
    for name in ("RESPOT_AGENT_QUEUE_URL", "RESPOT_SHUTDOWN", "RESPOT_HANDOFF_WAIT_SECONDS"):
        env.pop(name, None)
    env.update(user_env)
    env.update(
        {
            "PYTHONUNBUFFERED": "1",
            "RESPOT_JOB_ID": launch.job_id,
            "RESPOT_ATTEMPT": str(launch.attempt),
            "RESPOT_SEED": str(launch.seed),
            "RESPOT_CHECKPOINT_DIR": launch.checkpoint_dir,
            "RESPOT_DATA_DIR": launch.data_dir,
            "RESPOT_OUTPUT_DIR": launch.output_dir,
            "RESPOT_HYPERPARAMETERS": json.dumps(launch.hyperparameters),
        }
    )
    if launch.resume_step is not None:
        env["RESPOT_RESUME_STEP"] = str(launch.resume_step)
    else:
        env.pop("RESPOT_RESUME_STEP", None)
    return env


@dataclass(frozen=True)
class AttemptDirs:
    """The directories of one attempt under a work directory."""

    root: Path

    @classmethod
    def of(cls, work_dir: Path, job_id: str, attempt: int) -> AttemptDirs:
        """`<work_dir>/<job_id>/<attempt>`; the id is checked first, so it stays inside."""
        check_job_id(job_id)
        if not 0 < attempt < 10_000:
            raise ValueError(f"attempt {attempt} is not in 1..9999")
        root = work_dir / job_id / f"{attempt:04d}"
        if work_dir.resolve() not in root.resolve().parents:
            raise ValueError(f"{root} is not inside the work directory {work_dir}")
        return cls(root)

    @property
    def code(self) -> Path:
        return self.root / "code"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoint"

    @property
    def output(self) -> Path:
        return self.root / "output"

    @property
    def staging(self) -> Path:
        return self.root / "staging"

    @property
    def log(self) -> Path:
        return self.root / "session.log"

    @property
    def launch(self) -> Path:
        return self.root / "session.json"

    def create(self) -> None:
        """Make every directory, empty (nothing of an earlier run in the same place survives)."""
        for d in (self.code, self.data, self.checkpoint, self.output, self.staging):
            if d.exists():
                shutil.rmtree(d)
            d.mkdir(parents=True)
