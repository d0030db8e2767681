"""Play a `ReplayPlan` on the local runtime: the real handlers, agents and policy, one job.

The local runtime's simulated minute (its reconcile period, the live policy's tick) is made
to last one trace tick; the local market plays pool k's window in zone k; EC2's fulfilment
and boot are set so that a launch plus the agent's own start takes about the plan's
changeover d. The job is `ReplaySession` (steps paced by the clock, a checkpoint on a notice,
resumed from it) whose steps add up to C, with the deadline D and the estimate C,
all in real seconds. Submission waits for a boundary of the account's shared tick (pools'
histories are kept on epoch // tick), and the market's clock starts when the job's does.

Needs a checkout of respot (`infra/`), as `respot local up` does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from respot.core.cost import ledger
from respot.core.job import JobRecord
from respot.replay.plan import INSTANCE_TYPE, LiveAttempt, ReplayPlan

NOTICE_SECONDS = 120.0  # EC2's spot interruption notice (trace seconds)
LOCAL_MINUTE = 60.0  # simulated seconds of the local runtime's reconcile period
AGENT_START_SECONDS = 3.0  # real: boot script -> training, a first guess (then measured)
STEPS = 100  # the job's steps (C / STEPS real seconds each)
WARM_UP_TYPE = "g4dn.xlarge"  # the warm-up instance's type: no pool of the replay
SUBMIT_MARGIN_SECONDS = 0.9  # deadline slack for the submission's own latency (whole seconds)


@dataclass(frozen=True)
class LiveRun:
    """What the live job did, from its record."""

    job_id: str
    state: str
    attempts: tuple[LiveAttempt, ...]
    spans: tuple[tuple[str, float, float | None], ...]  # (market zone, start, end) in ticks
    changeovers: tuple[float, ...]  # real seconds from each launch request to training
    launches: tuple[float, ...]  # of which from the request to the instance's launch
    agent_starts: tuple[float, ...]  # real seconds from each boot script to training
    finish_ticks: float | None  # completion, in ticks from the job's creation
    deadline_met: bool
    timeline: tuple[str, ...]


def _job_spec(plan: ReplayPlan, deadline: datetime) -> dict[str, Any]:
    work = plan.live_seconds()["work"]
    return {
        "name": f"replay-{plan.start}",
        "entry_point": "respot.replay.session:ReplaySession",
        "hyperparameters": {
            "steps": STEPS,
            "step_seconds": round(work / STEPS, 4),
            "checkpoint_every": 10,
        },
        "instance_types": [INSTANCE_TYPE],
        "deadline": deadline.isoformat(),
        "estimated_runtime": f"{max(int(work), 1)}s",
        "max_interruptions": 1000,
        "on_demand_fallback": True,
    }


class _BootCalibration:
    """Keeps a launch plus the agent's own start near d on a busy machine.

    The agent's start (a Python process, imports, the restore) takes real seconds that the
    time scale does not shrink and the machine's load stretches. EC2's boot (simulated) is set
    to d less that start: first as `agent_start_seconds` guesses it, then as measured (the
    mean of the starts so far, boot script to training), for the instances launched after.
    """

    def __init__(self, rt: Any, changeover: float, scale: float, guess: float) -> None:
        self.rt = rt
        self.changeover = changeover
        self.scale = scale
        self.starts: dict[str, float] = {}
        self.set_boot(guess)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="replay-boot", daemon=True)

    def set_boot(self, agent_start: float) -> None:
        launch = max(self.changeover - agent_start, 0.0)
        timing = self.rt.fleet.timing
        self.rt.fleet.timing = replace(
            timing, fulfil_seconds=0.1 * launch / self.scale, boot_seconds=0.9 * launch / self.scale
        )

    def start(self, job_id: str) -> None:
        self.job_id = job_id
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(0.25):
            record = self.rt.job_record(self.job_id)
            if record is None:
                continue
            offset = time.time() - time.monotonic()
            booted = {  # when the user data (the boot script) began
                i.instance_id: next((t for t, what in list(i.events) if what == "user data"), None)
                for i in list(self.rt.fleet.instances.values())
            }
            new = False
            for att in record.attempts:
                at = booted.get(att.instance_id)
                if att.started_at is None or at is None or att.instance_id in self.starts:
                    continue
                self.starts[att.instance_id] = att.started_at.timestamp() - (at + offset)
                new = True
            if new:
                self.set_boot(sum(self.starts.values()) / len(self.starts))

    def mean_start(self, default: float = AGENT_START_SECONDS) -> float:
        """The mean agent start measured, in real seconds."""
        return sum(self.starts.values()) / len(self.starts) if self.starts else default

    def wait_first(self, timeout: float) -> None:
        """Until one start is measured (or `timeout` seconds)."""
        end = time.monotonic() + timeout
        while not self.starts and time.monotonic() < end:
            time.sleep(0.1)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)


def _warm_up_spec() -> dict[str, Any]:
    return {
        "name": "replay-warm-up",
        "entry_point": "respot.replay.session:ReplaySession",
        "hyperparameters": {"steps": 1, "step_seconds": 0.1},
        "instance_types": [WARM_UP_TYPE],
    }


def _wait_record(rt: Any, job_id: str, timeout: float) -> JobRecord:
    """The job's record once the submit handler has written it."""
    end = time.monotonic() + timeout
    while (record := rt.job_record(job_id)) is None:
        if time.monotonic() > end:
            raise TimeoutError(f"job {job_id} not in the table {timeout:.0f} s after submission")
        time.sleep(0.02)
    return record


