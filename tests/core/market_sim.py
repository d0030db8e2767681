"""A minute-by-minute simulation of one deadline job against the pure core, for the switch tests.

It plays the control plane (`decide` with `PoolPlacementPolicy` read from the pools' records,
sightings folded in as `respot.control.service` does), EC2 (launches answered from a market
of pools, terminations, instance-down events) and the agent (boot = the settings' changeover
estimate unless `boot` says otherwise, one step per second, a checkpoint and `AgentPreempted`
the tick after a stop request, a notice checkpoint on an interruption). It records what the
safety properties need: which instances were alive when, and where every attempt resumed from.

The fleet property it checks after every event has settled (`handoff_violations`): at most
two instances of the job live, and when two do, the older one has been asked to stop (a
return's hand-off: the on-demand instance trains on until the spot one has launched) or
has had its notice (a spot instance here is reclaimed at once, so that case never shows).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from respot.core.effects import LaunchInstance, StopAttempt, TerminateInstances
from respot.core.events import (
    AgentReport,
    CapacityLaunched,
    CapacityUnavailable,
    InstanceDown,
    InstanceUp,
    InterruptionNotice,
    JobEvent,
    ReconcileTick,
    Submitted,
)
from respot.core.job import JobRecord, Market
from respot.core.lifecycle import decide
from respot.core.pool_placement import PoolPlacementPolicy
from respot.core.pool_watch import PoolKey, PoolRecord, Sighting, absolute_tick, observe, sightings
from respot.wire.messages import (
    AgentCheckpoint,
    AgentCompleted,
    AgentPreempted,
    AgentProgress,
    AgentStarted,
)
from tests.core.factories import SETTINGS, T0, agent, at, submission

TICK = int(SETTINGS.policy_tick.total_seconds())
BOOT = int(SETTINGS.changeover_estimate.total_seconds())  # launch -> training, as estimated

# market(pool, minute, sim) -> spot capacity in that pool now
Market_ = Callable[[PoolKey, int, "Sim"], bool]


@dataclass
class Instance:
    instance_id: str
    attempt: int
    market: Market
    pool: PoolKey
    launched: int
    started: bool = False
    step: int = 0
    stop_asked_at: int | None = None
    gone: bool = False
    seq: int = 1


@dataclass
class Sim:
    work_seconds: int
    deadline_seconds: int
    market: Market_
    records: dict[PoolKey, PoolRecord] = field(default_factory=dict)
    others_see: bool = True  # other jobs of the account see every pool's spot each minute
    boot: int = BOOT  # launch -> training; more than the estimate when EC2 or the agent is slow
    job: JobRecord | None = None
    t: int = 0
    instances: dict[str, Instance] = field(default_factory=dict)
    checkpoint: int = 0  # the newest checkpoint step in "S3"
    log: list[str] = field(default_factory=list)
    # every event applied, with the time and the pools' records the policy read
    events: list[tuple[int, JobEvent, dict[PoolKey, PoolRecord]]] = field(default_factory=list)
    effects: list[tuple[int, object]] = field(default_factory=list)
    resumes: list[tuple[int, int, int]] = field(default_factory=list)  # attempt, restored, last
    max_alive: int = 0
    handoff_violations: list[str] = field(default_factory=list)
    completed_at: int | None = None
    _pending: list[JobEvent] = field(default_factory=list)
    _count: int = 0
    _last_step: int = 0  # the furthest step any instance reached

    # ---- the control plane ----------------------------------------------------------------

    def apply(self, event: JobEvent) -> None:
        now = at(self.t)
        for s in sightings(self.job, event, now, SETTINGS):
            self._sight(s)
        policy = PoolPlacementPolicy(self.records)
        decision = decide(self.job, event, now=now, settings=SETTINGS, market_policy=policy)
        self.events.append((self.t, event, dict(self.records)))
        if decision.record is not None:
            self.job = decision.record
        for effect in decision.effects:
            self.effects.append((self.t, effect))
            self._effect(effect)
        if decision.follow_up is not None:
            self.apply(decision.follow_up)

    def _sight(self, s: Sighting) -> None:
        new = observe(self.records.get(s.pool), s.tick, s.seen)
        if new is not None:
            self.records[s.pool] = new

    # ---- EC2 --------------------------------------------------------------------------------

    def _effect(self, effect: object) -> None:
        match effect:
            case LaunchInstance():
                pool = PoolKey.of(effect.placement)
                spot = effect.placement.market is Market.SPOT
                if spot and not self.market(pool, self.t // TICK, self):
                    self._pending.append(
                        CapacityUnavailable(
                            effect.attempt, effect.client_token, "InsufficientInstanceCapacity"
                        )
                    )
                    return
                self._count += 1
                iid = f"i-{self._count}"
                self.instances[iid] = Instance(
                    iid, effect.attempt, effect.placement.market, pool, self.t
                )
                self._alive_check()
                price = 0.3 if spot else 1.0
                self._pending.append(
                    CapacityLaunched(effect.attempt, effect.client_token, iid, None, None, price)
                )
            case TerminateInstances():
                for iid in effect.instance_ids:
                    inst = self.instances.get(iid)
                    if inst is not None and not inst.gone:
                        inst.gone = True
                        self._pending.append(InstanceDown(iid, inst.attempt, "terminated"))
            case StopAttempt():
                for inst in self.instances.values():
                    if inst.attempt == effect.attempt and not inst.gone:
                        inst.stop_asked_at = self.t

    def _alive_check(self) -> None:
        self.max_alive = max(self.max_alive, len(self.alive()))

    def alive(self) -> list[Instance]:
        return [i for i in self.instances.values() if not i.gone]

    # ---- the agent ---------------------------------------------------------------------------

    def _say(self, inst: Instance, body: object) -> None:
        assert self.job is not None
        inst.seq += 1
        msg = agent(self.job, inst.attempt, inst.instance_id, body, seq=inst.seq, sent=self.t)
        self._pending.append(AgentReport(msg))

    def _agent_tick(self, inst: Instance) -> None:
        if inst.gone:
            return
        minute = self.t // TICK
        if inst.market is Market.SPOT and not self.market(inst.pool, minute, self):
            # Lost at this tick's boundary: the tick before trained (its notice's two minutes
            # cover the checkpoint), the next one does not.
            self._pending.append(InterruptionNotice(inst.instance_id, inst.attempt, "interruption"))
            if inst.started:
                inst.step = min(inst.step + TICK, self.work_seconds - 1)
                self._last_step = max(self._last_step, inst.step)
                self._save(inst, "notice")
                self._say(
                    inst,
                    AgentPreempted(
                        step=inst.step, checkpoint_step=inst.step, notice="spot-interruption"
                    ),
                )
            inst.gone = True  # reclaimed: the notice's two minutes are shorter than a tick here
            self._pending.append(InstanceDown(inst.instance_id, inst.attempt, "terminated"))
            return
        if not inst.started:
            if self.t - inst.launched >= self.boot:
                inst.started = True
                inst.step = self.checkpoint
                self.resumes.append((inst.attempt, self.checkpoint, self._last_step))
                self._pending.append(InstanceUp(inst.instance_id, inst.attempt, "running"))
                self._say(inst, AgentStarted(restored_step=self.checkpoint or None))
            return
        inst.step = min(inst.step + TICK, self.work_seconds)
        self._last_step = max(self._last_step, inst.step)
        if inst.step >= self.work_seconds:
            self._say(inst, AgentCompleted(step=inst.step, outputs_prefix="o/", train_seconds=1))
            return
        if inst.stop_asked_at is not None and inst.stop_asked_at < self.t:
            self._save(inst, "notice")
            self._say(
                inst, AgentPreempted(step=inst.step, checkpoint_step=inst.step, notice="stop")
            )
            return
        self._say(inst, AgentProgress(step=inst.step, total_steps=self.work_seconds))

    def _save(self, inst: Instance, reason: str) -> None:
        self.checkpoint = max(self.checkpoint, inst.step)
        body = AgentCheckpoint(
            step=inst.step,
            manifest_key=f"ck/{inst.step}",
            size_bytes=1,
            uploaded_bytes=1,
            upload_seconds=0.1,
            reason=reason,  # type: ignore[arg-type]
        )
        self._say(inst, body)

    # ---- the clock ---------------------------------------------------------------------------

    def run(self) -> Sim:
        """Submit the job and run it to its end (at most four hours past its deadline)."""
        return self.run_until(lambda sim: False)

    def run_until(self, stop: Callable[[Sim], bool]) -> Sim:
        """Run minute by minute until the job ends or `stop` holds after a minute."""
        if self.job is None:
            deadline = (T0 + timedelta(seconds=self.deadline_seconds)).isoformat()
            estimate = f"{self.work_seconds}s"
            self.apply(Submitted(submission(deadline=deadline, estimated_runtime=estimate)))
            self._drain()
        limit = self.deadline_seconds + 4 * 3600
        while self.t < limit and not (self.job and self.job.state.is_terminal()):
            if stop(self):
                return self
            self.t += TICK
            if self.others_see:
                tick = absolute_tick(at(self.t), SETTINGS)
                for pool in list(self.records):
                    seen = self.market(pool, self.t // TICK, self)
                    self._sight(Sighting(pool, tick, seen, "another job"))
            for inst in list(self.instances.values()):
                self._agent_tick(inst)
            self._drain()
            self.apply(ReconcileTick(at(self.t)))
            self._drain()
        if self.job is not None and self.job.state.value == "COMPLETED":
            self.completed_at = self.t
        return self

    def _drain(self) -> None:
        rounds = 0
        while self._pending:
            rounds += 1
            assert rounds < 1000, "events do not settle"
            event = self._pending.pop(0)
            self.apply(event)
            self._alive_check()
        self._handoff_check()

    def _handoff_check(self) -> None:
        """Once the events settled: a second live instance only while the older one stops."""
        alive = sorted(self.alive(), key=lambda i: (i.launched, i.instance_id))
        if len(alive) > 2:
            self.handoff_violations.append(f"t={self.t}: {len(alive)} live instances")
        elif len(alive) == 2 and alive[0].stop_asked_at is None:
            older, newer = alive
            self.handoff_violations.append(
                f"t={self.t}: {older.instance_id} not asked to stop after {newer.instance_id} "
                "launched"
            )

    # ---- what the tests read ------------------------------------------------------------------

    def markets(self) -> list[str]:
        assert self.job is not None
        return [a.placement.market.value for a in self.job.attempts if a.instance_id]

    def kinds(self) -> list[str]:
        assert self.job is not None
        return [e.kind for e in self.job.timeline]
