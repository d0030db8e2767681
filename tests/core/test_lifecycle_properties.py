"""Random event sequences against the lifecycle, with a simulated EC2 behind the effects.

Hypothesis drives a job through submissions, capacity results, EC2 events and agent reports
in any order, with duplicates and replays of old events, and checks after every step:
- a terminal state never changes;
- the job never has two instances training at once (open attempts without a notice <= 1);
- a second live attempt only during a hand-off: an older open attempt has had its notice
  (EC2's, or the control plane's stop), or it is the on-demand attempt a return to spot
  leaves and the return's spot attempt has no instance yet (once it has one, the older is
  asked to stop);
- every instance EC2 runs belongs to an open attempt; a finished job has none running;
- progress never goes backwards; versions grow by one per write; attempts are numbered 1..n;
- the state agrees with the attempts (REQUESTED/STARTING/RUNNING have an open current one).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from respot.core.deadline import DeadlinePolicy
from respot.core.effects import LaunchInstance, TerminateInstances
from respot.core.events import (
    AgentReport,
    CancelRequested,
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
from respot.core.placement import ControlSettings, MarketChoice, candidates
from respot.core.states import JobState
from respot.wire.messages import (
    AgentCheckpoint,
    AgentCompleted,
    AgentFailed,
    AgentPreempted,
    AgentProgress,
    AgentStarted,
    CancelCommand,
)
from tests.core.factories import SETTINGS, T0, agent, submission

CAPACITY_CODES = ("InsufficientInstanceCapacity", "SpotMaxPriceTooLow", "RequestLimitExceeded")


class ReturningPolicy(DeadlinePolicy):
    """The deadline policy, except that the machine says which market placements get, and
    that a job training on on-demand is moved back to spot whenever the machine says so."""

    def __init__(self) -> None:
        super().__init__()
        self.place_on_demand = False
        self.go_back = False

    def choose(self, job: JobRecord, now: datetime, settings: ControlSettings) -> MarketChoice:
        if self.place_on_demand:
            return MarketChoice(Market.ON_DEMAND, "the machine says on-demand")
        return super().choose(job, now, settings)

    def switch_running(
        self, job: JobRecord, now: datetime, settings: ControlSettings
    ) -> MarketChoice | None:
        att = job.current
        if not self.go_back or att is None or att.placement.market is not Market.ON_DEMAND:
            return None
        if att.end is not None or att.notice_at is not None or att.started_at is None:
            return None
        pools = tuple(candidates(job, Market.SPOT, settings))
        return MarketChoice(Market.SPOT, "the machine says back to spot", pools=pools)


class JobMachine(RuleBasedStateMachine):
    """One job, a world of instances, and every event that can reach the control plane."""

    def __init__(self) -> None:
        super().__init__()
        self.job: JobRecord | None = None
        self.now = T0
        self.running: set[str] = set()  # instances EC2 runs now
        self.instances: list[tuple[str, int]] = []  # every (instance id, attempt) ever launched
        self.pending: list[LaunchInstance] = []  # launches whose result is not back yet
        self.history: list[JobEvent] = []
        self.terminal: JobState | None = None
        self.max_step = 0
        self.seq = 0
        self.next_id = 0
        self.policy = ReturningPolicy()

    # ---- the control plane's loop, with EC2 simulated behind the effects ----------------------

    def apply(self, event: JobEvent, depth: int = 0) -> None:
        before = self.job.version if self.job else 0
        decision = decide(
            self.job, event, now=self.now, settings=SETTINGS, market_policy=self.policy
        )
        if decision.record is not None:
            decision.record.version = before + 1
            self.job = decision.record
        self.history.append(event)
        for effect in decision.effects:
            if isinstance(effect, LaunchInstance):
                self.pending.append(effect)
            elif isinstance(effect, TerminateInstances):
                self.running -= set(effect.instance_ids)
        if decision.follow_up is not None and depth < 6:
            self.apply(decision.follow_up, depth + 1)

    def tick_clock(self, seconds: float = 1.0) -> None:
        self.now += timedelta(seconds=seconds)

    # ---- rules -------------------------------------------------------------------------------

    @precondition(lambda self: self.job is None)
    @rule(
        deadline_hours=st.none() | st.floats(1.2, 48),
        estimate_hours=st.floats(0.5, 2),
        on_demand=st.booleans(),
    )
    def submit(self, deadline_hours: float | None, estimate_hours: float, on_demand: bool) -> None:
        # With a deadline, the live deadline policy chooses markets and may switch to on-demand.
        self.policy.place_on_demand = on_demand
        spec: dict[str, Any] = {}
        if deadline_hours is not None:
            spec = {
                "deadline": (T0 + timedelta(hours=deadline_hours)).isoformat(),
                "estimated_runtime": f"{estimate_hours}h",
            }
        self.apply(Submitted(submission(**spec)))

    @precondition(lambda self: self.job is not None)
    @rule(again=st.booleans())
    def resubmit(self, again: bool) -> None:
        self.apply(Submitted(submission()))

    @precondition(lambda self: bool(self.pending))
    @rule(data=st.data(), ok=st.booleans(), twice=st.booleans())
    def launch_result(self, data: st.DataObject, ok: bool, twice: bool) -> None:
        launch = self.pending.pop(data.draw(st.integers(0, len(self.pending) - 1)))
        if ok:
            self.next_id += 1
            iid = f"i-{self.next_id}"
            self.running.add(iid)
            self.instances.append((iid, launch.attempt))
            event: JobEvent = CapacityLaunched(
                launch.attempt, launch.client_token, iid, "sir-x", None, 0.3
            )
        else:
            code = data.draw(st.sampled_from(CAPACITY_CODES))
            event = CapacityUnavailable(launch.attempt, launch.client_token, code)
        self.tick_clock()
        self.apply(event)
        if twice:
            self.apply(event)

    @precondition(lambda self: bool(self.instances))
    @rule(data=st.data(), kind=st.sampled_from(["fulfillment", "running"]))
    def instance_up(self, data: st.DataObject, kind: str) -> None:
        iid, attempt = data.draw(st.sampled_from(self.instances))
        self.apply(InstanceUp(iid, attempt, kind))

    @precondition(lambda self: bool(self.instances))
    @rule(data=st.data(), rebalance=st.booleans())
    def notice(self, data: st.DataObject, rebalance: bool) -> None:
        iid, attempt = data.draw(st.sampled_from(self.instances))
        self.tick_clock()
        self.apply(InterruptionNotice(iid, attempt, "rebalance" if rebalance else "interruption"))

    @precondition(lambda self: bool(self.instances))
    @rule(data=st.data())
    def instance_down(self, data: st.DataObject) -> None:
        iid, attempt = data.draw(st.sampled_from(self.instances))
        self.running.discard(iid)
        self.tick_clock()
        self.apply(
            InstanceDown(iid, attempt, data.draw(st.sampled_from(["terminated", "shutting-down"])))
        )

    @precondition(lambda self: bool(self.instances) and self.job is not None)
    @rule(
        data=st.data(),
        kind=st.sampled_from(
            ["started", "progress", "checkpoint", "preempted", "completed", "failed"]
        ),
    )
    def agent_report(self, data: st.DataObject, kind: str) -> None:
        assert self.job is not None
        iid, attempt = data.draw(st.sampled_from(self.instances))
        step = data.draw(st.integers(0, 1000))
        body: Any = {
            "started": AgentStarted(restored_step=step),
            "progress": AgentProgress(step=step, total_steps=1000),
            "checkpoint": AgentCheckpoint(
                step=step,
                manifest_key=f"m{step}",
                size_bytes=1,
                uploaded_bytes=1,
                upload_seconds=0.1,
            ),
            "preempted": AgentPreempted(
                step=step, checkpoint_step=step, notice="spot-interruption"
            ),
            "completed": AgentCompleted(step=step, outputs_prefix="o/", train_seconds=1.0),
            "failed": AgentFailed(reason="boom"),
        }[kind]
        self.seq += 1
        self.tick_clock()
        self.apply(AgentReport(agent(self.job, attempt, iid, body, seq=self.seq)))

    @precondition(lambda self: self.job is not None)
    @rule()
    def cancel(self) -> None:
        self.apply(CancelRequested(CancelCommand(job_id="job-1", requested_at=T0)))

    @rule(on_demand=st.booleans())
    def markets(self, on_demand: bool) -> None:
        # Placements on on-demand from now on, or as the deadline policy says
        self.policy.place_on_demand = on_demand

    def _current_booting(self) -> bool:
        att = self.job.current if self.job is not None else None
        return bool(
            self.job is not None
            and self.job.state in (JobState.REQUESTED, JobState.STARTING)
            and att is not None
            and att.instance_id is not None
            and att.end is None
        )

    @precondition(_current_booting)
    @rule()
    def current_starts(self) -> None:
        # The current attempt's agent reports (the way to RUNNING, and to a return's hand-off)
        assert self.job is not None and self.job.current is not None
        att = self.job.current
        assert att.instance_id is not None
        self.seq += 1
        self.tick_clock()
        body = AgentStarted(restored_step=self.job.progress.step)
        sent = (self.now - T0).total_seconds()  # now: heard from, not silent since T0
        message = agent(self.job, att.number, att.instance_id, body, seq=self.seq, sent=sent)
        self.apply(AgentReport(message))

    def _training_on_demand(self) -> bool:
        att = self.job.current if self.job is not None else None
        return bool(
            self.job is not None
            and self.job.spec.deadline is not None
            and self.job.state is JobState.RUNNING
            and att is not None
            and att.placement.market is Market.ON_DEMAND
            and att.started_at is not None
        )

    @precondition(_training_on_demand)
    @rule(minutes=st.integers(0, 3))
    def back_to_spot(self, minutes: int) -> None:
        # The deadline policy says spot again at this tick: the return asks for spot first
        self.tick_clock(minutes * 60)
        self.policy.go_back = True
        try:
            self.apply(ReconcileTick(self.now))
        finally:
            self.policy.go_back = False
        if self.job is not None and self.job.policy.get("return_attempt"):
            event("a return to spot was requested")

    @precondition(lambda self: self.job is not None)
    @rule(minutes=st.integers(0, 30))
    def reconcile(self, minutes: int) -> None:
        self.tick_clock(minutes * 60)
        self.apply(ReconcileTick(self.now))

    @precondition(lambda self: bool(self.history))
    @rule(data=st.data())
    def replay_an_old_event(self, data: st.DataObject) -> None:
        self.apply(data.draw(st.sampled_from(self.history)))

    # ---- invariants --------------------------------------------------------------------------

    @invariant()
    def terminal_states_stay(self) -> None:
        if self.job is None:
            return
        if self.terminal is not None:
            assert self.job.state is self.terminal
        elif self.job.state.is_terminal():
            self.terminal = self.job.state

    @invariant()
    def never_two_instances_training(self) -> None:
        if self.job is None:
            return
        training = [
            a for a in self.job.attempts if a.end is None and a.notice_at is None and a.instance_id
        ]
        assert len(training) <= 1, [(a.number, a.instance_id) for a in training]

    @invariant()
    def a_second_live_attempt_only_during_a_hand_off(self) -> None:
        if self.job is None or self.job.state.is_terminal():
            return
        current = self.job.current
        leaving = self.job.policy.get("return_from")
        for a in self.job.attempts:
            if a is current or a.end is not None or a.instance_id is None:
                continue
            if a.notice_at is not None:
                continue  # EC2's notice, or the stop the control plane asked for
            assert a.number == leaving, (a.number, leaving, a.instance_id)
            assert current is not None and current.instance_id is None, (
                f"attempt {a.number} ({a.instance_id}) not asked to stop though the return's "
                f"attempt has {current.instance_id if current else None}"
            )

    @invariant()
    def no_instance_runs_unowned(self) -> None:
        if self.job is None:
            return
        open_ids = {a.instance_id for a in self.job.attempts if a.end is None and a.instance_id}
        if self.job.state.is_terminal():
            assert self.running == set(), self.running
        else:
            assert self.running <= open_ids, (self.running, open_ids)

    @invariant()
    def progress_and_numbering(self) -> None:
        if self.job is None:
            return
        step = self.job.progress.step or 0
        assert step >= self.max_step
        self.max_step = step
        assert [a.number for a in self.job.attempts] == list(range(1, len(self.job.attempts) + 1))

    @invariant()
    def state_agrees_with_attempts(self) -> None:
        if self.job is None:
            return
        current = self.job.current
        if self.job.state in (JobState.REQUESTED, JobState.STARTING, JobState.RUNNING):
            assert current is not None and current.end is None
        if self.job.state is JobState.STARTING:
            assert current is not None and current.instance_id is not None


JobMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestJobLifecycleProperties = JobMachine.TestCase


class ReturnMachine(JobMachine):
    """The same world and invariants, starting from a deadline job training on on-demand:
    returns to spot (spot first) meet every event above, duplicated and out of order."""

    @initialize()
    def training_on_demand(self) -> None:
        self.policy.place_on_demand = True
        self.apply(
            Submitted(
                submission(deadline=(T0 + timedelta(hours=10)).isoformat(), estimated_runtime="1h")
            )
        )
        launch = self.pending.pop()
        self.next_id += 1
        iid = f"i-{self.next_id}"
        self.running.add(iid)
        self.instances.append((iid, launch.attempt))
        self.apply(CapacityLaunched(launch.attempt, launch.client_token, iid, None, None, 1.0))
        self.current_starts()
        assert self._training_on_demand(), self.job


ReturnMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestReturnProperties = ReturnMachine.TestCase
