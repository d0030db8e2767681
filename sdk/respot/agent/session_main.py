"""The session process: `python -m respot.agent.session_main --launch FILE --events-fd N ...`.

Started by the agent (never through a shell). It puts the code directory on `sys.path`,
imports the entry point `package.module:Class`, seeds the RNGs, builds the session and runs
`train()`, talking to the agent over two pipes (see `respot.agent.protocol`).

Under torchrun or in a container the pipes are named (`--events-fifo`, `--control-fifo`):
rank 0 talks to the agent through them, and every rank watches the launch's `notice_file`
for the interruption notice. Only rank 0 reports, snapshots checkpoints and says how
`train()` ended; the other ranks' calls of `report()` and `save_checkpoint()` do nothing.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib
import os
import random
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import IO

from pydantic import BaseModel, ValidationError

from respot.agent.protocol import (
    PARENT_LINE,
    CheckpointLine,
    DoneLine,
    FailedLine,
    InterruptLine,
    ReadyLine,
    ReportLine,
    ResumeLine,
    SessionLaunch,
    line,
)
from respot.agent.snapshots import CheckpointSnapshots
from respot.training.session import TrainingSession


class PipeHost:
    """The child's side of the pipes: forwards reports and checkpoints, receives notices."""

    def __init__(
        self,
        events: IO[str],
        snapshots: CheckpointSnapshots,
        report_interval_seconds: float,
        *,
        primary: bool = True,
    ) -> None:
        self._primary = primary  # rank 0: the only one that talks to the agent
        self._events = events
        self._snapshots = snapshots
        self._interval = report_interval_seconds
        self._lock = threading.Lock()
        self._last_sent = 0.0
        self._pending: ReportLine | None = None
        self._parent_gone = False
        self._session: TrainingSession | None = None
        self._resume: ResumeLine | None = None
        self._resumed = threading.Event()  # a ResumeLine came, or the agent is gone

    # ---- SessionHost -------------------------------------------------------------------------

    def report(self, step: int, total_steps: int | None, metrics: dict[str, float]) -> None:
        if not self._primary:
            return
        message = ReportLine(step=step, total_steps=total_steps, metrics=metrics, at=time.time())
        now = time.monotonic()
        with self._lock:
            if now - self._last_sent < self._interval:
                self._pending = message
                return
            self._pending = None
            self._last_sent = now
        self._send(message)

    def checkpoint(self, step: int, reason: str) -> None:
        if not self._primary:
            return
        self.flush()
        path = self._snapshots.take(step)
        self._send(
            CheckpointLine(
                step=step, path=str(path), reason="notice" if reason == "notice" else "periodic"
            )
        )

    # ---- the rest ----------------------------------------------------------------------------

    def flush(self) -> None:
        """Send a report that the throttle held back."""
        with self._lock:
            pending, self._pending = self._pending, None
            if pending is not None:
                self._last_sent = time.monotonic()
        if pending is not None:
            self._send(pending)

    def send(self, message: BaseModel) -> None:
        self._send(message)

    def _send(self, message: BaseModel) -> None:
        if self._parent_gone or not self._primary:
            return
        try:
            with self._lock:
                self._events.write(line(message))
                self._events.flush()
        except OSError:
            self._agent_gone()

    def listen(self, control: IO[str], session: TrainingSession) -> None:
        """Apply the parent's notices to `session` from a daemon thread."""
        self._session = session
        threading.Thread(target=self._read_control, args=(control,), daemon=True).start()

    def _read_control(self, control: IO[str]) -> None:
        assert self._session is not None
        for raw in control:
            try:
                message = PARENT_LINE.validate_json(raw)
            except ValidationError:
                print(f"respot: ignoring a malformed control line: {raw!r}", file=sys.stderr)
                continue
            if isinstance(message, InterruptLine):
                self._session.request_interruption(message.notice)
            elif isinstance(message, ResumeLine):
                self._resume = message
                self._resumed.set()
            else:
                self._session.request_checkpoint()
        # EOF: the agent is gone, so nothing will upload checkpoints any more: stop.
        self._agent_gone()

    def wait_resume(self) -> ResumeLine | None:
        """Warm start: block until the agent says resume; None if the agent went away."""
        self._resumed.wait()
        return self._resume

    def watch_notice_file(self, path: Path, session: TrainingSession) -> None:
        """Poll `path` (from a daemon thread): once it exists, its text is the notice."""

        def poll() -> None:
            while not session.interruption_requested:
                try:
                    notice = path.read_text().strip()
                except FileNotFoundError:
                    time.sleep(0.1)
                    continue
                session.request_interruption(notice if notice == "spot-interruption" else "stop")
                return

        threading.Thread(target=poll, name="notice-file", daemon=True).start()

    def _agent_gone(self) -> None:
        self._parent_gone = True
        self._resumed.set()
        if self._session is not None and not self._session.interruption_requested:
            print("respot: the agent is gone; stopping the session", file=sys.stderr)
            self._session.request_interruption("stop")


