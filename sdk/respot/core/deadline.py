"""The deadline policy in the live control plane: the benchmark's policy, fed from a job record.

`respot.policy` decides tick by tick from an `Observation` (see docs/policy.md). Live, a tick
is one reconcile period (`ControlSettings.policy_tick`, one minute on AWS) counted from the
job's submission, and the observation is assembled here from the record:

- C, the work the job needs: measured from its progress (training time per step times the
  steps it reported as total) once 5% is done, else its `estimated_runtime`; without either
  there is nothing to plan with and the job is treated as a job without a deadline;
- w, the work done: C times the fraction of steps done, or the training time so far;
- d, the changeover: `ControlSettings.changeover_estimate`;
- r: what is left of the changeover of an attempt that has not started training yet;
- held: the market of the open, un-noticed attempt, NONE otherwise;
- availability: spot is up in a tick when respot held a running spot instance or a spot
  launch succeeded in it, down when a launch was refused for capacity or a notice arrived;
  a tick with no observation repeats the last one. The history lives on the record as
  run-length pairs (`policy["avail"]`), a few dozen bytes for a job of days.

What the live system does with the answer: for a job that needs capacity, the market to
ask for (or to wait). A job *training* on spot is never moved to on-demand: the move never
finishes sooner than staying (below). This single-pool policy keeps a job
that went on-demand there; across pools, `core/pool_placement.PoolPlacementPolicy.switch_running`
moves it back to spot once some job has seen spot up and the slack pays both changeovers
(see docs/policy.md, "Live use").

Why a running spot instance stays (the benchmark's guard would move it when s < d with more
than a tick of work left): leaving it for on-demand finishes in d + W (the new instance's
whole changeover, then the work left W; the planned stop's checkpoint comes on top). Staying
finishes in W, or, interrupted at any moment t, in t + d + (W - t) = d + W: the running
instance has no changeover left and its progress up to the notice is kept (the notice-time
checkpoint; the benchmark's preemption keeps the tick's work too). So staying is never later
and never dearer. In `is_safe`'s arithmetic the same fact reads: on-demand is safe iff
s >= d, and then continuing on spot is safe too, so the guard answers on-demand for a running
spot instance only when on-demand cannot make the deadline either (the benchmark's invariant
already broken: live, by a changeover longer than d, a pace slower than C, or whole-second
rounding), where the move would make a late job later (tests/core/test_deadline.py).
"""

from __future__ import annotations

from datetime import datetime

from respot.core.job import Attempt, JobRecord, Market
from respot.core.placement import ControlSettings, MarketChoice, SpotFirstPolicy
from respot.policy import Choice, Observation, RespotPolicy

MEASURED_AFTER_FRACTION = 0.05  # trust the measured rate once 5% of the steps are done


def _seconds(start: datetime | None, end: datetime | None, now: datetime) -> float:
    if start is None:
        return 0.0
    return max(((end or now) - start).total_seconds(), 0.0)


def training_seconds(job: JobRecord, now: datetime) -> float:
    """Seconds the agents trained, over every attempt."""
    return sum(_seconds(a.started_at, a.ended_at, now) for a in job.attempts)


def work_estimate(job: JobRecord, now: datetime) -> tuple[int, int] | None:
    """(C, w) in seconds, or None if the job gives nothing to estimate its work from."""
    spec = job.spec
    step, total = job.progress.step, job.progress.total_steps
    trained = training_seconds(job, now)
    fraction = step / total if step and total else None
    # The rate is the reported step over the training up to the report, not up to now: a
    # heartbeat old by a period would make the job look slower than it is (by a tick over the
    # time trained, a lot just after a start: an on-demand switch for nothing on short jobs).
    reported = job.progress.at if job.progress.at and job.progress.at < now else now
    trained_then = training_seconds(job, reported)
    measured = (
        trained_then / fraction
        if fraction and fraction >= MEASURED_AFTER_FRACTION and trained_then > 0
        else None
    )
    estimate = spec.estimated_runtime.total_seconds() if spec.estimated_runtime else None
    work = measured or estimate
    if work is None:
        return None
    done = work * fraction if fraction is not None else min(trained, work)
    work_s = max(int(work), 1)
    return work_s, min(int(done), work_s - 1)


def _availability(job: JobRecord) -> list[int]:
    pairs = job.policy.get("avail", [])
    return [int(v) for v, n in pairs for _ in range(int(n))]


