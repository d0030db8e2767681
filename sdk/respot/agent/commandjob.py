"""How an attempt runs a command job (steps 5-6 for `command:`; docs/commands.md).

The command runs in its own process group (a new session), in the code directory, on the
job's Python, with the contract's environment (`respot.commands.contract`). Its processes
report and say "checkpoint saved" through the spool directory (`respot.commands.channel`);
the agent snapshots the checkpoint directory when told, and uploads each snapshot as a
session's. On the notice the whole group gets the job's `stop_signal` at once and the notice
file appears; a group still running at the last safe moment is killed (SIGKILL) and the
newest complete checkpoint is what the replacement restores. The endings are a session's.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import queue
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

from respot.agent.attemptstate import AgentResult, _max
from respot.agent.notices import RebalanceNotice, deadlines, stop_notice
from respot.agent.process import SessionExited, copy_output, describe_exit, respot_site
from respot.agent.progress import Heartbeat
from respot.agent.protocol import ReportLine
from respot.agent.snapshots import CheckpointSnapshots
from respot.agent.telemetry import GpuTelemetry
from respot.agent.trainloop import TrainingLoop
from respot.agent.uploads import CheckpointUploader
from respot.commands import contract
from respot.commands.argv import command_argv
from respot.commands.channel import ChannelMessage, ChannelReader
from respot.storage import layout
from respot.wire.messages import JobSubmission

logger = logging.getLogger("respot.agent")

LOG_TAIL_LINES = 50
TENSORBOARD_SYNC_SECONDS = 30.0
SNAPSHOT_WAIT_SECONDS = 600.0  # at the end without a notice: the snapshots asked for first
_AGENT_ONLY = ("RESPOT_AGENT_QUEUE_URL", "RESPOT_SHUTDOWN", "RESPOT_HANDOFF_WAIT_SECONDS")


class CommandProcess:
    """The command, in a process group of its own; its output to the log file and a tail."""

    def __init__(
        self,
        argv: list[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        log_path: Path,
        on_event: Callable[[Any], None],
        on_output: Callable[[bytes], None] | None = None,
    ) -> None:
        self.argv = argv
        self.cwd = cwd
        self.env = dict(env)
        self.log_path = log_path
        self._on_event = on_event
        self._on_output = on_output
        self._tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
        self._tail_lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self) -> None:
        """Start it; FileNotFoundError/PermissionError when the program cannot be run."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._proc = subprocess.Popen(  # noqa: S603 - the job's argv list, never a shell
            self.argv,
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            close_fds=True,
            start_new_session=True,  # its own process group: the notice reaches all of it
        )
        assert self._proc.stdout is not None
        reader = threading.Thread(target=self._read, args=(self._proc.stdout,), daemon=True)
        reader.start()
        threading.Thread(target=self._wait, args=(reader,), daemon=True).start()

    def signal_group(self, sig: int) -> bool:
        """Send `sig` to every process of the group; False if none is left."""
        if self._proc is None:
            return False
        try:
            os.killpg(self._proc.pid, sig)
        except ProcessLookupError:
            return False
        return True

    def log_tail(self) -> list[str]:
        with self._tail_lock:
            return list(self._tail)

    def _read(self, stream: IO[bytes]) -> None:
        copy_output(stream, self.log_path, self._on_output, self._tail, self._tail_lock)

    def _wait(self, reader: threading.Thread) -> None:
        assert self._proc is not None
        code = self._proc.wait()
        # What the command left running (a stray child) goes with it: the group is the job.
        self.signal_group(signal.SIGKILL)
        reader.join(timeout=5.0)
        self._on_event(SessionExited(code))


