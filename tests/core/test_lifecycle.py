"""The lifecycle rules: the happy path, interruptions, capacity errors, duplicates, reordering."""

from __future__ import annotations

from datetime import timedelta

from respot.core.effects import LaunchInstance, ReleaseHandoff, TerminateInstances
from respot.core.events import (
    AgentReport,
    CancelRequested,
    CapacityLaunched,
    CapacityUnavailable,
    InstanceDown,
    InstanceUp,
    InterruptionNotice,
    JobEvent,
    PlaceNow,
    ReconcileTick,
    Submitted,
)
from respot.core.job import AttemptEnd, JobRecord, Market
from respot.core.lifecycle import Decision, decide
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
from tests.core.factories import SETTINGS, T0, agent, at, submission


class Driver:
    """Applies events the way the control plane does: decide, commit, run follow-ups."""

    def __init__(self) -> None:
        self.job: JobRecord | None = None
        self.effects: list[object] = []

    def apply(self, event: JobEvent, t: float = 0.0) -> Decision:
        decision = decide(self.job, event, now=at(t), settings=SETTINGS)
        if decision.record is not None:
            decision.record.version = (self.job.version if self.job else 0) + 1
            self.job = decision.record
        self.effects.extend(decision.effects)
        if decision.follow_up is not None:
            self.apply(decision.follow_up, t)
        return decision

    @property
    def state(self) -> JobState:
        assert self.job is not None
        return self.job.state

    def launches(self) -> list[LaunchInstance]:
        return [e for e in self.effects if isinstance(e, LaunchInstance)]

    def terminated(self) -> set[str]:
        return {
            i for e in self.effects if isinstance(e, TerminateInstances) for i in e.instance_ids
        }

    def launch_ok(self, instance_id: str, t: float = 0.0) -> Decision:
        last = self.launches()[-1]
        return self.apply(
            CapacityLaunched(last.attempt, last.client_token, instance_id, "sir-1", None, 0.3), t
        )


def started_job(instance_id: str = "i-1") -> Driver:
    """A job that runs on its first spot instance."""
    d = Driver()
    d.apply(Submitted(submission()))
    d.launch_ok(instance_id, 1)
    d.apply(InstanceUp(instance_id, 1, "fulfillment", "sir-1"), 2)
    assert d.job is not None
    d.apply(AgentReport(agent(d.job, 1, instance_id, AgentStarted(restored_step=None))), 3)
    return d


def test_submission_queues_then_requests_spot_in_the_first_pool() -> None:
    # GIVEN no record WHEN the submission arrives
    d = Driver()
    first = d.apply(Submitted(submission()))
    # THEN the job is recorded QUEUED, then REQUESTED with one spot launch in the first pool
    assert first.outcome == "created"
    assert d.state is JobState.REQUESTED
    (launch,) = d.launches()
    assert launch.placement.market is Market.SPOT
    assert (launch.placement.instance_type, launch.placement.subnet_id) == ("g5.xlarge", "subnet-a")
    assert [e.kind for e in d.job.timeline] == ["queued", "requested"] if d.job else False


def test_happy_path_to_completion_terminates_the_instance() -> None:
    d = started_job()
    assert d.state is JobState.RUNNING
    assert d.job is not None
    d.apply(AgentReport(agent(d.job, 1, "i-1", AgentProgress(step=10, total_steps=100), seq=2)), 4)
    d.apply(
        AgentReport(
            agent(
                d.job,
                1,
                "i-1",
                AgentCompleted(
                    step=100, outputs_prefix="p/", train_seconds=5.0, outputs_sha256="ab" * 32
                ),
                seq=3,
            )
        ),
        9,
    )
    assert d.state is JobState.COMPLETED
    assert d.job.progress.step == 100
    assert d.job.outputs_sha256 == "ab" * 32  # what `respot pull` checks the manifest against
    assert d.terminated() == {"i-1"}
    assert d.job.attempts[0].end is AttemptEnd.COMPLETED


def test_duplicate_submission_changes_nothing() -> None:
    d = Driver()
    d.apply(Submitted(submission()))
    again = d.apply(Submitted(submission()))
    assert again.outcome == "duplicate" and again.record is None
    assert len(d.launches()) == 1


