"""processes_per_node: two ranks under torchrun (CPU, gloo), interrupted twice, resume to the
very weights of an uninterrupted two-process run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from respot.storage import layout
from respot.wire.messages import AgentCompleted, AgentPreempted, AgentProgress

from .agent_harness import Mailbox, submit_job
from .test_agent import Stage

pytest.importorskip("torch")
# four attempts of two torch processes: slow on 2 cores
pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture
def stage(s3: Any, sqs: Any, bucket: str, agent_queue: str, moto_url: str, tmp_path: Path) -> Stage:
    return Stage(s3, bucket, agent_queue, Mailbox(sqs, agent_queue), moto_url, tmp_path)


# Interrupted once step 15, then step 35, is reported: the first 120 steps take at least
# 0.04 s each, so each notice has at least 85 steps (3.4 s) to land before those run out,
# however late it comes within that; the last 80 steps run without sleeping.
STEPS = 200
HYPER = {"steps": STEPS, "sleep": 0.04, "slow_steps": 120, "checkpoint_every": 1000}


def run_attempt(stage: Stage, job_id: str, attempt: int, *, interrupt_at: int | None) -> str:
    """Run one attempt; interrupt it once it reported `interrupt_at`. Its session log."""
    agent = stage.boot(job_id, attempt, **({"await_handoff": attempt - 1} if attempt > 1 else {}))
    try:
        if interrupt_at is not None:
            stage.mailbox.wait_for(
                lambda m: (
                    m.job_id == job_id
                    and m.attempt == attempt
                    and isinstance(m.body, AgentProgress)
                    and (m.body.step or 0) >= interrupt_at
                ),
                timeout=90,
            )
            agent.imds.schedule_interruption("terminate")
        code = agent.wait(120)
    finally:
        agent.stop()
    assert code == 0, agent.log()
    key = layout.logs_prefix(job_id, attempt) + "session.log"
    return str(stage.s3.get_object(Bucket=stage.bucket, Key=key)["Body"].read().decode())


def weights(stage: Stage, job_id: str) -> str:
    key = layout.outputs_prefix(job_id) + "weights.sha256"
    return str(stage.s3.get_object(Bucket=stage.bucket, Key=key)["Body"].read().decode())


def test_two_ranks_interrupted_twice_end_with_the_uninterrupted_weights(stage: Stage) -> None:
    # warm_start as by default: a torchrun job's replacement starts cold, so its old instance
    # tells every rank of the notice at once (no hold for a warm replacement that never comes)
    ddp = {"entry_point": "ddpjob:DDPSession", "processes_per_node": 2}
    # GIVEN an uninterrupted two-process run
    plain = submit_job(stage.s3, stage.bucket, hyperparameters=HYPER, **ddp)
    log = run_attempt(stage, plain.job_id, 1, interrupt_at=None)
    assert '"RANK": "0"' in log and '"RANK": "1"' in log and '"WORLD_SIZE": "2"' in log
    assert '"LOCAL_RANK": "1"' in log
    # WHEN the same job runs again, interrupted at step 15 and again at step 35
    cut = submit_job(stage.s3, stage.bucket, hyperparameters=HYPER, **ddp)
    logs = [
        run_attempt(stage, cut.job_id, 1, interrupt_at=15),
        run_attempt(stage, cut.job_id, 2, interrupt_at=35),
        run_attempt(stage, cut.job_id, 3, interrupt_at=None),
    ]
    stage.mailbox.poll()
    # THEN every rank saw each notice, each attempt resumed where the last one stopped,
    for log in logs[:2]:
        assert "NOTICE rank=0 seen=True" in log and "NOTICE rank=1 seen=True" in log, log
    ends = [
        (m.attempt, m.body)
        for m in stage.mailbox.messages
        if m.job_id == cut.job_id and isinstance(m.body, AgentPreempted | AgentCompleted)
    ]
    assert [type(b).__name__ for _, b in sorted(ends, key=lambda e: e[0])] == [
        "AgentPreempted",
        "AgentPreempted",
        "AgentCompleted",
    ]
    steps = [b.checkpoint_step for _, b in sorted(ends, key=lambda e: e[0])[:2]]
    assert all(isinstance(b, AgentPreempted) and b.step == b.checkpoint_step for _, b in ends[:2])
    assert steps[0] is not None and steps[1] is not None and 15 <= steps[0] < steps[1] < STEPS
    # AND the weights are bit-identical to the uninterrupted run's
    assert weights(stage, cut.job_id) == weights(stage, plain.job_id)
