"""Frameworks as command jobs with respot.integrations (`examples/huggingface`: a Hugging
Face `Trainer`; `examples/lightning`: a Lightning `Trainer`): interrupted twice through a real
agent, each saves on the notice, resumes from it, and ends with the very weights of an
uninterrupted run."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from respot.spec.training import TrainingEnvVar
from respot.storage import layout
from respot.wire.messages import (
    AgentCheckpoint,
    AgentCompleted,
    AgentPreempted,
    AgentProgress,
    AgentStarted,
    CodeArtifact,
    JobSubmission,
    utcnow,
)

from .agent_harness import Mailbox, zip_dir
from .conftest import REPO, child_env
from .test_agent import Stage

pytestmark = [pytest.mark.slow]

EXAMPLES = REPO / "examples"
FRAMEWORKS = {
    "huggingface": (("transformers", "accelerate"), ["--steps", "120", "--save-steps", "40"]),
    "lightning": (("lightning",), ["--steps", "120", "--save-every", "40"]),
}


@pytest.fixture
def stage(s3: Any, sqs: Any, bucket: str, agent_queue: str, moto_url: str, tmp_path: Path) -> Stage:
    return Stage(s3, bucket, agent_queue, Mailbox(sqs, agent_queue), moto_url, tmp_path)


def submit(stage: Stage, job_id: str, example: Path, args: list[str]) -> None:
    code = zip_dir(example)
    digest = hashlib.sha256(code).hexdigest()
    key = layout.code_key(job_id, digest)
    stage.s3.put_object(Bucket=stage.bucket, Key=key, Body=code)
    spec = TrainingEnvVar(
        name=example.name, command=["python", "train.py", *args, "--step-seconds", "0.05"]
    )
    sub = JobSubmission(
        job_id=job_id,
        spec=spec,
        code=CodeArtifact(s3_uri=f"s3://{stage.bucket}/{key}", sha256=digest, size_bytes=len(code)),
        submitted_at=utcnow(),
    )
    stage.s3.put_object(
        Bucket=stage.bucket, Key=layout.submission_key(job_id), Body=sub.model_dump_json().encode()
    )


def uninterrupted(tmp_path: Path, example: Path, args: list[str]) -> str:
    env = child_env(
        RESPOT_CHECKPOINT_DIR=str(tmp_path / "c"), RESPOT_OUTPUT_DIR=str(tmp_path / "o")
    )
    subprocess.run(
        [sys.executable, str(example / "train.py"), *args],
        env={**env, "PYTHONPATH": str(REPO / "sdk")},
        check=True,
        capture_output=True,
        timeout=300,
    )
    return (tmp_path / "o" / "weights.sha256").read_text()


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_a_trainer_interrupted_twice_resumes_from_its_notice_checkpoints(
    stage: Stage, tmp_path: Path, framework: str
) -> None:
    modules, args = FRAMEWORKS[framework]
    for module in modules:
        pytest.importorskip(module)
    example = EXAMPLES / framework
    job_id = f"{framework}-{os.getpid()}"
    submit(stage, job_id, example, args)
    stopped: list[int] = []
    for attempt, at_step in ((1, 15), (2, 60), (3, None)):
        agent = stage.boot(
            job_id, attempt, **({"await_handoff": attempt - 1} if attempt > 1 else {})
        )
        try:
            if at_step is not None:
                stage.mailbox.wait_for(
                    lambda m, a=attempt, s=at_step: (
                        m.attempt == a
                        and isinstance(m.body, AgentProgress)
                        and (m.body.step or 0) >= s
                    ),
                    timeout=120,
                )
                agent.imds.schedule_interruption("terminate")
            assert agent.wait(120) == 0, agent.log()
        finally:
            agent.stop()
        stage.mailbox.poll()
        bodies = [m.body for m in stage.mailbox.of(attempt)]
        started = bodies[0]
        assert isinstance(started, AgentStarted), bodies
        # each attempt resumed where the one before stopped: no step lost
        assert started.restored_step == (stopped[-1] if stopped else None)
        if at_step is not None:
            preempted = bodies[-1]
            assert isinstance(preempted, AgentPreempted), bodies
            notice = [b for b in bodies if isinstance(b, AgentCheckpoint) and b.reason == "notice"]
            assert preempted.checkpoint_step == preempted.step, agent.log()
            # the last one is the notice's (a periodic save may land after the notice too)
            assert notice and notice[-1].step == preempted.step
            stopped.append(preempted.step)
        else:
            done = bodies[-1]
            assert isinstance(done, AgentCompleted) and done.step == 120, bodies
            assert any(isinstance(b, AgentProgress) and "loss" in b.metrics for b in bodies)
    assert stopped[0] >= 15 and stopped[1] >= 60
    key = layout.outputs_prefix(job_id) + "weights.sha256"
    weights = stage.s3.get_object(Bucket=stage.bucket, Key=key)["Body"].read().decode()
    assert weights == uninterrupted(tmp_path, example, args)
