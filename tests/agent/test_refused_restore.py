"""The agent reports the checkpoints its restore refused (issue 24, item 11): a real agent
process resumes from the newest usable checkpoint and its `started` report names the newer
one it refused as corrupt, so the control plane can put it in the timeline and Slack."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from respot.storage import layout
from respot.storage.checkpoints import CheckpointStore
from respot.wire.messages import AgentCompleted, AgentStarted
from tests.agent.agent_harness import Mailbox, submit_job
from tests.agent.test_agent import Stage, get_json


@pytest.fixture
def stage(s3: Any, sqs: Any, bucket: str, agent_queue: str, moto_url: str, tmp_path: Path) -> Stage:
    return Stage(s3, bucket, agent_queue, Mailbox(sqs, agent_queue), moto_url, tmp_path)


def checkpoint(s3: Any, bucket: str, job_id: str, root: Path, step: int) -> bytes:
    state = json.dumps({"step": step, "total": sum(range(1, step + 1))}).encode()
    root.mkdir(parents=True)
    (root / "state.json").write_bytes(state)
    CheckpointStore(bucket=bucket, job_id=job_id, client=s3).upload(
        root, step=step, attempt=1, reason="periodic"
    )
    return state


def test_a_corrupt_newest_checkpoint_is_reported_and_the_previous_one_used(stage: Stage) -> None:
    s3, bucket = stage.s3, stage.bucket
    sub = submit_job(s3, bucket, hyperparameters={"steps": 25, "checkpoint_every": 100})
    checkpoint(s3, bucket, sub.job_id, stage.work / "c10", 10)
    newest = checkpoint(s3, bucket, sub.job_id, stage.work / "c20", 20)
    # GIVEN the newest checkpoint's blob no longer matches its manifest's SHA-256
    key = layout.blob_key(sub.job_id, hashlib.sha256(newest).hexdigest())
    s3.put_object(Bucket=bucket, Key=key, Body=newest.replace(b"20", b"21"))
    # WHEN an agent runs the next attempt
    agent = stage.boot(sub.job_id, 2)
    try:
        code = agent.wait(60)
    finally:
        agent.stop()
    stage.mailbox.poll()
    msgs = stage.mailbox.of(2)
    assert code == 0, agent.log()
    started, done = msgs[0].body, msgs[-1].body
    # THEN it resumed from step 10 and said that step 20 was refused, and why
    assert isinstance(started, AgentStarted) and started.restored_step == 10
    assert started.refused_checkpoints is not None
    (refused,) = started.refused_checkpoints
    assert refused.step == 20 and refused.manifest_key == layout.manifest_key(sub.job_id, 20, 1)
    assert "SHA-256" in refused.reason
    # AND the job's result is right: counted from the checkpoint it used
    assert isinstance(done, AgentCompleted)
    result = get_json(s3, bucket, done.outputs_prefix + "result.json")
    assert result["resumed_from"] == 10 and result["total"] == sum(range(1, 26))