def record_availability(
    job: JobRecord, now: datetime, settings: ControlSettings, seen: bool | None = None
) -> None:
    """Extend the history up to the current tick; `seen` is what this tick just showed."""
    if job.spec.deadline is None:
        return
    tick = _tick(job, now, settings)
    last = int(job.policy.get("avail_last", 1))
    pairs: list[list[int]] = [list(p) for p in job.policy.get("avail", [])]
    recorded = sum(n for _, n in pairs)
    while recorded < tick:  # ticks without an observation repeat the last one
        if pairs and pairs[-1][0] == last:
            pairs[-1][1] += 1
        else:
            pairs.append([last, 1])
        recorded += 1
    job.policy["avail"] = pairs
    if seen is not None:
        job.policy["avail_last"] = int(seen)
        job.policy["avail_tick"] = tick


def _tick(job: JobRecord, now: datetime, settings: ControlSettings) -> int:
    gap = max(int(settings.policy_tick.total_seconds()), 1)
    return max(int((now - job.created_at).total_seconds()) // gap, 0)


def _held(job: JobRecord) -> Attempt | None:
    att = job.current
    if att is None or att.end is not None or att.notice_at is not None:
        return None
    return att


def observe(job: JobRecord, now: datetime, settings: ControlSettings) -> Observation | None:
    """The policy's view of the job now, or None without a deadline or any work estimate."""
    spec = job.spec
    if spec.deadline is None:
        return None
    estimate = work_estimate(job, now)
    if estimate is None:
        return None
    work, done = estimate
    gap = max(int(settings.policy_tick.total_seconds()), 1)
    changeover = max(int(settings.changeover_estimate.total_seconds()), 0)
    tick = _tick(job, now, settings)
    deadline = int((spec.deadline - job.created_at).total_seconds())
    held_attempt = _held(job)
    held = Choice.NONE
    remaining = 0
    if held_attempt is not None and held_attempt.instance_id is not None:
        held = Choice.SPOT if held_attempt.placement.market is Market.SPOT else Choice.ON_DEMAND
        if held_attempt.started_at is None:
            remaining = max(changeover - int(_seconds(held_attempt.requested_at, None, now)), 0)
    history = _availability(job)[:tick]
    history += [int(job.policy.get("avail_last", 1))] * (tick - len(history))
    if held is Choice.SPOT:
        available = True
    elif job.policy.get("avail_tick") == tick:
        available = bool(job.policy.get("avail_last", 1))
    else:
        available = True  # nothing seen this tick: asking for spot is how to find out
    return Observation(
        tick=tick,
        gap_seconds=gap,
        work_seconds=work,
        deadline_seconds=max(deadline, 0),
        changeover_seconds=changeover,
        done_seconds=done,
        remaining_changeover_seconds=remaining,
        held=held,
        spot_available=available,
        history=history,
    )


def boot_unguarded(obs: Observation) -> bool:
    """Whether a new spot instance now could leave the deadline uncovered while it boots.

    The policy's guard lets a spot changeover be cut short by on-demand at any tick; live, a
    booting instance is not abandoned (the safety net moves a running one), so spot lost
    during the boot costs its whole changeover before on-demand's. A new spot instance needs
    slack for both: s - d >= d. Below that the live control plane takes on-demand.
    """
    if obs.remaining_seconds <= 0:
        return False
    return obs.slack_seconds - obs.changeover_seconds < obs.changeover_seconds


BOOT_GUARD = "; less than two changeovers of slack: a booting spot instance is not abandoned"


class DeadlinePolicy:
    """The market for a job that needs capacity: the deadline policy where it applies.

    Jobs without a deadline, or without any work estimate yet, get `SpotFirstPolicy`.
    """

    def __init__(self) -> None:
        self._fallback = SpotFirstPolicy()

    def choose(self, job: JobRecord, now: datetime, settings: ControlSettings) -> MarketChoice:
        """Spot, on-demand or wait, with the policy's reason."""
        obs = observe(job, now, settings)
        if obs is None:
            return self._fallback.choose(job, now, settings)
        if obs.ticks_left <= 0:
            return self._finish_late(job, "the deadline has passed: finishing as soon as possible")
        decision = RespotPolicy().decide(obs)
        reason = f"deadline policy: {decision.mode.value}"
        if decision.choice is Choice.SPOT:
            if boot_unguarded(obs) and job.spec.on_demand_fallback:
                return MarketChoice(Market.ON_DEMAND, reason + BOOT_GUARD)
            return MarketChoice(Market.SPOT, reason)
        if decision.choice is Choice.ON_DEMAND:
            return self._finish_late(job, reason)
        if obs.remaining_seconds <= 0:
            return MarketChoice(Market.SPOT, "deadline policy: work estimate reached; finishing")
        return MarketChoice(None, reason)

    @staticmethod
    def _finish_late(job: JobRecord, reason: str) -> MarketChoice:
        if job.spec.on_demand_fallback:
            return MarketChoice(Market.ON_DEMAND, reason)
        return MarketChoice(Market.SPOT, f"{reason}, but on_demand_fallback is off: spot only")
