"""What the end-to-end tests share: job specs of the test sessions, S3 reads, invariants."""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from infra.local.runtime import LocalRuntime
from infra.local.sandbox import AGENT_JOURNAL
from respot.client.handle import JobHandle, JobStatus
from respot.core.job import JobRecord
from respot.spec.training import TrainingEnvVar
from respot.storage import layout
from tests.core.launch_record import launch_mismatch

SESSIONS = Path(__file__).parent / "sessions"


def machine_stretch() -> float:
    """How many times slower than an idle machine this one runs now (1 to 6): load per core.

    The local runtime compresses simulated time (1/30: a two-minute notice lasts 4 s), but
    its real processes (an agent's start, the emulator sharing one interpreter with the
    dispatcher) do not compress: on a machine whose cores are busy with other work, a boot
    that fits 40 real seconds when idle does not, and the job retries boots it never needed.
    A test that plays a whole market at once stretches its simulated time by this factor, so
    the simulation is sized to the machine it runs on (the test asserts the same invariants
    whatever the factor: states, results, one live instance). The 1- and 5-minute load
    averages are read, the larger one, since a busy spell may have just begun.
    """
    per_core = max(os.getloadavg()[:2]) / (os.cpu_count() or 1)
    return min(6.0, max(1.0, per_core))


# A return's spot instance is launched before the on-demand one is asked to stop: the stop
# key is written right after the launch result is recorded, well within this (real seconds).
HANDOFF_GRACE_SECONDS = 10.0


