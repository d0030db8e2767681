"""`respot local interrupt JOB [--at-step N] [--rebalance]`: one job's spot notice, on demand.

`JobInterrupts.interrupt` finds the job's current instance (its newest attempt's, live, spot,
not yet noticed), waits until that attempt has started training (and, with `at_step`, until
the job has reported that step), then gives it the local market's interruption exactly as
`InstanceFleet.interrupt` does for the chaos schedule and FIS: IMDS `spot/instance-action`,
the EventBridge warning, reclamation when the notice runs out. `--rebalance` sends EC2's
rebalance recommendation first, as EC2 usually does.

Another shell reaches the runtime that `respot local up` runs through a request directory
under its work root (`RequestBox`): the CLI writes a request file and waits for the answer
file next to it. Every wait is bounded, and says why it stopped.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.local.fleet import InstanceFleet, LocalInstance
from respot.core.job import JobRecord

log = logging.getLogger("respot.local.interrupts")

POLL_SECONDS = 0.1
DEFAULT_WAIT_SECONDS = 600.0
NEW_JOB_SECONDS = 60.0  # a job id with no record after this long is not this runtime's
REQUESTS_DIR = ".requests"


class InterruptError(RuntimeError):
    """The job cannot be interrupted now (the message says why)."""


@dataclass(frozen=True)
class Interrupted:
    """What was interrupted."""

    job_id: str
    instance_id: str
    attempt: int | None
    step: int | None  # the job's reported step when the notice went out


class JobInterrupts:
    """Interrupts one job's current spot instance, when it has trained far enough."""

    def __init__(self, fleet: InstanceFleet, job_record: Callable[[str], JobRecord | None]) -> None:
        self.fleet = fleet
        self.job_record = job_record

    def interrupt(
        self,
        job_id: str,
        *,
        at_step: int | None = None,
        rebalance: bool = False,
        wait_seconds: float = DEFAULT_WAIT_SECONDS,
    ) -> Interrupted:
        """Wait (at most `wait_seconds`) for the moment, then send the notice."""
        began = time.monotonic()
        deadline = began + wait_seconds
        while True:
            record = self.job_record(job_id)
            if record is None:  # just submitted: its record comes when the queue is read
                if time.monotonic() - began >= min(wait_seconds, NEW_JOB_SECONDS):
                    raise InterruptError(f"no job {job_id} in this local runtime")
                time.sleep(POLL_SECONDS)
                continue
            if record.state.is_terminal():
                raise InterruptError(f"job {job_id} is {record.state.value}: nothing to interrupt")
            inst = self._ready(record, at_step)
            if inst is not None:
                if rebalance:
                    self.fleet.rebalance(inst.instance_id)
                if self.fleet.interrupt(inst.instance_id):
                    log.info("interrupted %s of %s at step %s", inst.instance_id, job_id,
                             record.progress.step)  # fmt: skip
                    return Interrupted(job_id, inst.instance_id, inst.attempt, record.progress.step)
            if time.monotonic() >= deadline:
                wanted = f"step {at_step}" if at_step is not None else "a training attempt"
                raise InterruptError(
                    f"job {job_id} did not reach {wanted} on a spot instance within "
                    f"{wait_seconds:.0f}s (its step: {record.progress.step}); nothing sent"
                )
            time.sleep(POLL_SECONDS)

    def _ready(self, record: JobRecord, at_step: int | None) -> LocalInstance | None:
        """The current attempt's instance, if it trains (at `at_step` or beyond)."""
        if not record.attempts:
            return None
        attempt = record.attempts[-1]
        if attempt.started_at is None or attempt.instance_id is None:
            return None
        if at_step is not None and (record.progress.step or -1) < at_step:
            return None
        for inst in self.fleet.live():
            if inst.instance_id != attempt.instance_id or inst.noticed_at is not None:
                continue
            if inst.market != "spot":
                raise InterruptError(
                    f"job {record.job_id} runs on on-demand {inst.instance_id}: EC2 sends no "
                    "interruption notice to on-demand instances"
                )
            return inst
        return None


# ---- across processes: `respot local interrupt` in another shell ---------------------------


def requests_dir(work_root: Path) -> Path:
    return work_root / REQUESTS_DIR


class RequestBox:
    """Serves interrupt requests written into `directory` (one thread per request)."""

    def __init__(self, directory: Path, interrupts: JobInterrupts) -> None:
        self.directory = directory
        self.interrupts = interrupts
        self._stop = threading.Event()
        self._seen: set[str] = set()
        self._thread = threading.Thread(target=self._loop, name="interrupt-requests", daemon=True)

    def start(self) -> RequestBox:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            for path in sorted(self.directory.glob("*.request.json")):
                if path.name in self._seen:
                    continue
                self._seen.add(path.name)
                threading.Thread(target=self._serve, args=(path,), daemon=True).start()

    def _serve(self, path: Path) -> None:
        answer: dict[str, Any]
        try:
            request = json.loads(path.read_text())
            at_step = request.get("at_step")
            done = self.interrupts.interrupt(
                str(request["job_id"]),
                at_step=None if at_step is None else int(at_step),
                rebalance=bool(request.get("rebalance")),
                wait_seconds=min(float(request.get("wait_seconds", DEFAULT_WAIT_SECONDS)), 3600),
            )
            answer = {"ok": True, **done.__dict__}
        except InterruptError as exc:
            answer = {"ok": False, "error": str(exc)}
        except Exception as exc:  # a malformed request: answer it, never crash the runtime
            log.exception("interrupt request %s failed", path.name)
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        out = path.with_name(path.name.replace(".request.json", ".answer.json"))
        partial = out.with_name(out.name + ".partial")
        partial.write_text(json.dumps(answer))
        os.replace(partial, out)
        path.unlink(missing_ok=True)


def ask(
    directory: Path,
    job_id: str,
    *,
    at_step: int | None,
    rebalance: bool,
    wait_seconds: float,
    alive: Callable[[], bool],
) -> dict[str, Any]:
    """Write a request and wait for its answer (the runtime's wait, plus a margin)."""
    if not directory.is_dir():
        return {"ok": False, "error": f"{directory} is missing: is this runtime up to date?"}
    name = uuid.uuid4().hex
    request = directory / f"{name}.request.json"
    partial = directory / f".{name}.partial"
    body = {"job_id": job_id, "at_step": at_step, "rebalance": rebalance}
    partial.write_text(json.dumps({**body, "wait_seconds": wait_seconds}))
    os.replace(partial, request)
    answer = directory / f"{name}.answer.json"
    deadline = time.monotonic() + wait_seconds + 30.0
    while not answer.exists():
        if time.monotonic() >= deadline or not alive():
            request.unlink(missing_ok=True)
            return {"ok": False, "error": "the local runtime did not answer (is it still up?)"}
        time.sleep(POLL_SECONDS)
    try:
        return dict(json.loads(answer.read_text()))
    finally:
        answer.unlink(missing_ok=True)