def test_capacity_error_tries_next_pool_then_waits_when_all_refuse() -> None:
    # GIVEN a requested job with 2 types x 2 zones = 4 spot pools
    d = Driver()
    d.apply(Submitted(submission()))
    for i in range(4):
        last = d.launches()[-1]
        d.apply(
            CapacityUnavailable(last.attempt, last.client_token, "InsufficientInstanceCapacity"),
            i + 1,
        )
    # THEN each pool was tried once, with a fresh client token, and the job waits in the queue
    pools = [
        (launch.placement.instance_type, launch.placement.subnet_id) for launch in d.launches()
    ]
    assert len(set(pools)) == 4
    assert len({launch.client_token for launch in d.launches()}) == 4
    assert d.state is JobState.QUEUED and d.job is not None and d.job.attempts == []


def test_waiting_beyond_max_spot_wait_falls_back_to_on_demand() -> None:
    d = Driver()
    d.apply(Submitted(submission(max_spot_wait="10m")))
    for _ in range(4):
        last = d.launches()[-1]
        d.apply(
            CapacityUnavailable(last.attempt, last.client_token, "InsufficientInstanceCapacity")
        )
    d.apply(ReconcileTick(at(601)), 601)
    assert d.state is JobState.REQUESTED
    assert d.launches()[-1].placement.market is Market.ON_DEMAND
    assert d.job is not None and any(e.kind == "fallback" for e in d.job.timeline)


def test_no_fallback_allowed_fails_with_the_reason() -> None:
    d = Driver()
    d.apply(Submitted(submission(max_spot_wait="10m", on_demand_fallback=False)))
    for _ in range(4):
        last = d.launches()[-1]
        d.apply(
            CapacityUnavailable(last.attempt, last.client_token, "InsufficientInstanceCapacity")
        )
    d.apply(ReconcileTick(at(601)), 601)
    assert d.state is JobState.FAILED
    assert d.job is not None and "max_spot_wait" in (d.job.reason or "")


def test_stale_capacity_error_is_ignored() -> None:
    d = Driver()
    d.apply(Submitted(submission()))
    outcome = d.apply(CapacityUnavailable(1, "not-the-token", "InsufficientInstanceCapacity"))
    assert outcome.outcome.startswith("ignored") and len(d.launches()) == 1


def test_interruption_requests_a_replacement_at_once_and_old_instance_hands_off() -> None:
    # GIVEN a running job with a checkpoint at step 40
    d = started_job()
    assert d.job is not None
    d.apply(AgentReport(agent(d.job, 1, "i-1", AgentProgress(step=42), seq=2)), 10)
    d.apply(
        AgentReport(
            agent(
                d.job,
                1,
                "i-1",
                AgentCheckpoint(
                    step=40,
                    manifest_key="m40",
                    size_bytes=10,
                    uploaded_bytes=10,
                    upload_seconds=0.1,
                ),
                seq=3,
            )
        ),
        11,
    )
    # WHEN the two-minute warning arrives
    d.apply(InterruptionNotice("i-1", 1, "interruption", "terminate"), 20)
    # THEN a replacement is requested in the same breath, told to await attempt 1's hand-off
    assert d.state is JobState.REQUESTED
    assert d.job.interruptions == 1
    replacement = d.launches()[-1]
    assert replacement.attempt == 2 and replacement.await_handoff_from == 1
    kinds = [e.kind for e in d.job.timeline]
    assert kinds[-2:] == ["interrupted", "requested"]
    # AND the old agent's final checkpoint and stop are recorded, and it is terminated
    d.apply(
        AgentReport(
            agent(
                d.job,
                1,
                "i-1",
                AgentCheckpoint(
                    step=45,
                    manifest_key="m45",
                    size_bytes=10,
                    uploaded_bytes=1,
                    upload_seconds=0.1,
                    reason="notice",
                ),
                seq=4,
            )
        ),
        22,
    )
    d.apply(
        AgentReport(
            agent(
                d.job,
                1,
                "i-1",
                AgentPreempted(step=45, checkpoint_step=45, notice="spot-interruption"),
                seq=5,
            )
        ),
        23,
    )
    assert d.job.checkpoint is not None and d.job.checkpoint.step == 45
    assert "i-1" in d.terminated()
    preempted = next(e for e in d.job.timeline if e.kind == "preempted")
    assert preempted.data["lost_steps"] == 0


def test_duplicate_and_late_events_leave_one_live_instance() -> None:
    d = started_job()
    notice = InterruptionNotice("i-1", 1, "interruption", "terminate")
    d.apply(notice, 20)
    d.apply(notice, 21)  # duplicate warning
    assert len(d.launches()) == 2
    d.launch_ok("i-2", 22)
    d.launch_ok("i-2", 22)  # duplicate launch result
    d.apply(InstanceUp("i-2", 2, "fulfillment"), 23)
    d.apply(InstanceUp("i-2", 2, "running"), 23)
    d.apply(InstanceUp("i-1", 1, "running"), 24)  # very late event of the old instance
    d.apply(InstanceDown("i-1", 1, "terminated"), 30)
    d.apply(InstanceDown("i-1", 1, "terminated"), 31)
    assert d.state is JobState.STARTING
    assert d.job is not None and d.job.open_instances() == ["i-2"]
    assert len(d.launches()) == 2