def load_session_class(entry_point: str, code_dir: str) -> type[TrainingSession]:
    """Import `package.module:Class` with `code_dir` first on sys.path."""
    module_name, _, class_name = entry_point.partition(":")
    if code_dir not in sys.path:
        sys.path.insert(0, code_dir)
    module = importlib.import_module(module_name)
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, TrainingSession)):
        raise TypeError(f"{entry_point} is not a respot.TrainingSession subclass")
    return cls


def seed_rngs(seed: int) -> list[str]:
    """Seed Python's RNG, and NumPy's and PyTorch's if the session's code imported them."""
    random.seed(seed)
    seeded = ["random"]
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(seed % 2**32)
        seeded.append("numpy")
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)
        seeded.append("torch")
    return seeded


def run(
    launch: SessionLaunch, events: IO[str], control: IO[str] | None, *, primary: bool = True
) -> int:
    """Build and run the session; returns the process exit code.

    Warm start (`launch.warm`): import, build and `prepare()` at once, say ready, and wait for
    the agent's ResumeLine (the checkpoint is restored by then) before `train()`.
    """
    began = time.monotonic()
    snapshots = CheckpointSnapshots(Path(launch.checkpoint_dir), Path(launch.staging_dir))
    host = PipeHost(events, snapshots, launch.report_interval_seconds, primary=primary)
    session: TrainingSession | None = None
    try:
        cls = load_session_class(launch.entry_point, launch.code_dir)
        seed_rngs(launch.seed)
        session = cls(
            checkpoint_dir=Path(launch.checkpoint_dir),
            data_dir=Path(launch.data_dir),
            output_dir=Path(launch.output_dir),
            hparams=dict(launch.hyperparameters),
            seed=launch.seed,
            job_id=launch.job_id,
            attempt=launch.attempt,
            resume_step=None if launch.warm else launch.resume_step,
            host=host,
        )
        if control is not None:
            host.listen(control, session)
        if launch.notice_file is not None:
            host.watch_notice_file(Path(launch.notice_file), session)
        _stop_on_sigterm(session)
        session.prepare()
        if launch.warm:
            host.send(ReadyLine(seconds=round(time.monotonic() - began, 3)))
            resume = host.wait_resume()
            if resume is None:
                return 0  # the agent is gone before training began: nothing to do
            session.resume_from(resume.resume_step)
            if resume.resume_step is not None:
                os.environ["RESPOT_RESUME_STEP"] = str(resume.resume_step)
        session.train()
    except SystemExit as exc:
        if exc.code not in (None, 0):
            return _failed(host, session, exc)
    except BaseException as exc:
        return _failed(host, session, exc)
    assert session is not None
    host.flush()
    notice = session.interruption_notice
    host.send(
        DoneLine(
            step=session.last_step,
            checkpoint_step=session.last_checkpoint_step,
            interrupted=notice is not None,
            notice=None
            if notice is None
            else "spot-interruption"
            if notice == "spot-interruption"
            else "stop",
        )
    )
    return 0


