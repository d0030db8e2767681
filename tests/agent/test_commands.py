"""Command jobs through a real agent (`python -m respot.agent`), a real moto server and a
real script (`jobs/cmdjob.py`): the contract of docs/commands.md, its failure paths included."""

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
    AgentFailed,
    AgentPreempted,
    AgentProgress,
    AgentStarted,
)

from .agent_harness import Mailbox, start_agent, submit_job
from .test_agent import Stage, get_json


@pytest.fixture
def stage(s3: Any, sqs: Any, bucket: str, agent_queue: str, moto_url: str, tmp_path: Path) -> Stage:
    return Stage(s3, bucket, agent_queue, Mailbox(sqs, agent_queue), moto_url, tmp_path)


def command_job(stage: Stage, *args: str, **fields: Any) -> Any:
    fields.setdefault("hyperparameters", {})
    return submit_job(
        stage.s3,
        stage.bucket,
        entry_point=None,  # type: ignore[arg-type]
        command=["python", "cmdjob.py", *args],
        **fields,
    )


def restored(stage: Stage, job_id: str, into: Path) -> dict[str, Any]:
    """What a replacement would restore: the newest complete checkpoint in S3."""
    store = CheckpointStore(bucket=stage.bucket, job_id=job_id, client=stage.s3)
    manifest = store.restore(into)
    assert manifest is not None
    return {"step": manifest.step, "state": json.loads((into / "state.json").read_text())}


def test_a_command_is_interrupted_checkpoints_and_the_next_attempt_resumes(stage: Stage) -> None:
    # GIVEN a command that counts 400 steps of 0.02 s, saving on SIGTERM (the notice)
    sub = command_job(
        stage, "--steps", "400", "--sleep", "0.02", hyperparameters={"lr": 0.5, "name": "x y"}
    )
    first = stage.boot(sub.job_id, 1)
    try:
        stage.mailbox.wait_for(
            lambda m: isinstance(m.body, AgentProgress) and (m.body.step or 0) >= 5, timeout=60
        )
        # WHEN the spot notice comes
        first.imds.schedule_interruption("terminate")
        assert first.wait(60) == 0, first.log()
    finally:
        first.stop()
    stage.mailbox.poll()
    # THEN the group got SIGTERM, the script saved and exited 0: an interruption, no step lost
    bodies = [m.body for m in stage.mailbox.of(1)]
    preempted = bodies[-1]
    assert isinstance(preempted, AgentPreempted), stage.mailbox.kinds(1)
    assert preempted.checkpoint_step is not None and 5 <= preempted.checkpoint_step < 400
    assert preempted.step == preempted.checkpoint_step
    notice = [b for b in bodies if isinstance(b, AgentCheckpoint)]
    assert [(c.step, c.reason) for c in notice] == [(preempted.checkpoint_step, "notice")]
    assert "told the command: spot-interruption (SIGTERM)" in first.log()
    # WHEN attempt 2 starts after the hand-off
    second = stage.boot(sub.job_id, 2, await_handoff=1)
    try:
        assert second.wait(60) == 0, second.log()
    finally:
        second.stop()
    stage.mailbox.poll()
    msgs = stage.mailbox.of(2)
    started, done = msgs[0].body, msgs[-1].body
    assert isinstance(started, AgentStarted) and isinstance(done, AgentCompleted), msgs
    assert started.restored_step == preempted.checkpoint_step and started.warm is None
    # THEN it resumed from the notice checkpoint and its total is an uninterrupted run's
    result = get_json(stage.s3, stage.bucket, done.outputs_prefix + "result.json")
    assert result == {"step": 400, "total": sum(range(1, 401))}
    env = get_json(stage.s3, stage.bucket, done.outputs_prefix + "env.json")
    assert env["RESPOT_RESUMED"] == "1" and env["RESPOT_ATTEMPT"] == "2"
    assert env["RESPOT_RESUME_STEP"] == str(preempted.checkpoint_step)
    assert Path(env["RESPOT_CHECKPOINT_DIR"]).name == "checkpoint"
    # AND what each attempt wrote into RESPOT_TENSORBOARD_DIR is with the job's TensorBoard
    for attempt in (1, 2):
        key = f"{layout.tensorboard_prefix(sub.job_id)}command/run/events.out.tfevents.{attempt}"
        assert stage.s3.get_object(Bucket=stage.bucket, Key=key)["Body"].read() == b"scalars"
    assert json.loads(env["RESPOT_HYPERPARAMETERS"]) == {"lr": 0.5, "name": "x y"}