def test_second_instance_for_one_attempt_is_terminated() -> None:
    d = Driver()
    d.apply(Submitted(submission()))
    d.launch_ok("i-1")
    d.apply(InstanceUp("i-9", 1, "fulfillment"), 2)
    assert "i-9" in d.terminated()
    assert d.job is not None and d.job.current is not None and d.job.current.instance_id == "i-1"


def test_agent_report_before_the_fulfilment_event_starts_the_job() -> None:
    # GIVEN a launched attempt whose fulfilment event is late
    d = Driver()
    d.apply(Submitted(submission()))
    d.launch_ok("i-1")
    assert d.job is not None
    d.apply(AgentReport(agent(d.job, 1, "i-1", AgentStarted())), 2)
    assert d.state is JobState.RUNNING
    late = d.apply(InstanceUp("i-1", 1, "fulfillment"), 3)
    assert late.outcome == "duplicate"
    assert d.state is JobState.RUNNING


def test_instance_gone_without_notice_is_replaced_and_releases_its_handoff() -> None:
    d = started_job()
    d.apply(InstanceDown("i-1", 1, "terminated"), 30)
    assert d.state is JobState.REQUESTED
    assert d.job is not None and d.job.interruptions == 1
    assert d.job.attempts[0].end is AttemptEnd.LOST
    assert any(isinstance(e, ReleaseHandoff) and e.attempt == 1 for e in d.effects)
    assert d.launches()[-1].await_handoff_from is None


def test_preempted_report_without_warning_event_still_replaces() -> None:
    d = started_job()
    assert d.job is not None
    d.apply(
        AgentReport(
            agent(
                d.job,
                1,
                "i-1",
                AgentPreempted(step=7, checkpoint_step=7, notice="spot-interruption"),
                seq=2,
            )
        ),
        5,
    )
    assert d.state is JobState.REQUESTED and d.job.interruptions == 1
    d.apply(InterruptionNotice("i-1", 1, "interruption"), 6)  # the warning, late
    assert len(d.launches()) == 2 and d.job.interruptions == 1


def test_old_instance_finishing_during_its_notice_completes_and_cleans_up() -> None:
    d = started_job()
    d.apply(InterruptionNotice("i-1", 1, "interruption"), 10)
    d.launch_ok("i-2", 11)
    assert d.job is not None
    d.apply(
        AgentReport(
            agent(
                d.job,
                1,
                "i-1",
                AgentCompleted(step=100, outputs_prefix="o/", train_seconds=1.0),
                seq=9,
            )
        ),
        12,
    )
    assert d.state is JobState.COMPLETED
    assert d.terminated() >= {"i-1", "i-2"}
    assert d.job.attempts[1].end is AttemptEnd.SUPERSEDED


def test_failure_keeps_reason_and_log_tail() -> None:
    d = started_job()
    assert d.job is not None
    d.apply(
        AgentReport(
            agent(
                d.job,
                1,
                "i-1",
                AgentFailed(
                    reason="ZeroDivisionError: division by zero",
                    exit_code=1,
                    log_tail=["Traceback", "ZeroDivisionError"],
                ),
                seq=2,
            )
        ),
        5,
    )
    assert d.state is JobState.FAILED
    assert d.job.reason == "ZeroDivisionError: division by zero"
    assert d.job.timeline[-1].data["log_tail"] == ["Traceback", "ZeroDivisionError"]
    assert d.terminated() == {"i-1"}


def test_cancel_terminates_and_is_idempotent() -> None:
    d = started_job()
    cmd = CancelCommand(job_id="job-1", requested_at=T0, requested_by="ana")
    d.apply(CancelRequested(cmd), 5)
    again = d.apply(CancelRequested(cmd), 6)
    assert d.state is JobState.CANCELLED and again.record is None
    assert d.terminated() == {"i-1"}
    # a launch result arriving after the cancel is terminated too
    assert d.job is not None
    late = decide(d.job, CapacityLaunched(1, "x", "i-7"), now=at(7), settings=SETTINGS)
    assert any(isinstance(e, TerminateInstances) and "i-7" in e.instance_ids for e in late.effects)


