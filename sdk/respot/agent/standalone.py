"""Run a session with local directories only, no AWS: for tests and the demo's baseline.

The session runs in a child process exactly as under the agent. Checkpoints are kept in
`work_dir/checkpoints/`; `interrupt_at_steps` delivers interruption notices once the
session reports those steps, and each interrupted attempt is followed by a fresh process
that resumes from the newest checkpoint, as a new instance would.
"""

from __future__ import annotations

import logging
import os
import queue
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from respot.agent.exceptions import SessionFailedError
from respot.agent.process import (
    AttemptDirs,
    SessionExited,
    SessionProcess,
    describe_exit,
    session_environment,
)
from respot.agent.protocol import CheckpointLine, DoneLine, FailedLine, ReportLine, SessionLaunch
from respot.agent.snapshots import snapshot_seq
from respot.spec.training import TrainingEnvVar

logger = logging.getLogger(__name__)

EXIT_GRACE_SECONDS = 30.0


def run_standalone(
    spec: TrainingEnvVar,
    *,
    code_dir: Path,
    data_dir: Path,
    work_dir: Path,
    interrupt_at_steps: Sequence[int] = (),
    job_id: str = "standalone",
    timeout_seconds: float | None = None,
) -> Path:
    """Run `spec`'s session to completion; returns the directory holding its outputs.

    Raises `SessionFailedError` if the session raises or its process dies.
    """
    if spec.entry_point is None:
        raise ValueError("the spec names no entry_point")
    work_dir = Path(work_dir).resolve()
    store = work_dir / "checkpoints"
    store.mkdir(parents=True, exist_ok=True)
    pending = sorted(interrupt_at_steps)
    deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
    attempt = 0
    while True:
        attempt += 1
        dirs = AttemptDirs(work_dir / "attempts" / f"{attempt:04d}")
        dirs.create()
        resume_step = _restore_local(store, dirs.checkpoint)
        launch = SessionLaunch(
            entry_point=spec.entry_point,
            code_dir=str(Path(code_dir).resolve()),
            checkpoint_dir=str(dirs.checkpoint),
            data_dir=str(Path(data_dir).resolve()),
            output_dir=str(dirs.output),
            staging_dir=str(dirs.staging),
            hyperparameters=dict(spec.hyperparameters),
            seed=spec.seed,
            job_id=job_id,
            attempt=attempt,
            resume_step=resume_step,
        )
        done = _run_attempt(launch, spec, dirs, store=store, pending=pending, deadline=deadline)
        if not done.interrupted:
            output = work_dir / "output"
            if output.exists():
                shutil.rmtree(output)
            shutil.copytree(dirs.output, output)
            return output
        logger.info("attempt %d interrupted at step %s; resuming", attempt, done.step)


def _run_attempt(
    launch: SessionLaunch,
    spec: TrainingEnvVar,
    dirs: AttemptDirs,
    *,
    store: Path,
    pending: list[int],
    deadline: float | None,
) -> DoneLine:
    events: queue.Queue[Any] = queue.Queue()
    process = SessionProcess(
        launch,
        launch_path=dirs.launch,
        env=session_environment(launch, spec.environment),
        log_path=dirs.log,
        on_event=events.put,
    )
    process.start()
    done: DoneLine | None = None
    failed: FailedLine | None = None
    returned_at: float | None = None
    stopped = False
    while True:
        now = time.monotonic()
        if deadline is not None and now > deadline:
            process.terminate(grace_seconds=2.0)
            deadline = None
        if returned_at is not None and not stopped and now - returned_at > EXIT_GRACE_SECONDS:
            stopped = True  # train() returned; a leftover thread keeps the process alive
            process.terminate(grace_seconds=2.0)
        try:
            event = events.get(timeout=0.5)
        except queue.Empty:
            continue
        if isinstance(event, ReportLine | CheckpointLine) and pending and event.step >= pending[0]:
            pending.pop(0)
            process.interrupt("spot-interruption")
        if isinstance(event, CheckpointLine):
            _keep_local(store, Path(event.path), event.step, launch.attempt, spec.checkpoint_keep)
        elif isinstance(event, DoneLine):
            done, returned_at = event, time.monotonic()
        elif isinstance(event, FailedLine):
            failed, returned_at = event, time.monotonic()
        elif isinstance(event, SessionExited):
            code = event.exit_code
            break
    if done is None or (code != 0 and not stopped):
        reason = (
            f"the session raised {failed.error}"
            if failed
            else f"the session process ended without finishing ({describe_exit(code)})"
        )
        raise SessionFailedError(reason, exit_code=code, log_tail=process.log_tail())
    return done


def _keep_local(store: Path, snapshot: Path, step: int, attempt: int, keep: int) -> None:
    """Store a snapshot as checkpoint (step, attempt) by hard links; keep the newest `keep`."""
    target = store / f"{step:012d}-{attempt:04d}"
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(snapshot, partial, copy_function=os.link)
    if target.exists():
        shutil.rmtree(target)
    os.rename(partial, target)
    for old in sorted(p for p in store.iterdir() if not p.name.endswith(".partial"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    # The snapshot is stored; staging keeps only the newest (the next one links from it).
    seq = snapshot_seq(snapshot)
    for path in snapshot.parent.iterdir():
        other = snapshot_seq(path)
        if seq is not None and other is not None and other < seq:
            shutil.rmtree(path, ignore_errors=True)


def _restore_local(store: Path, dest: Path) -> int | None:
    """Copy the newest stored checkpoint into `dest`; its step, or None if there is none."""
    stored = sorted(p for p in store.iterdir() if not p.name.endswith(".partial"))
    if not stored:
        return None
    newest = stored[-1]
    shutil.rmtree(dest)
    # A copy, not links: the session may rewrite these files in place.
    shutil.copytree(newest, dest)
    return int(newest.name.split("-")[0])