def test_a_command_that_ignores_the_signal_is_killed_and_its_last_saved_checkpoint_kept(
    stage: Stage,
) -> None:
    # GIVEN a command that ignores SIGTERM and says checkpoint_saved every 10 steps
    sub = command_job(stage, "--steps", "100000", "--save-every", "10", "--mode", "ignore")
    agent = stage.boot(sub.job_id, 1)
    try:
        stage.mailbox.wait_for(lambda m: isinstance(m.body, AgentCheckpoint), timeout=60)
        agent.imds.schedule_interruption("terminate", datetime.now(UTC) + timedelta(seconds=3))
        assert agent.wait(60) == 0, agent.log()
    finally:
        agent.stop()
    stage.mailbox.poll()
    # THEN it is killed at the last safe moment; an interruption, from the newest complete one
    preempted = stage.mailbox.of(1)[-1].body
    assert isinstance(preempted, AgentPreempted), stage.mailbox.kinds(1)
    assert "killing it" in agent.log() and "command ended: killed by SIGKILL" in agent.log()
    saved = [
        b.step for b in (m.body for m in stage.mailbox.of(1)) if isinstance(b, AgentCheckpoint)
    ]
    assert preempted.checkpoint_step == max(saved) and max(saved) % 10 == 0
    got = restored(stage, sub.job_id, stage.work / "restore")
    assert got["step"] == max(saved) == got["state"]["step"]


def test_a_half_written_checkpoint_is_never_uploaded_nor_restored(stage: Stage) -> None:
    # GIVEN a command that saves complete checkpoints every 10 steps and, on the notice,
    # starts writing one in place, writes half of it and hangs
    sub = command_job(stage, "--steps", "100000", "--save-every", "10", "--mode", "halfwrite")
    agent = stage.boot(sub.job_id, 1)
    try:
        stage.mailbox.wait_for(lambda m: isinstance(m.body, AgentCheckpoint), timeout=60)
        agent.imds.schedule_interruption("terminate", datetime.now(UTC) + timedelta(seconds=3))
        assert agent.wait(60) == 0, agent.log()
    finally:
        agent.stop()
    stage.mailbox.poll()
    preempted = stage.mailbox.of(1)[-1].body
    assert isinstance(preempted, AgentPreempted), stage.mailbox.kinds(1)
    # THEN the half-written directory was not taken; the newest complete checkpoint is
    work = next((stage.work / "instance-1").rglob("checkpoint/state.json"))
    assert work.read_text() == '{"step": '  # what the killed process left behind
    got = restored(stage, sub.job_id, stage.work / "restore")
    assert got["state"]["step"] == got["step"] == preempted.checkpoint_step
    assert got["step"] % 10 == 0 and got["state"]["total"] == sum(range(1, got["step"] + 1))
    assert "not a complete checkpoint, not uploaded" in agent.log()


def test_a_command_that_fails_before_the_notice_fails_the_job_with_its_log(stage: Stage) -> None:
    sub = command_job(stage, "--mode", "fail", "--fail-at", "3")
    agent = stage.boot(sub.job_id, 1)
    try:
        assert agent.wait(60) == 1, agent.log()  # the agent's status: the attempt failed
    finally:
        agent.stop()
    stage.mailbox.poll()
    failed = stage.mailbox.of(1)[-1].body
    assert isinstance(failed, AgentFailed), stage.mailbox.kinds(1)
    assert failed.exit_code == 3 and failed.reason == "the command failed (exit code 3)"
    assert "boom: the script failed" in failed.log_tail
    assert failed.step == 3


def test_a_command_that_is_not_found_fails_clearly(stage: Stage) -> None:
    sub = submit_job(
        stage.s3,
        stage.bucket,
        hyperparameters={},
        entry_point=None,  # type: ignore[arg-type]
        command=["no-such-program-xyz", "--flag"],
    )
    agent = stage.boot(sub.job_id, 1)
    try:
        assert agent.wait(60) == 1, agent.log()
    finally:
        agent.stop()
    stage.mailbox.poll()
    failed = stage.mailbox.of(1)[-1].body
    assert isinstance(failed, AgentFailed), stage.mailbox.kinds(1)
    assert "'no-such-program-xyz'" in failed.reason and "not found" in failed.reason.lower()
    assert exists_handoff(stage, sub.job_id)


def exists_handoff(stage: Stage, job_id: str) -> bool:
    listed = stage.s3.list_objects_v2(Bucket=stage.bucket, Prefix=layout.handoff_key(job_id, 1))
    return "Contents" in listed


__all__ = ["start_agent"]