def test_progress_never_goes_backwards() -> None:
    d = started_job()
    assert d.job is not None
    d.apply(AgentReport(agent(d.job, 1, "i-1", AgentProgress(step=50), seq=3)), 5)
    d.apply(AgentReport(agent(d.job, 1, "i-1", AgentProgress(step=40), seq=2)), 6)
    assert d.job.progress.step == 50


def test_tick_relaunches_a_lost_launch_with_the_same_token() -> None:
    d = Driver()
    d.apply(Submitted(submission()))
    first = d.launches()[0]
    quiet = d.apply(ReconcileTick(at(60)), 60)
    assert quiet.outcome.startswith("ignored")
    d.apply(ReconcileTick(at(SETTINGS.launch_timeout.total_seconds() + 1)), 181)
    again = d.launches()[-1]
    assert again.client_token == first.client_token and len(d.launches()) == 2


def test_tick_declares_a_silent_instance_lost() -> None:
    d = started_job()
    silent = SETTINGS.heartbeat_timeout + timedelta(seconds=5)
    d.apply(ReconcileTick(T0 + silent), silent.total_seconds())
    assert "i-1" in d.terminated()
    assert d.state is JobState.REQUESTED and d.job is not None and d.job.interruptions == 1


def test_interruption_limit_switches_to_on_demand() -> None:
    d = Driver()
    d.apply(Submitted(submission(max_interruptions=1)))
    for n, iid in enumerate(["i-1", "i-2"], start=1):
        d.launch_ok(iid, n)
        d.apply(InstanceUp(iid, n, "fulfillment"), n)
        d.apply(InterruptionNotice(iid, n, "interruption"), n + 0.5)
    assert d.launches()[-1].placement.market is Market.ON_DEMAND


def test_max_runtime_stops_the_job() -> None:
    d = Driver()
    d.apply(Submitted(submission(max_runtime="1h")))
    d.apply(ReconcileTick(at(3601)), 3601)
    assert d.state is JobState.FAILED
    assert d.job is not None and "max_runtime" in (d.job.reason or "")


def test_unknown_job_is_ignored() -> None:
    decision = decide(None, PlaceNow("x"), now=T0, settings=SETTINGS)
    assert decision.record is None and decision.outcome.startswith("ignored")


def test_the_notice_checkpoint_keeps_when_it_was_complete_in_s3() -> None:
    # GIVEN a running job whose newest checkpoint (step 50) is newer than the notice one
    d = started_job()
    assert d.job is not None

    def checkpoint(step: int, reason: str, seq: int, sent: float) -> AgentReport:
        body = AgentCheckpoint(
            step=step,
            manifest_key=f"m{step}",
            size_bytes=10,
            uploaded_bytes=10,
            upload_seconds=0.1,
            reason=reason,  # type: ignore[arg-type]
        )
        return AgentReport(agent(d.job or "", 1, "i-1", body, seq=seq, sent=sent))

    d.apply(checkpoint(50, "periodic", 2, 10.0), 10)
    assert d.job.attempts[0].notice_checkpoint_at is None  # periodic ones never set it
    d.apply(InterruptionNotice("i-1", 1, "interruption", "terminate"), 20)
    # WHEN an older notice checkpoint arrives, then the same message again
    d.apply(checkpoint(45, "notice", 3, 21.5), 22)
    first = d.job.attempts[0].notice_checkpoint_at
    d.apply(checkpoint(45, "notice", 3, 23.0), 24)
    # THEN the attempt keeps the agent's send time of the first one; the job keeps step 50
    assert first == at(21.5)
    assert d.job.attempts[0].notice_checkpoint_at == at(21.5)
    assert d.job.checkpoint is not None and d.job.checkpoint.step == 50


def test_the_record_keeps_only_the_newest_periodic_checkpoint_lines() -> None:
    # GIVEN a running job that saves ten periodic checkpoints, then one on its notice
    d = started_job()
    assert d.job is not None
    sent_notes = []
    for n in range(1, 11):
        body = AgentCheckpoint(
            step=10 * n, manifest_key=f"m{n}", size_bytes=1, uploaded_bytes=1, upload_seconds=0.1
        )
        decision = d.apply(AgentReport(agent(d.job, 1, "i-1", body, seq=n + 1)), 10 + n)
        sent_notes += [e for e in decision.notes if e.kind == "checkpoint"]
    d.apply(InterruptionNotice("i-1", 1, "interruption", "terminate"), 30)
    notice = AgentCheckpoint(
        step=105,
        manifest_key="m105",
        size_bytes=1,
        uploaded_bytes=1,
        upload_seconds=0.1,
        reason="notice",
    )
    d.apply(AgentReport(agent(d.job, 1, "i-1", notice, seq=20)), 31)
    # THEN every checkpoint was a note for the notifier, but the record keeps the newest
    # CHECKPOINT_NOTES_KEPT periodic lines and the notice one (the record stays small)
    assert len(sent_notes) == 10
    kept = [e.data["step"] for e in d.job.timeline if e.kind == "checkpoint"]
    assert kept == [80, 90, 100, 105]
    assert d.job.checkpoint is not None and d.job.checkpoint.step == 105


