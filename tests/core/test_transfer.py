"""The checkpoint follows the job into another region, and the move is in its cost ledger."""

from __future__ import annotations

from dataclasses import replace

import pytest

from respot.core.cost import job_cost, ledger
from respot.core.effects import LaunchInstance
from respot.core.events import (
    AgentReport,
    CapacityLaunched,
    CapacityUnavailable,
    InstanceUp,
    InterruptionNotice,
    JobEvent,
    Submitted,
)
from respot.core.job import JobRecord
from respot.core.lifecycle import decide
from respot.core.placement import SubnetRef
from respot.wire.messages import AgentCheckpoint, AgentPreempted, AgentStarted
from tests.core.factories import SETTINGS, agent, at, submission

# The home region's zone first, then a satellite region's
REGIONS = replace(
    SETTINGS,
    subnets=(SubnetRef("subnet-home", "us-east-1a"), SubnetRef("subnet-sat", "us-west-2a")),
    default_instance_types=("g5.xlarge",),
)
CHECKPOINT_BYTES = 10 * 10**9  # the benchmark's 10 GB


class Run:
    def __init__(self) -> None:
        self.job: JobRecord | None = None
        self.launches: list[LaunchInstance] = []

    def apply(self, event: JobEvent, t: float) -> None:
        decision = decide(self.job, event, now=at(t), settings=REGIONS)
        if decision.record is not None:
            self.job = decision.record
        self.launches += [e for e in decision.effects if isinstance(e, LaunchInstance)]
        if decision.follow_up is not None:
            self.apply(decision.follow_up, t)

    def launched(self, instance_id: str, t: float) -> None:
        last = self.launches[-1]
        self.apply(
            CapacityLaunched(last.attempt, last.client_token, instance_id, "sir", None, 0.4),
            t,
        )
        self.apply(InstanceUp(instance_id, last.attempt, "running"), t + 1)

    def say(self, attempt: int, instance_id: str, body: object, seq: int, t: float) -> None:
        assert self.job is not None
        self.apply(AgentReport(agent(self.job, attempt, instance_id, body, seq=seq, sent=t)), t)


def moved_job() -> Run:
    """Trains in us-east-1a, checkpoints 10 GB, is reclaimed; the replacement in us-west-2a."""
    run = Run()
    run.apply(Submitted(submission()), 0)
    run.launched("i-home", 1)
    run.say(1, "i-home", AgentStarted(), 2, 60)
    ckpt = AgentCheckpoint(
        step=500,
        manifest_key="ckpt/500",
        size_bytes=CHECKPOINT_BYTES,
        uploaded_bytes=CHECKPOINT_BYTES,
        upload_seconds=30.0,
        reason="notice",
    )
    run.apply(InterruptionNotice("i-home", 1, "interruption"), 3600)
    run.say(1, "i-home", ckpt, 3, 3601)
    run.say(
        1,
        "i-home",
        AgentPreempted(step=500, checkpoint_step=500, notice="spot-interruption"),
        4,
        3602,
    )
    # the replacement's first pool is the home zone (just reclaimed); it is refused there
    last = run.launches[-1]
    if last.placement.availability_zone == "us-east-1a":
        run.apply(
            CapacityUnavailable(last.attempt, last.client_token, "InsufficientInstanceCapacity"),
            3603,
        )
    run.launched("i-sat", 3604)
    run.say(2, "i-sat", AgentStarted(restored_step=500, restored_manifest="ckpt/500"), 2, 3700)
    return run


def test_a_job_resumed_in_another_region_pays_the_checkpoint_s_move_once() -> None:
    run = moved_job()
    job = run.job
    assert job is not None
    assert [a.placement.availability_zone for a in job.attempts if a.instance_id] == [
        "us-east-1a",
        "us-west-2a",
    ]
    lines = ledger(job, at(7200))
    # THEN the satellite attempt's line carries the move: 10 GB at $0.02/GB = $0.20
    assert [ln.transfer_from for ln in lines] == [None, "us-east-1"]
    assert lines[-1].transfer_gb == pytest.approx(10.0)
    assert lines[-1].transfer_usd == pytest.approx(0.20)
    assert lines[0].transfer_usd == 0.0
    # AND the job's total includes it
    instances = sum(ln.paid_usd for ln in lines)
    assert job_cost(job, at(7200)).paid_usd == pytest.approx(instances + 0.20)


def test_a_duplicate_start_report_does_not_pay_twice() -> None:
    run = moved_job()
    run.say(2, "i-sat", AgentStarted(restored_step=500, restored_manifest="ckpt/500"), 2, 3700)
    assert run.job is not None
    assert sum(ln.transfer_usd for ln in ledger(run.job, at(7200))) == pytest.approx(0.20)


def test_no_fee_within_a_region_or_without_a_checkpoint() -> None:
    run = Run()
    run.apply(Submitted(submission()), 0)
    run.launched("i-1", 1)
    run.say(1, "i-1", AgentStarted(), 2, 60)  # nothing to restore
    assert run.job is not None
    assert all(ln.transfer_usd == 0 for ln in ledger(run.job, at(100)))
