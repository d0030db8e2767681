"""Random event sequences against the lifecycle, with a simulated EC2 behind the effects.

Hypothesis drives a job through submissions, capacity results, EC2 events and agent reports
in any order, with duplicates and replays of old events, and checks after every step:
- a terminal state never changes;
- the job never has two instances training at once (open attempts without a notice <= 1);
- every instance EC2 runs belongs to an open attempt; a finished job has none running;
- progress never goes backwards; versions grow by one per write; attempts are numbered 1..n;
- the state agrees with the attempts (REQUESTED/STARTING/RUNNING have an open current one).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

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
from respot.core.job import JobRecord
from respot.core.lifecycle import decide
from respot.core.states import JobState
from respot.messages import (
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

    # ---- the control plane's loop, with EC2 simulated behind the effects ----------------------

    def apply(self, event: JobEvent, depth: int = 0) -> None:
        before = self.job.version if self.job else 0
        decision = decide(self.job, event, now=self.now, settings=SETTINGS)
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
    @rule(deadline_hours=st.none() | st.floats(1.2, 48), estimate_hours=st.floats(0.5, 2))
    def submit(self, deadline_hours: float | None, estimate_hours: float) -> None:
        # With a deadline, the live deadline policy chooses markets and may switch to on-demand.
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