def command_environment(
    base: Mapping[str, str],
    user_env: Mapping[str, str],
    *,
    python: str,
    variables: Mapping[str, str],
    pylib: Path,
) -> dict[str, str]:
    """The command's environment: the agent's (less its own settings), the job's
    `environment` and secrets, the contract's RESPOT_* variables; the job's Python first on
    PATH, and respot's package (only it, not its dependencies) importable."""
    env = {k: v for k, v in base.items() if k not in _AGENT_ONLY}
    env.pop(contract.ENV_RESUME_STEP, None)
    env.update(user_env)
    env.update(variables)
    env["PYTHONUNBUFFERED"] = "1"
    bindir = str(Path(python).parent)
    env["PATH"] = os.pathsep.join(p for p in (bindir, env.get("PATH", "")) if p)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(pylib), env.get("PYTHONPATH", "")) if p)
    return env


def respot_only(pylib: Path) -> Path:
    """A directory holding only a link to respot's package, for the command's PYTHONPATH:
    `import respot` works on the job's Python, its dependencies never shadow the job's."""
    pylib.mkdir(parents=True, exist_ok=True)
    link = pylib / "respot"
    if not link.exists():
        link.symlink_to(Path(respot_site()) / "respot", target_is_directory=True)
    return pylib


def rebalance_file(notice_file: Path) -> Path:
    """RESPOT_REBALANCE_FILE: beside the notice file, appears on EC2's rebalance
    recommendation (docs/commands.md)."""
    return notice_file.with_name("rebalance")


class Snapshotter:
    """Takes the snapshots `checkpoint_saved` asks for, in order, in a thread of its own (a
    big checkpoint's copy must not delay the notice), and hands each to the uploader; the
    caller's `checkpoint_saved` returns once its snapshot is taken (or failed)."""

    def __init__(
        self,
        source: Path,
        staging: Path,
        uploader: CheckpointUploader,
        restored_step: int | None,
        noticed: Callable[[], bool],
    ) -> None:
        self.source = source
        self.snapshots = CheckpointSnapshots(source, staging)
        self.uploader = uploader
        self.noticed = noticed
        self.taken = contract.signature(source)  # the restored checkpoint, or nothing
        self.last_step = restored_step
        self._lock = threading.Lock()
        self._queue: queue.Queue[ChannelMessage | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="command-snapshots", daemon=True)
        self._thread.start()

    def ask(self, message: ChannelMessage) -> None:
        self._queue.put(message)

    def close(self, timeout: float) -> bool:
        """Take what was asked, then stop; False if that outlasted `timeout`."""
        self._queue.put(None)
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while (message := self._queue.get()) is not None:
            ok = False
            try:
                self.take(message.step, "notice" if self.noticed() else "periodic")
                ok = True
            except Exception:
                logger.exception("snapshot of checkpoint step %d failed", message.step)
            finally:
                ChannelReader.done(message, ok=ok)  # its checkpoint_saved returns ok

    def take(self, step: int, reason: str) -> None:
        with self._lock:
            if self.last_step is not None and step <= self.last_step:
                logger.info("checkpoint step %d: already have step %s", step, self.last_step)
                return
            self.taken = contract.signature(self.source)
            path = self.snapshots.take(step)
            self.last_step = step
        self.uploader.submit(path, step, reason)

    def changed(self) -> bool:
        """Does the directory differ from the newest snapshot (or the restored checkpoint)?"""
        with self._lock:
            return contract.signature(self.source) != self.taken