def _stop_on_sigterm(session: TrainingSession) -> None:
    """SIGTERM (the instance shutting down) is a "stop" notice, not a crash."""

    def handle(signum: int, frame: object) -> None:
        # Not from the handler itself: request_interruption takes locks the interrupted
        # main thread may hold.
        threading.Thread(target=session.request_interruption, args=("stop",), daemon=True).start()

    signal.signal(signal.SIGTERM, handle)


def _failed(host: PipeHost, session: TrainingSession | None, exc: BaseException) -> int:
    traceback.print_exc()
    sys.stderr.flush()
    host.flush()
    error = f"{type(exc).__name__}: {exc}"
    host.send(FailedLine(error=error[:2000], step=session.last_step if session else None))
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m respot.agent.session_main")
    parser.add_argument("--launch", required=True, help="the SessionLaunch JSON file")
    parser.add_argument("--events-fd", type=int)
    parser.add_argument("--control-fd", type=int)
    parser.add_argument("--events-fifo", help="named pipe to the agent (torchrun, containers)")
    parser.add_argument("--control-fifo", help="named pipe from the agent")
    args = parser.parse_args(argv)
    # Ctrl-C in a terminal reaches the whole process group: the agent relays it as a "stop"
    # notice, so the session checkpoints instead of dying with KeyboardInterrupt.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    launch = SessionLaunch.model_validate_json(Path(args.launch).read_text())
    if args.events_fifo is not None:
        return _run_named(launch, args.events_fifo, args.control_fifo)
    if args.events_fd is None or args.control_fd is None:
        parser.error("give --events-fd and --control-fd, or --events-fifo and --control-fifo")
    # Children the session starts must not hold the agent's pipes open.
    os.set_inheritable(args.events_fd, False)
    os.set_inheritable(args.control_fd, False)
    # The control pipe is never closed here: a daemon thread may be blocked reading it, and
    # closing a file under a reader blocks; the process exit closes it.
    control = open(args.control_fd, encoding="utf-8")  # noqa: SIM115
    with open(args.events_fd, "w", encoding="utf-8") as events:
        return run(launch, events, control)


def _run_named(launch: SessionLaunch, events_path: str, control_path: str | None) -> int:
    """Rank 0 opens the named pipes (torchrun sets RANK; a single process is rank 0)."""
    if int(os.environ.get("RANK", "0")) != 0:
        with open(os.devnull, "w", encoding="utf-8") as sink:
            return run(launch, sink, None, primary=False)
    # The agent reads the events pipe before starting us and holds the control pipe open.
    control = open(control_path, encoding="utf-8") if control_path else None  # noqa: SIM115
    with open(events_path, "w", encoding="utf-8") as events:
        return run(launch, events, control)


def end_process(code: int) -> None:
    """End the session process: what the interpreter's own exit does first, then `_exit`.

    Python's exit is: wait for the non-daemon threads (and `threading`'s exit hooks:
    executors finish their work), run the `atexit` handlers (logging flushes, multiprocessing
    reaps its children, torch's hooks), flush stdout and stderr, then tear the interpreter
    down. Only that last step is skipped. It is where native threads that outlive `train()`
    die: a torch.distributed gloo worker that frees the last collective's work object
    (after `barrier()` returned in the main thread, even after `destroy_process_group()`)
    must take the GIL to drop a Python reference; during finalization CPython ends that
    thread with `pthread_exit`, whose unwinding through a noexcept C++ destructor calls
    `std::terminate`: SIGABRT, and torchrun then fails the whole session with exit code 1
    although `train()` returned and its checkpoint is uploaded (docs/agent.md, "How a
    session process ends"). `os._exit` ends every thread at once, with the status the
    session earned. Files the session left open and unclosed are not flushed by it: close
    them (outputs must be complete when train() returns; they are uploaded after).
    """
    try:
        threading._shutdown()  # type: ignore[attr-defined]  # what Py_Finalize calls first
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)


if __name__ == "__main__":
    end_process(main())
