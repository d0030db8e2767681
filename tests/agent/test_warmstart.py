"""Warm start end to end: real agents, moto, local IMDS servers and session child processes.

The replacement imports and prepares its session before the restore and says so; the old
instance trains on until then; a warm-up that fails falls back to a cold start; a checkpoint
that never finished uploading is never what a warm replacement restores.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from respot.storage import layout
from respot.storage.checkpoints import CheckpointStore
from respot.wire.messages import (
    AgentCheckpoint,
    AgentCompleted,
    AgentPreempted,
    AgentProgress,
    AgentStarted,
)

from .agent_harness import Mailbox, submit_job
from .test_agent import Stage, exists, get_json


@pytest.fixture
def stage(s3: Any, sqs: Any, bucket: str, agent_queue: str, moto_url: str, tmp_path: Path) -> Stage:
    return Stage(s3, bucket, agent_queue, Mailbox(sqs, agent_queue), moto_url, tmp_path)


def _checkpoint(s3: Any, bucket: str, job_id: str, tmp: Path, step: int, attempt: int) -> str:
    """Upload a CountingSession checkpoint of `step` as `attempt`'s; its manifest key."""
    d = tmp / f"ckpt-{step}"
    d.mkdir(parents=True)
    (d / "state.json").write_text(json.dumps({"step": step, "total": sum(range(1, step + 1))}))
    store = CheckpointStore(bucket=bucket, job_id=job_id, client=s3)
    return store.upload(d, step=step, attempt=attempt, reason="periodic").manifest_key


def _started(stage: Stage, attempt: int) -> AgentStarted:
    started = [m.body for m in stage.mailbox.of(attempt) if isinstance(m.body, AgentStarted)]
    assert len(started) == 1, stage.mailbox.kinds(attempt)
    return started[0]


def last_step(mailbox: Mailbox, attempt: int = 1) -> int:
    return max(
        (m.body.step or 0 for m in mailbox.of(attempt) if isinstance(m.body, AgentProgress)),
        default=0,
    )


def test_the_old_instance_trains_until_its_replacement_is_warm_and_no_step_is_lost(
    stage: Stage,
) -> None:
    s3, bucket, mailbox = stage.s3, stage.bucket, stage.mailbox
    sub = submit_job(
        s3,
        bucket,
        hyperparameters={
            # attempt 1 would train for 200 s: longer than any hold; attempt 2 runs at once
            "steps": 20_000,
            "sleep": 0.01,
            "resumed_sleep": 0.0,
            "checkpoint_every": 500,
        },
    )
    first = stage.boot(sub.job_id, 1)
    second = None
    try:
        mailbox.wait_for(lambda m: isinstance(m.body, AgentCheckpoint), timeout=60)
        # WHEN the notice comes with 90 s to go (the reserve is 30 s: it may hold for 60 s)
        first.imds.schedule_interruption("terminate", datetime.now(UTC) + timedelta(seconds=90))
        noticed = time.monotonic()
        # THEN the agent holds the notice and the session is not told yet: it trains on (200
        # steps, at least 2 s of it, past where it was once holding) while no replacement
        # exists. Event-ordered: nothing can tell it before the replacement below boots.
        first.wait_for_log("while the replacement warms up", timeout=60)
        mailbox.poll()
        held_at = last_step(mailbox)
        mailbox.wait_for(
            lambda m: isinstance(m.body, AgentProgress) and (m.body.step or 0) > held_at + 200,
            timeout=60,
        )
        assert not any(
            isinstance(m.body, AgentCheckpoint) and m.body.reason == "notice" for m in mailbox.of(1)
        ), mailbox.kinds(1)
        step_before = last_step(mailbox)
        # WHEN the replacement boots: it warms up, says so, and waits for the handoff
        second = stage.boot(sub.job_id, 2, await_handoff=1)
        code1 = first.wait(120)
        handed_off = time.monotonic()
        code2 = second.wait(120)
    finally:
        first.stop()
        if second is not None:
            second.stop()
    mailbox.poll()
    assert code1 == 0, first.log()
    assert code2 == 0, second.log()
    # THEN the old instance was told once the replacement was warm, well before the reclaim
    marker = get_json(s3, bucket, layout.successor_ready_key(sub.job_id, 1))
    assert "telling the session now: the replacement is warm" in first.log()
    # and not before: its notice checkpoint was sent after the replacement's marker was written
    notice = [
        m
        for m in mailbox.of(1)
        if isinstance(m.body, AgentCheckpoint) and m.body.reason == "notice"
    ]
    assert notice and notice[0].sent_at >= datetime.fromisoformat(marker["at"]), marker
    assert handed_off - noticed < 60
    preempted = mailbox.of(1)[-1].body
    assert isinstance(preempted, AgentPreempted), mailbox.kinds(1)
    assert preempted.step == preempted.checkpoint_step  # zero lost work
    assert preempted.checkpoint_step is not None and preempted.checkpoint_step > step_before
    assert preempted.last_step_at is not None
    # ... and the replacement, warm, resumed from exactly that step
    started = _started(stage, 2)
    assert started.warm is True and started.warm_failure is None
    assert started.restored_step == preempted.checkpoint_step
    done = mailbox.of(2)[-1].body
    assert isinstance(done, AgentCompleted), mailbox.kinds(2)
    result = get_json(s3, bucket, done.outputs_prefix + "result.json")
    assert result["total"] == sum(range(1, 20_001))
    # prepare() ran before the restore: the checkpoint directory was still empty
    assert result["prepared"] == {"checkpoint_files": [], "resume_step": None}
    assert result["resumed_from"] == preempted.checkpoint_step
    assert result["resume_step_env"] == str(preempted.checkpoint_step)
    firsts = [m.body.first_step_at for m in mailbox.of(2) if isinstance(m.body, AgentProgress)]
    assert firsts and firsts[-1] is not None and firsts[-1] >= preempted.last_step_at