class CommandLoop(TrainingLoop):
    """Steps 5-6 of a command job; the endings and the notice rules are a session's."""

    def _command_process(
        self, submission: JobSubmission, on_event: Callable[[Any], None]
    ) -> tuple[CommandProcess, ChannelReader, Path]:
        spec = submission.spec
        assert spec.command is not None
        from respot.agent import launch as launchers

        ipc = self.dirs.root / "ipc"
        channel = ipc / "channel"
        for d in (channel, ipc / "tensorboard"):
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)
        notice_file = ipc / "notice"
        notice_file.unlink(missing_ok=True)
        rebalance_file(notice_file).unlink(missing_ok=True)
        variables = {
            contract.ENV_JOB_ID: self.job_id,
            contract.ENV_ATTEMPT: str(self.attempt),
            "RESPOT_SEED": str(spec.seed),
            contract.ENV_HYPERPARAMETERS: json.dumps(dict(spec.hyperparameters)),
            contract.ENV_CHECKPOINT_DIR: str(self.dirs.checkpoint),
            contract.ENV_RESUMED: "1" if self.restored_step is not None else "0",
            contract.ENV_OUTPUT_DIR: str(self.dirs.output),
            contract.ENV_DATA_DIR: str(self.dirs.data),
            contract.ENV_TENSORBOARD_DIR: str(ipc / "tensorboard"),
            contract.ENV_NOTICE_FILE: str(notice_file),
            contract.ENV_REBALANCE_FILE: str(rebalance_file(notice_file)),
            contract.ENV_CHANNEL_DIR: str(channel),
        }
        if self.restored_step is not None:
            variables[contract.ENV_RESUME_STEP] = str(self.restored_step)
        python = self.job_python.python
        nproc = launchers.processes(spec.processes_per_node)
        argv = command_argv(list(spec.command), python=python, nproc=nproc)
        if spec.image is not None:  # the image's own python, inside `docker run`
            box = self._launcher(spec, {**spec.environment, **variables, "PYTHONPATH": ""})
            argv = box.argv[:-1] + command_argv(list(spec.command), python="python", nproc=nproc)
        if self.config.log_group and self.agent.logs is not None and self.shipper is None:
            from respot.agent.logship import LogShipper, stream_name

            self.shipper = LogShipper(
                client=self.agent.logs,
                group=self.config.log_group,
                stream=stream_name(self.job_id, self.attempt, self.identity.instance_id),
            )
        env = command_environment(
            os.environ,
            {**spec.environment, **self._secrets(spec)},
            python=python,
            variables=variables,
            pylib=respot_only(ipc / "pylib"),
        )
        process = CommandProcess(
            argv,
            cwd=self.dirs.code,
            env=env,
            log_path=self.dirs.log,
            on_event=on_event,
            on_output=self.shipper.write if self.shipper is not None else None,
        )
        return process, ChannelReader(channel), notice_file

    def _run_command(self, submission: JobSubmission, uploader: CheckpointUploader) -> AgentResult:
        spec = submission.spec
        assert spec.command is not None
        events = self.agent._events
        stop_signal = signal.Signals[spec.stop_signal or contract.DEFAULT_STOP_SIGNAL]
        train_started = time.monotonic()
        process, channel, notice_file = self._command_process(submission, events.put)
        try:
            process.start()
        except OSError as exc:
            what = "was not found" if isinstance(exc, FileNotFoundError) else exc.strerror
            reason = (
                f"command: the program {spec.command[0]!r} {what or exc}; name a program on "
                "the job's PATH (e.g. 'python', 'torchrun') or a file in source_dir "
                "(e.g. './train.sh', executable)"
            )
            return self._failed(uploader, reason, None, [], None)
        told = False
        snapper = Snapshotter(
            self.dirs.checkpoint, self.dirs.staging, uploader, self.restored_step, lambda: told
        )
        self.scalars.resume_step = self.restored_step
        self.scalars.start()
        telemetry = GpuTelemetry(
            every_seconds=self.config.gpu_sample_seconds, on_sample=self._gpu_sample
        ).start()
        self.progress.gpus = telemetry.take
        heartbeat = Heartbeat(self.messenger, self.progress, self.config.heartbeat_seconds)
        heartbeat.start()
        logger.info("command %s started (pid %s)", spec.command[:3], process.pid)
        exit_code: int | None = None
        kill_at: float | None = None
        end_by: float | None = None
        killed = False
        synced_at = time.monotonic()

        def drain() -> None:
            for message in channel.poll():
                if message.kind == "report":
                    report = ReportLine(
                        step=message.step,
                        total_steps=message.total_steps,
                        metrics=message.metrics,
                        at=message.at,
                    )
                    if self.progress.update(report):
                        heartbeat.nudge()
                    self.scalars.add(message.step, message.metrics, time.time())
                else:
                    snapper.ask(message)

        try:
            while exit_code is None:
                self.agent._check_signal()
                try:
                    event = events.get(timeout=0.05)
                except queue.Empty:
                    event = None
                if isinstance(event, SessionExited):
                    exit_code = event.exit_code
                elif isinstance(event, RebalanceNotice) and not told:
                    # Told, not stopped: a file only (no signal; the notice file keeps its
                    # meaning); code that wants an early checkpoint polls for it.
                    rebalance = rebalance_file(notice_file)
                    if not rebalance.exists():
                        contract.write_notice(rebalance, "rebalance", None)
                        logger.info("a rebalance recommendation: told the command by its file")
                drain()
                notice = self.agent._notice
                if notice is not None and not told:
                    # At once: a command's replacement starts cold, so nothing is held back
                    # for it (a return's held stop becomes a plain stop, as for a session).
                    told = True
                    if notice.hold_seconds is not None:
                        notice = self.agent._notice = stop_notice()
                    kill_at, end_by = deadlines(notice.at)
                    contract.write_notice(notice_file, notice.notice, notice.at)
                    process.signal_group(stop_signal)
                    logger.warning("told the command: %s (%s)", notice.notice, stop_signal.name)
                now = time.monotonic()
                if kill_at is not None and not killed and now >= kill_at:
                    killed = True
                    logger.error(
                        "the command still runs at the last safe moment: killing it; the "
                        "newest complete checkpoint (step %s) stays the job's",
                        snapper.last_step,
                    )
                    process.signal_group(signal.SIGKILL)
                if now - synced_at > TENSORBOARD_SYNC_SECONDS:
                    synced_at = now
                    self._sync_command_tensorboard()
            drain()  # what it wrote just before it exited
        finally:
            heartbeat.stop()
            telemetry.stop()
            if exit_code is None:  # the loop itself failed: do not leave the command running
                process.signal_group(signal.SIGKILL)
            limit = SNAPSHOT_WAIT_SECONDS if end_by is None else end_by - time.monotonic()
            if not snapper.close(max(1.0, limit)):
                logger.error("the snapshots asked for are not all taken in time; going on")
        train_seconds = time.monotonic() - train_started
        logger.info("command ended: %s", describe_exit(exit_code))
        self._sync_command_tensorboard()
        step = self.progress.step
        if told:
            changed = snapper.changed()
            if contract.snapshot_at_exit(noticed=True, exit_code=exit_code, changed=changed):
                label = _max(step, snapper.last_step) or 0
                if snapper.last_step is not None and label <= snapper.last_step:
                    # The directory changed since the newest snapshot, but no newer step was
                    # reported (a script that never calls respot.report): newer content under
                    # the next label, never skipped as "already have" under the old one.
                    label = snapper.last_step + 1
                snapper.take(label, "notice")
            elif changed:
                logger.warning(
                    "the checkpoint directory changed but the command ended by %s after the "
                    "notice: not a complete checkpoint, not uploaded (docs/commands.md)",
                    describe_exit(exit_code),
                )
            return self._preempted(uploader, _max(step, snapper.last_step), end_by)
        if exit_code == 0:
            return self._completed(uploader, step, train_seconds)
        reason = f"the command failed ({describe_exit(exit_code)})"
        return self._failed(uploader, reason, exit_code, process.log_tail(), step)

    def _sync_command_tensorboard(self) -> None:
        """Upload the event files the command wrote into RESPOT_TENSORBOARD_DIR."""
        root = self.dirs.root / "ipc" / "tensorboard"
        prefix = layout.tensorboard_prefix(self.job_id) + "command/"
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            with contextlib.suppress(Exception):
                rel = path.relative_to(root).as_posix()
                self.s3.upload_file(str(path), self.config.bucket, prefix + rel)