def test_a_command_that_polls_the_notice_file_and_chose_sigusr1_hears_both(stage: Stage) -> None:
    # GIVEN a command that ignores SIGTERM, counts SIGUSR1 (its stop_signal) and stops when
    # the notice file appears, then says checkpoint_saved and exits 7; it trains on when the
    # rebalance file appears (and reports that it saw it)
    sub = command_job(stage, "--steps", "100000", "--mode", "poll", stop_signal="SIGUSR1")
    agent = stage.boot(sub.job_id, 1)
    try:
        stage.mailbox.wait_for(
            lambda m: isinstance(m.body, AgentProgress) and (m.body.step or 0) >= 5, timeout=60
        )
        # WHEN EC2 first recommends a rebalance, then sends the spot notice
        agent.imds.recommend_rebalance()
        stage.mailbox.wait_for(
            lambda m: isinstance(m.body, AgentProgress) and "rebalance" in m.body.metrics,
            timeout=60,
        )
        reclaim = datetime.now(UTC) + timedelta(seconds=20)
        agent.imds.schedule_interruption("terminate", reclaim)
        assert agent.wait(60) == 0, agent.log()
    finally:
        agent.stop()
    stage.mailbox.poll()
    # THEN exit 7 after the notice is an interruption, from the checkpoint it said was saved,
    # which recorded the notice file's content and the one SIGUSR1 the group got
    preempted = stage.mailbox.of(1)[-1].body
    assert isinstance(preempted, AgentPreempted), stage.mailbox.kinds(1)
    got = restored(stage, sub.job_id, stage.work / "restore")
    assert got["step"] == preempted.checkpoint_step == got["state"]["step"]
    notice = got["state"]["notice"]
    assert notice["notice"] == "spot-interruption"
    assert abs((datetime.fromisoformat(notice["reclaim_at"]) - reclaim).total_seconds()) < 1
    assert got["state"]["usr1"] == 1  # the notice's: the rebalance sent no signal
    assert "told the command: spot-interruption (SIGUSR1)" in agent.log()
    # the rebalance file came first, whole, and did not stop it
    rebalance = got["state"]["rebalance"]
    assert rebalance["notice"] == "rebalance" and rebalance["reclaim_at"] is None
    assert rebalance["at_step"] < got["step"]


@pytest.mark.slow
def test_a_command_under_torchrun_reports_from_every_rank_and_resumes(stage: Stage) -> None:
    pytest.importorskip("torch")
    # GIVEN `python cmdjob.py` with two processes per node: torchrun starts it twice
    sub = command_job(
        stage, "--steps", "300", "--sleep", "0.03", "--say-saved", processes_per_node=2
    )
    first = stage.boot(sub.job_id, 1)
    try:
        stage.mailbox.wait_for(
            lambda m: isinstance(m.body, AgentProgress) and (m.body.step or 0) >= 10, timeout=90
        )
        first.imds.schedule_interruption("terminate")
        assert first.wait(90) == 0, first.log()
    finally:
        first.stop()
    stage.mailbox.poll()
    preempted = stage.mailbox.of(1)[-1].body
    assert isinstance(preempted, AgentPreempted), stage.mailbox.kinds(1)
    # THEN the whole group heard the notice; rank 0's checkpoint_saved made the checkpoint
    # (torchrun itself exits non-zero on SIGTERM: an interruption all the same)
    assert preempted.checkpoint_step is not None and preempted.checkpoint_step >= 10
    second = stage.boot(sub.job_id, 2, await_handoff=1)
    try:
        assert second.wait(120) == 0, second.log()
    finally:
        second.stop()
    stage.mailbox.poll()
    done = stage.mailbox.of(2)[-1].body
    assert isinstance(done, AgentCompleted), stage.mailbox.kinds(2)
    result = get_json(stage.s3, stage.bucket, done.outputs_prefix + "result.json")
    assert result == {"step": 300, "total": sum(range(1, 301))}
    for rank in (0, 1):  # both ranks ran, in a world of two
        key = done.outputs_prefix + f"rank{rank}.txt"
        body = stage.s3.get_object(Bucket=stage.bucket, Key=key)["Body"].read()
        assert body == b"2"


def _wait_for_script_start(stage: Stage, attempt: int) -> None:
    """Until the script has printed its first line (its SIGTERM handler is set by then): an
    event in the attempt's session log, bounded only for a script that never gets there."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            logs = list((stage.work / f"instance-{attempt}").rglob("session.log"))
            if any("start step=" in log.read_text(errors="replace") for log in logs):
                return
        except FileNotFoundError:
            pass  # the agent renamed a directory away while we walked the tree: look again
        time.sleep(0.05)
    raise AssertionError(f"attempt {attempt}'s script never started")


def test_a_script_that_never_reports_a_step_keeps_each_notice_checkpoint(stage: Stage) -> None:
    # GIVEN a script that never calls respot.report, saves on SIGTERM and exits 0
    sub = command_job(stage, "--steps", "100000", "--mode", "silent")
    preempted = []
    for attempt in (1, 2):
        agent = stage.boot(sub.job_id, attempt, await_handoff=attempt - 1 or None)
        try:
            _wait_for_script_start(stage, attempt)
            # WHEN each attempt gets the notice
            agent.imds.schedule_interruption("terminate")
            assert agent.wait(60) == 0, agent.log()
        finally:
            agent.stop()
        stage.mailbox.poll()
        body = stage.mailbox.of(attempt)[-1].body
        assert isinstance(body, AgentPreempted), stage.mailbox.kinds(attempt)
        preempted.append(body.checkpoint_step)
    # THEN the second attempt's notice checkpoint is the newest, not skipped as "already
    # had" under the label the first one restored
    assert preempted[0] is not None and preempted[1] is not None
    assert preempted[1] > preempted[0]
    got = restored(stage, sub.job_id, stage.work / "restore")
    assert got["state"]["attempt"] == "2"