def test_budget_spent_stops_the_job_and_keeps_the_checkpoint() -> None:
    # GIVEN a job with a $1 budget running on a $0.30/h spot instance
    d = started_job()
    assert d.job is not None
    d.job = d.job.model_copy(update={"submission": submission(budget_usd=1.0)})
    for hours in (3, 4):
        t = hours * 3600
        d.apply(
            AgentReport(agent(d.job, 1, "i-1", AgentProgress(step=hours), seq=hours, sent=t)), t
        )
        d.apply(ReconcileTick(at(t)), t)
        if hours == 3:  # $0.90 spent: still within the budget
            assert d.state is JobState.RUNNING
    # THEN at $1.20 the job stops with the reason, and its instance is terminated
    assert d.state is JobState.FAILED
    assert "budget" in (d.job.reason or "") and "checkpoint" in (d.job.reason or "")
    assert "i-1" in d.terminated()


def test_heartbeats_that_change_nothing_are_written_once_per_interval() -> None:
    # GIVEN a running job whose first progress report (its first step and total) is written
    # even though it comes within an interval of the "started" message
    d = started_job()
    assert d.job is not None
    first = d.apply(
        AgentReport(
            agent(d.job, 1, "i-1", AgentProgress(step=1, total_steps=10_000), seq=2, sent=10)
        ),
        10,
    )
    assert first.outcome == "applied" and d.job.progress.total_steps == 10_000
    interval = SETTINGS.heartbeat_write_interval.total_seconds()
    # WHEN heartbeats arrive every minute with small steps
    outcomes = []
    for n in range(1, 6):
        t = 10 + 60 * n
        decision = d.apply(
            AgentReport(agent(d.job, 1, "i-1", AgentProgress(step=1 + n), seq=2 + n, sent=t)), t
        )
        outcomes.append(decision.outcome)
    # THEN only the first one an interval (150 s) after the last write is written, at 190 s
    assert interval == 150
    coalesced = "coalesced: heartbeat"
    assert outcomes == [coalesced, coalesced, "applied", coalesced, coalesced]
    assert d.job.attempts[0].last_heard_at == at(190)
    assert (at(310) - d.job.attempts[0].last_heard_at) < SETTINGS.heartbeat_write_interval


def test_a_start_report_delivered_after_completion_still_records_what_was_restored() -> None:
    # GIVEN a job interrupted once, whose replacement trained to the end, and whose completion
    # was handled before the replacement's "started" message (redelivered late by SQS)
    d = started_job()
    assert d.job is not None
    d.apply(InterruptionNotice("i-1", 1, "interruption", "terminate"), 20)
    d.launch_ok("i-2", 2)
    d.apply(InstanceUp("i-2", 2, "fulfillment", "sir-2"), 24)
    d.apply(AgentReport(agent(d.job, 2, "i-2", AgentProgress(step=60, total_steps=100), seq=2)), 26)
    completed = AgentCompleted(step=100, outputs_prefix="o/", train_seconds=3.0)
    d.apply(AgentReport(agent(d.job, 2, "i-2", completed, seq=3, sent=29)), 29)
    assert d.state is JobState.COMPLETED and d.job.attempts[1].restored_step is None
    # WHEN the "started" message arrives
    started = AgentStarted(restored_step=45, restore_seconds=0.5)
    late = d.apply(AgentReport(agent(d.job, 2, "i-2", started, seq=1, sent=25)), 31)
    # THEN the attempt's start and restored step are recorded, with a note saying it came late,
    # and the job stays COMPLETED; the same message again changes nothing
    assert late.record is not None and d.state is JobState.COMPLETED
    second = d.job.attempts[1]
    assert (second.restored_step, second.restore_seconds, second.started_at) == (45, 0.5, at(25))
    assert d.job.timeline[-1].kind == "resumed"
    assert "reported after the job ended" in d.job.timeline[-1].text
    again = d.apply(AgentReport(agent(d.job, 2, "i-2", started, seq=1, sent=25)), 32)
    assert again.record is None and again.outcome == "ignored: job is over"