def _wait_ended(rt: Any, job_id: str, timeout: float) -> JobRecord:
    """The record once every attempt has ended (the last one ends with the agent's report)."""
    end = time.monotonic() + timeout
    while True:
        record: JobRecord | None = rt.job_record(job_id)
        assert record is not None
        if all(a.ended_at is not None or a.instance_id is None for a in record.attempts):
            return record
        if time.monotonic() > end:
            return record
        time.sleep(0.2)


def run_live(
    plan: ReplayPlan,
    *,
    on_event: Callable[[str], None] | None = None,
    agent_start_seconds: float = AGENT_START_SECONDS,
) -> LiveRun:
    """Start the local runtime, play the window, run the job to its end; stop everything."""
    from infra.local.fleet import FleetTiming
    from infra.local.market import Trace
    from infra.local.runtime import LocalRuntime, RuntimeOptions

    tick = float(plan.tick_seconds)
    scale = tick / LOCAL_MINUTE  # real seconds per simulated second of the local runtime
    changeover = plan.live_seconds()["changeover"]
    # EC2's two-minute notice in trace time, at most a quarter tick: the rules end a spot
    # instance at the boundary where its pool's trace turns 0 (a notice of several ticks
    # would let the old instance train on, or finish, where the simulator has none).
    notice = min(NOTICE_SECONDS * LOCAL_MINUTE / plan.gap, LOCAL_MINUTE / 4)
    timing = FleetTiming(notice_seconds=notice, terminate_seconds=min(5.0, 0.2 * LOCAL_MINUTE))
    traces = {
        f"{INSTANCE_TYPE}/{zone}": Trace(pool.name, int(LOCAL_MINUTE), row)
        for pool, zone, row in zip(plan.pool_set.pools, plan.zones(), plan.live_rows(), strict=True)
    }
    options = RuntimeOptions(
        time_scale=scale,
        timing=timing,
        pool_traces=traces,
        instance_types=(INSTANCE_TYPE, WARM_UP_TYPE),
        availability_zones=len(plan.zones()),
        changeover_seconds=changeover,
        slack=False,
        log_level="ERROR",  # the handlers' JSON logs would bury the report
        # A changeover of many ticks must not look like a stuck boot.
        boot_timeout_seconds=max(1200.0, 4 * changeover / scale),
        launch_timeout_seconds=max(180.0, 4 * changeover / scale),
    )
    say = on_event or (lambda _: None)
    with LocalRuntime(options) as rt:
        assert rt.market is not None
        calibration = _BootCalibration(rt, changeover, scale, agent_start_seconds)
        # One instance first, of a type outside the replayed pools (their histories stay
        # empty, as the simulator's are at the window's start): it measures the agent's start
        # for the first launch of the replay and warms the machine's file cache.
        calibration.start(rt.run(_warm_up_spec()).job_id)
        calibration.wait_first(timeout=60 + 30 * tick)
        calibration.stop()
        calibration = _BootCalibration(rt, changeover, scale, calibration.mean_start())
        # Start on a boundary of the shared tick (epoch // tick), as the job's own ticks do.
        time.sleep(tick - time.time() % tick)
        rt.market.started = time.monotonic()
        deadline = datetime.now(UTC) + timedelta(
            seconds=plan.live_seconds()["deadline"] + SUBMIT_MARGIN_SECONDS
        )
        handle = rt.run(_job_spec(plan, deadline))
        record = _wait_record(rt, handle.job_id, timeout=10 * tick + 10)
        # The market's tick 0 is the job's: its clock starts at the job's creation.
        rt.market.started = (
            time.monotonic() - (datetime.now(UTC) - record.created_at).total_seconds()
        )
        say(f"job {handle.job_id} submitted; one tick = {tick:g} s")
        calibration.start(handle.job_id)
        try:
            status = handle.wait(
                timeout=2 * plan.live_seconds()["deadline"] + 60,
                poll_seconds=0.3,
                on_event=lambda e: say(f"  {e.text}"),
            )
            record = _wait_ended(rt, handle.job_id, timeout=10 * tick)
        finally:
            calibration.stop()
    return _summary(plan, record, status.state, tuple(calibration.starts.values()))


def _summary(
    plan: ReplayPlan, record: JobRecord, state: str, agent_starts: tuple[float, ...]
) -> LiveRun:
    now = datetime.now(UTC)
    tick = float(plan.tick_seconds)

    def ticks(at: datetime | None) -> float | None:
        return None if at is None else (at - record.created_at).total_seconds() / tick

    attempts = []
    spans = []
    started = [a for a in record.attempts if a.started_at is not None]
    changeovers = tuple((a.started_at - a.requested_at).total_seconds() for a in started)  # type: ignore[operator]
    launches = tuple(
        ((a.launched_at or a.requested_at) - a.requested_at).total_seconds() for a in started
    )
    for line, att in zip(ledger(record, now), record.attempts, strict=True):
        if att.instance_id is None:
            continue
        attempts.append(
            LiveAttempt(
                market=line.market,
                zone=line.availability_zone,
                billed_seconds=line.hours * 3600.0,
                end=line.end,
                ledger_usd=line.paid_usd,
            )
        )
        start = ticks(line.started)
        assert start is not None
        spans.append((f"{line.market} {line.availability_zone}", start, ticks(line.ended)))
    finish = ticks(record.finished_at) if state == "COMPLETED" else None
    deadline_ticks = plan.job.deadline_seconds / plan.gap
    return LiveRun(
        job_id=record.job_id,
        state=state,
        attempts=tuple(attempts),
        spans=tuple(spans),
        changeovers=changeovers,
        launches=launches,
        agent_starts=agent_starts,
        finish_ticks=finish,
        deadline_met=finish is not None and finish <= deadline_ticks,
        timeline=tuple(e.text for e in record.timeline),
    )