class Invariants:
    """Samples the fleet: a job never has two instances training at once, except during a
    return's hand-off (docs/lifecycle.md): then the older one has been asked to stop (its
    attempt's stop key is in S3) within `HANDOFF_GRACE_SECONDS` of the newer one's launch."""

    def __init__(self, rt: LocalRuntime) -> None:
        self.rt = rt
        self.violations: list[str] = []
        self.max_live: dict[str, int] = defaultdict(int)
        self.handoffs: dict[str, set[tuple[str, str]]] = defaultdict(set)  # (older, newer)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        assert self.rt.fleet is not None
        while not self._stop.wait(0.05):
            live = self.rt.fleet.live()
            training: dict[str, int] = defaultdict(int)
            per_job: dict[str, int] = defaultdict(int)
            for inst in live:
                if inst.job_id is None:
                    continue
                per_job[inst.job_id] += 1
                if inst.noticed_at is None:
                    training[inst.job_id] += 1
            for job, n in per_job.items():
                self.max_live[job] = max(self.max_live[job], n)
            for job, n in training.items():
                if n == 2:
                    self._handoff(job, [i for i in live if i.job_id == job and not i.noticed_at])
                elif n > 2:
                    self.violations.append(f"{job}: {n} un-noticed live instances")

    def _handoff(self, job: str, pair: list[Any]) -> None:
        older, newer = sorted(pair, key=lambda i: i.launched_at)
        if older.attempt is not None and self._stop_asked(job, older.attempt):
            self.handoffs[job].add((older.instance_id, newer.instance_id))
        elif time.monotonic() - newer.launched_at > HANDOFF_GRACE_SECONDS:
            self.violations.append(
                f"{job}: {older.instance_id} and {newer.instance_id} both train, and "
                f"{older.instance_id} was not asked to stop within {HANDOFF_GRACE_SECONDS}s"
            )

    def _stop_asked(self, job: str, attempt: int) -> bool:
        cp = self.rt.control_plane()
        try:
            cp.s3.head_object(Bucket=cp.bucket, Key=layout.control_key(job, attempt))
        except Exception:
            return False
        return True

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def wait_for(check: Callable[[], bool], timeout: float, what: str = "the condition") -> None:
    """Poll `check` every 0.2 s; fail naming `what` unless it holds within `timeout` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout}s")


def counting_spec(name: str, **fields: Any) -> TrainingEnvVar:
    """A CountingSession job (see sessions/e2esessions/counting.py)."""
    hyper = {"steps": 240, "step_seconds": 0.02, "checkpoint_every": 40}
    hyper.update(fields.pop("hyperparameters", {}))
    return TrainingEnvVar(
        name=name,
        entry_point=fields.pop("entry_point", "e2esessions.counting:CountingSession"),
        source_dir=str(SESSIONS),
        hyperparameters=hyper,
        seed=fields.pop("seed", 2),
        **fields,
    )


def expected_total(steps: int, seed: int) -> int:
    """What an uninterrupted CountingSession ends with."""
    return (seed + 1) * steps * (steps + 1) // 2


def output(rt: LocalRuntime, job_id: str, name: str) -> str:
    """An output file of a finished job, from S3."""
    body = rt.client("s3").get_object(
        Bucket=rt.sdk_deployment().bucket, Key=f"{layout.outputs_prefix(job_id)}{name}"
    )["Body"]
    return str(body.read().decode())


def wait_no_live_instances(rt: LocalRuntime, job_id: str, timeout: float = 60.0) -> None:
    """Fail unless every instance of the job is gone within `timeout` seconds."""
    assert rt.fleet is not None
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not [i for i in rt.fleet.live() if i.job_id == job_id]:
            return
        time.sleep(0.1)
    live = [i.instance_id for i in rt.fleet.live() if i.job_id == job_id]
    raise AssertionError(f"instances of {job_id} still running: {live}")


def assert_launches_match_attempts(rt: LocalRuntime, record: JobRecord) -> None:
    """Every instance EC2 started for the job is one of its attempts, in order, and every
    attempt's instance is one EC2 started (`tests.core.launch_record`: an attempt whose launch
    had no answer before the job ended launched nothing). The message names the instances."""
    assert rt.fleet is not None
    launched = [i.instance_id for i in rt.fleet.of_job(record.job_id)]
    problem = launch_mismatch(launched, record)
    assert problem is None, f"{record.job_id}: {problem}\n{job_story(rt, record.job_id)}"


def job_story(rt: LocalRuntime, job_id: str, *, timeline: int = 20, log_lines: int = 30) -> str:
    """What a failed e2e test should print about a job: the control plane's record (state,
    timeline tail, every attempt), each of its instances as the fleet saw it (its events,
    seconds before now) and the agent journal's tail of its newest instances. CI logs are
    all we get of a run that failed, so this is written for a reader who cannot rerun it."""
    now, mono = datetime.now(UTC), time.monotonic()
    lines = [f"--- job {job_id} at {now.isoformat(timespec='milliseconds')}"]
    record = rt.job_record(job_id)
    if record is None:
        lines.append("no record")
    else:
        lines.append(
            f"state={record.state} version={record.version} updated_at={_t(record.updated_at)}"
            f" last_heartbeat_at={_t(record.last_heartbeat_at)} step={record.progress.step}"
            f" checkpoint={record.checkpoint.step if record.checkpoint else None}"
            f" interruptions={record.interruptions} reason={record.reason!r}"
        )
        lines.append(f"timeline (last {timeline} of {len(record.timeline)}):")
        lines += [f"  {_t(e.at)} {e.kind}: {e.text}" for e in record.timeline[-timeline:]]
        lines.append("attempts:")
        for a in record.attempts:
            lines.append(
                f"  #{a.number} {a.placement.market} {a.instance_id} end={a.end}"
                f" requested={_t(a.requested_at)} launched={_t(a.launched_at)}"
                f" bound={_t(a.bound_at)} started={_t(a.started_at)}"
                f" heard={_t(a.last_heard_at)} notice={_t(a.notice_at)} ended={_t(a.ended_at)}"
                f" restored={a.restored_step} last_step={a.last_step}"
                f" checkpoint={a.checkpoint_step} boot_failure={a.boot_failure!r}"
            )
    assert rt.fleet is not None
    instances = rt.fleet.of_job(job_id)
    lines.append("instances (fleet; seconds before now):")
    for inst in instances:
        events = ", ".join(f"-{mono - at:.1f}s {what}" for at, what in inst.events)
        lines.append(
            f"  {inst.instance_id} attempt={inst.attempt} {inst.market} state={inst.state}"
            f" launched=-{mono - inst.launched_at:.1f}s [{events}]"
        )
    for inst in instances[-2:]:
        journal = inst.root.log(AGENT_JOURNAL) if inst.root is not None else ""
        tail = journal.splitlines()[-log_lines:]
        lines.append(f"agent journal of {inst.instance_id} (last {len(tail)} lines):")
        lines += [f"  | {line}" for line in tail]
    return "\n".join(lines)


def _t(at: datetime | None) -> str:
    return at.strftime("%H:%M:%S.%f")[:-3] if at is not None else "-"


def wait_all(rt: LocalRuntime, handles: list[JobHandle], timeout: float) -> list[JobStatus]:
    """Wait for every job (each within `timeout` seconds of its own wait); a job still live
    then fails the test with the story of every job not over (`job_story`)."""
    statuses = []
    for handle in handles:
        try:
            statuses.append(handle.wait(timeout=timeout, poll_seconds=0.5))
        except TimeoutError as e:
            stories = [
                job_story(rt, h.job_id)
                for h in handles
                if (s := h.status()).record is None or not s.is_terminal
            ]
            raise AssertionError(f"{e} after {timeout}s\n" + "\n".join(stories)) from e
    return statuses