def test_a_replacement_whose_warm_up_fails_starts_cold_and_says_why(
    stage: Stage, tmp_path: Path
) -> None:
    s3, bucket = stage.s3, stage.bucket
    # A session that (against the contract) reads its checkpoint in prepare(): warm, the
    # checkpoint is not there yet, so its warm-up fails; cold, it is.
    sub = submit_job(
        s3,
        bucket,
        hyperparameters={"steps": 60, "checkpoint_every": 1000, "prepare_reads_checkpoint": True},
    )
    manifest = _checkpoint(s3, bucket, sub.job_id, tmp_path, 40, attempt=1)
    s3.put_object(Bucket=bucket, Key=layout.handoff_key(sub.job_id, 1), Body=b"{}")
    agent = stage.boot(sub.job_id, 2, await_handoff=1)
    try:
        code = agent.wait(60)
    finally:
        agent.stop()
    stage.mailbox.poll()
    assert code == 0, agent.log()
    started = _started(stage, 2)
    assert started.warm is False
    assert started.warm_failure is not None and "RuntimeError" in started.warm_failure
    assert started.restored_manifest == manifest
    done = stage.mailbox.of(2)[-1].body
    assert isinstance(done, AgentCompleted), stage.mailbox.kinds(2)
    result = get_json(s3, bucket, done.outputs_prefix + "result.json")
    assert result["resumed_from"] == 40 and result["total"] == sum(range(1, 61))
    assert result["prepared"]["checkpoint_files"] == ["state.json"]  # the cold start's
    assert "warm-up failed" in agent.log()


def test_a_warm_replacement_never_restores_a_checkpoint_that_did_not_finish_uploading(
    stage: Stage, tmp_path: Path
) -> None:
    s3, bucket = stage.s3, stage.bucket
    sub = submit_job(s3, bucket, hyperparameters={"steps": 60, "checkpoint_every": 1000})
    complete = _checkpoint(s3, bucket, sub.job_id, tmp_path, 30, attempt=1)
    # The old instance's final checkpoint: its blob went up, its manifest never did, and it
    # never handed off (it died): the replacement waits out the handoff, then restores 30.
    newer = _checkpoint(s3, bucket, sub.job_id, tmp_path, 50, attempt=1)
    s3.delete_object(Bucket=bucket, Key=newer)
    agent = stage.boot(sub.job_id, 2, await_handoff=1, RESPOT_HANDOFF_WAIT_SECONDS="3")
    try:
        code = agent.wait(60)
    finally:
        agent.stop()
    stage.mailbox.poll()
    assert code == 0, agent.log()
    started = _started(stage, 2)
    assert started.warm is True
    assert started.restored_step == 30 and started.restored_manifest == complete
    done = stage.mailbox.of(2)[-1].body
    assert isinstance(done, AgentCompleted)
    result = get_json(s3, bucket, done.outputs_prefix + "result.json")
    assert result["resumed_from"] == 30 and result["total"] == sum(range(1, 61))
    assert "handoff from attempt 1: not found" in agent.log()


def test_a_job_that_opts_out_starts_cold(stage: Stage, tmp_path: Path) -> None:
    s3, bucket = stage.s3, stage.bucket
    sub = submit_job(s3, bucket, hyperparameters={"steps": 30}, warm_start=False)
    _checkpoint(s3, bucket, sub.job_id, tmp_path, 10, attempt=1)
    s3.put_object(Bucket=bucket, Key=layout.handoff_key(sub.job_id, 1), Body=b"{}")
    agent = stage.boot(sub.job_id, 2, await_handoff=1)
    try:
        code = agent.wait(60)
    finally:
        agent.stop()
    stage.mailbox.poll()
    assert code == 0, agent.log()
    assert _started(stage, 2).warm is None
    assert not exists(s3, bucket, layout.successor_ready_key(sub.job_id, 1))
    done = stage.mailbox.of(2)[-1].body
    assert isinstance(done, AgentCompleted)
    result = get_json(s3, bucket, done.outputs_prefix + "result.json")
    assert result["total"] == sum(range(1, 31))
    # prepare() ran after the restore, as train() always did
    assert result["prepared"] == {"checkpoint_files": ["state.json"], "resume_step": 10}
