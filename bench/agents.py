"""In-process stand-ins for the agents of many instances, for the scale benchmark.

One process per instance (the real agent) does not fit 1,000 instances on two cores, so
`SimulatedAgents` plays every instance's agent from a few threads: it sends the same
`AgentMessage`s, to the same agent-events queue, that a real agent sends — started (with the
step of the job's newest checkpoint), a heartbeat every 60 s simulated, a checkpoint every
`checkpoint_every` simulated seconds, then completed; on the interruption notice a notice
checkpoint, the handoff marker in S3 and preempted, then the instance shuts itself down. Only
the instance's work is simulated: the control plane, the handlers, the queues, the EventBridge
rules and moto are the real ones.

With `hold_finish`, a job that reaches its last step before `release()` waits there (still
heartbeating) instead of completing: the scale benchmark reclaims instances once every job
trains, and without the hold the first jobs could finish (and their instances go) before the
last one boots, so that moment never came and the reclaims were never fired.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from infra.local.clock import Timers, TimeScale
from infra.local.cloud import LocalDeployment
from infra.local.fleet import InstanceFleet, LocalInstance
from respot.storage import layout
from respot.wire.messages import (
    AgentBody,
    AgentCheckpoint,
    AgentCompleted,
    AgentMessage,
    AgentPreempted,
    AgentProgress,
    AgentStarted,
    encode,
)

log = logging.getLogger("respot.bench.agents")


@dataclass
class _Run:
    inst: LocalInstance
    job_id: str
    attempt: int
    started: float = 0.0  # monotonic, when training began
    start_step: int = 0
    seq: int = 0
    alive: bool = True
    noticed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


class SimulatedAgents:
    """Plays the agent of every instance of a local fleet (see the module docstring)."""

    def __init__(
        self,
        *,
        scale: TimeScale,
        total_steps: int = 600,
        steps_per_second: float = 1.0,  # simulated
        heartbeat_seconds: float = 60.0,  # simulated
        checkpoint_every_seconds: float = 120.0,  # simulated
        setup_seconds: float = 5.0,  # simulated: code, data, restore
        workers: int = 8,
        hold_finish: bool = False,
    ) -> None:
        self.scale = scale
        self.total_steps = total_steps
        self.steps_per_second = steps_per_second
        self.heartbeat_seconds = heartbeat_seconds
        self.checkpoint_every_seconds = checkpoint_every_seconds
        self.setup_seconds = setup_seconds
        self.fleet: InstanceFleet | None = None
        self.deployment: LocalDeployment | None = None
        self.timers: Timers | None = None
        self.sent: Counter[str] = Counter()
        self.sent_ids: set[str] = set()
        # (monotonic time, job, attempt, instance, kind) of every message sent, in order
        self.sent_log: list[tuple[float, str, int, str, str]] = []
        self.send_failures = 0
        self.checkpoints: dict[str, int] = {}  # job -> newest checkpoint step ("in S3")
        self._runs: dict[str, _Run] = {}
        self._released = threading.Event()
        if not hold_finish:
            self._released.set()
        self._held: list[_Run] = []
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sim-agent")
        self._sqs: Any = None
        self._s3: Any = None

    def attach(self, fleet: InstanceFleet) -> None:
        """Take over the agents of `fleet` (call before any instance boots)."""
        self.fleet = fleet
        self.deployment = fleet.deployment
        self.timers = fleet.timers
        self._sqs = fleet.deployment.client("sqs")
        self._s3 = fleet.deployment.client("s3")

    def training(self) -> list[LocalInstance]:
        """Instances whose agent trains: started, not noticed, not finished, still alive."""
        with self._lock:
            runs = list(self._runs.values())
        return [r.inst for r in runs if r.alive and r.started and not r.noticed and r.inst.alive]

    def held(self) -> int:
        """Jobs waiting at their last step for `release()`."""
        with self._lock:
            return sum(1 for r in self._held if r.alive and not r.noticed)

    def release(self) -> None:
        """Let the jobs finish: the held ones complete now, the others when their steps are done."""
        with self._lock:
            self._released.set()
            held, self._held = self._held, []
        for run in held:
            self._pool.submit(self._complete, run)

    def stop(self) -> None:
        """Stop sending."""
        with self._lock:
            for run in self._runs.values():
                run.alive = False
        self._pool.shutdown(wait=True, cancel_futures=True)

    # ---- InstanceAgent -----------------------------------------------------------------------

    def boot(self, inst: LocalInstance) -> None:
        """Start the attempt: setup, then AgentStarted, heartbeats, checkpoints."""
        if inst.job_id is None or inst.attempt is None:
            return
        run = _Run(inst, inst.job_id, inst.attempt)
        with self._lock:
            self._runs[inst.instance_id] = run
        self._after(self.setup_seconds, lambda: self._pool.submit(self._start, run))

    def notice(self, inst: LocalInstance, reclaim_at: datetime) -> None:
        """Checkpoint now, hand off, report preempted, shut down."""
        run = self._runs.get(inst.instance_id)
        if run is None:
            return
        with run.lock:
            if run.noticed or not run.alive:
                return
            run.noticed = True
        self._pool.submit(self._preempt, run)

    def kill(self, inst: LocalInstance) -> None:
        """The instance is gone."""
        run = self._runs.get(inst.instance_id)
        if run is not None:
            run.alive = False

    # ---- the attempt -------------------------------------------------------------------------

    def _after(self, simulated_seconds: float, action: Any) -> None:
        assert self.timers is not None
        self.timers.after(self.scale.real(simulated_seconds), action)

    def _step(self, run: _Run) -> int:
        elapsed = self.scale.simulated(time.monotonic() - run.started) if run.started else 0.0
        step = min(run.start_step + int(elapsed * self.steps_per_second), self.total_steps)
        if not self._released.is_set():
            return min(step, self.total_steps - 1)  # held before its last step
        return step

    def _start(self, run: _Run) -> None:
        if not run.alive or run.noticed:
            return
        with self._lock:
            restored = self.checkpoints.get(run.job_id)
        run.start_step = restored or 0
        run.started = time.monotonic()
        self._send(run, AgentStarted(restored_step=restored, restore_seconds=0.0))
        self._after(self.heartbeat_seconds, lambda: self._pool.submit(self._beat, run))
        self._after(self.checkpoint_every_seconds, lambda: self._pool.submit(self._periodic, run))
        remaining = (self.total_steps - run.start_step) / self.steps_per_second
        self._after(remaining, lambda: self._pool.submit(self._complete, run))

    def _beat(self, run: _Run) -> None:
        if not run.alive or run.noticed:
            return
        self._send(run, AgentProgress(step=self._step(run), total_steps=self.total_steps))
        self._after(self.heartbeat_seconds, lambda: self._pool.submit(self._beat, run))

    def _checkpoint(self, run: _Run, reason: str) -> int:
        step = self._step(run)
        with self._lock:
            self.checkpoints[run.job_id] = max(self.checkpoints.get(run.job_id, 0), step)
        self._send(
            run,
            AgentCheckpoint(
                step=step,
                manifest_key=layout.manifest_key(run.job_id, step, run.attempt),
                size_bytes=1_000_000,
                uploaded_bytes=1_000_000,
                upload_seconds=0.0,
                reason="notice" if reason == "notice" else "periodic",
            ),
        )
        return step

    def _periodic(self, run: _Run) -> None:
        if not run.alive or run.noticed:
            return
        held = not self._released.is_set()
        if self._step(run) >= self.total_steps - (1 if held else 0):
            return  # done, or held at its last step
        self._checkpoint(run, "periodic")
        self._after(self.checkpoint_every_seconds, lambda: self._pool.submit(self._periodic, run))

    def _complete(self, run: _Run) -> None:
        with self._lock:
            if not self._released.is_set():
                self._held.append(run)  # release() completes it
                return
        with run.lock:
            if not run.alive or run.noticed:
                return
            run.noticed = True  # nothing else is sent after completion
        self._send(
            run,
            AgentCompleted(
                step=self.total_steps,
                outputs_prefix=layout.outputs_prefix(run.job_id),
                train_seconds=0.0,
            ),
        )
        self._shutdown(run, "completed")

    def _preempt(self, run: _Run) -> None:
        if not run.alive:
            return
        step = self._checkpoint(run, "notice") if run.started else None
        with self._lock:
            checkpoint = self.checkpoints.get(run.job_id)
        assert self._s3 is not None and self.deployment is not None
        body = {"attempt": run.attempt, "step": step, "checkpoint_step": checkpoint}
        self._s3.put_object(
            Bucket=self.deployment.bucket,
            Key=layout.handoff_key(run.job_id, run.attempt),
            Body=json.dumps(body).encode(),
        )
        self._send(
            run, AgentPreempted(step=step, checkpoint_step=checkpoint, notice="spot-interruption")
        )
        self._shutdown(run, "preempted")

    def _shutdown(self, run: _Run, why: str) -> None:
        run.alive = False
        assert self.fleet is not None
        fleet = self.fleet
        # The agent powers its machine off: EC2's state reason Client.InstanceInitiatedShutdown.
        self._after(
            1.0, lambda: fleet.terminate(run.inst.instance_id, f"agent {why}", by_its_os=True)
        )

    def _send(self, run: _Run, body: AgentBody) -> None:
        if not run.alive:
            return
        assert self._sqs is not None and self.deployment is not None
        with run.lock:
            run.seq += 1
            seq = run.seq
        message = AgentMessage(
            job_id=run.job_id,
            attempt=run.attempt,
            instance_id=run.inst.instance_id,
            seq=seq,
            sent_at=datetime.now(UTC),
            body=body,
        )
        for attempt in range(5):
            try:
                answer = self._sqs.send_message(
                    QueueUrl=self.deployment.queue_urls["agent-events"], MessageBody=encode(message)
                )
            except Exception:
                time.sleep(0.2 * (attempt + 1))
                continue
            with self._lock:
                self.sent[body.kind] += 1
                self.sent_ids.add(answer["MessageId"])
                self.sent_log.append(
                    (time.monotonic(), run.job_id, run.attempt, run.inst.instance_id, body.kind)
                )
            return
        with self._lock:
            self.send_failures += 1
        log.error("could not send %s for %s", body.kind, run.job_id)
