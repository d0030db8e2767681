"""The agent end to end: real `python -m respot.agent` processes, a real moto server, a real
local IMDS server and real session child processes running `jobs/countjob.py`."""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from respot.storage import layout
from respot.wire.messages import (
    AgentCheckpoint,
    AgentCompleted,
    AgentFailed,
    AgentPreempted,
    AgentProgress,
    AgentStarted,
)

from .agent_harness import AgentProcess, Mailbox, start_agent, submit_job

LINGERING = "countjob:LingeringSession"
SHELLISH = {
    "SEMI": "x; rm -rf /",
    "SUBST": "$(curl evil)",
    "BACKTICK": "`id`",
    "QUOTES": 'it\'s "quoted" \\ back',
    "NEWLINES": "line one\nline two\n",
    "SPACES": "  leading and trailing  ",
    "GLOB": "* ? [a-z]",
    "UNICODE": "é 漢字 🙂",
    "EMPTY": "",
}


def get_json(s3: Any, bucket: str, key: str) -> Any:
    return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())


def exists(s3: Any, bucket: str, key: str) -> bool:
    return "Contents" in s3.list_objects_v2(Bucket=bucket, Prefix=key)


def logged_at(log: str, text: str) -> datetime:
    """When the agent logged the first line containing `text` (its log's asctime)."""
    line = next(line for line in log.splitlines() if text in line)
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")


@dataclass
class Stage:
    """One test's AWS (moto) resources, and a way to boot an instance running the agent."""

    s3: Any
    bucket: str
    queue_url: str
    mailbox: Mailbox
    moto_url: str
    work: Path

    def boot(self, job_id: str, attempt: int, **kwargs: Any) -> AgentProcess:
        return start_agent(
            moto_url=self.moto_url,
            bucket=self.bucket,
            queue_url=self.queue_url,
            job_id=job_id,
            attempt=attempt,
            work_dir=self.work / f"instance-{attempt}",
            **kwargs,
        )


@pytest.fixture
def stage(s3: Any, sqs: Any, bucket: str, agent_queue: str, moto_url: str, tmp_path: Path) -> Stage:
    return Stage(s3, bucket, agent_queue, Mailbox(sqs, agent_queue), moto_url, tmp_path)


def test_a_job_runs_to_completion(stage: Stage) -> None:
    s3, bucket, mailbox = stage.s3, stage.bucket, stage.mailbox
    # GIVEN a submitted job whose session counts to 30 and echoes shell-looking variables
    sub = submit_job(
        s3,
        bucket,
        hyperparameters={
            "steps": 30,
            "sleep": 0.03,
            "checkpoint_every": 10,
            "echo_env": sorted(SHELLISH),
        },
        environment=SHELLISH,
    )
    # WHEN an agent runs attempt 1
    agent = stage.boot(sub.job_id, 1)
    try:
        code = agent.wait(60)
    finally:
        agent.stop()
    mailbox.poll()
    # THEN it reports started, progress, checkpoints and completion, in seq order
    msgs = mailbox.of(1)
    assert code == 0, agent.log()
    assert [m.seq for m in msgs] == list(range(1, len(msgs) + 1))
    assert all(m.job_id == sub.job_id and m.instance_id == agent.imds.instance_id for m in msgs)
    kinds = [m.body.kind for m in msgs]
    assert kinds[0] == "started" and kinds[-1] == "completed", kinds
    started = msgs[0].body
    assert isinstance(started, AgentStarted) and started.restored_step is None
    progress = [m.body for m in msgs if isinstance(m.body, AgentProgress)]
    assert progress and any(p.step and p.total_steps == 30 for p in progress)
    checkpoints = [m.body for m in msgs if isinstance(m.body, AgentCheckpoint)]
    # Every checkpoint is uploaded and reported, or (newest wins: respot.agent.uploads) skipped
    # for a newer one while the one before still uploads, which a loaded machine can cause:
    # the first and the last always go up, and each one is accounted for.
    uploaded = [c.step for c in checkpoints]
    skipped = re.findall(r"skipping checkpoint step (\d+): step (\d+) is newer", agent.log())
    assert all(int(newer) in uploaded for _, newer in skipped), (uploaded, skipped)
    assert sorted(uploaded + [int(old) for old, _ in skipped]) == [10, 20, 30], skipped
    assert uploaded[0] == 10 and uploaded[-1] == 30, uploaded
    # The 256 KiB constant file went up once: later checkpoints send only state.json.
    assert checkpoints[0].uploaded_bytes > 256 * 1024
    assert all(c.uploaded_bytes < 100 for c in checkpoints[1:])
    assert all(c.size_bytes > 256 * 1024 for c in checkpoints)
    done = msgs[-1].body
    assert isinstance(done, AgentCompleted)
    assert done.step == 30 and done.outputs_prefix == layout.outputs_prefix(sub.job_id)
    # The outputs are in S3, nested ones too; pruning kept checkpoint_keep=2 manifests.
    result = get_json(s3, bucket, done.outputs_prefix + "result.json")
    assert result["total"] == sum(range(1, 31)) and result["resumed_from"] is None
    assert exists(s3, bucket, done.outputs_prefix + "nested/note.txt")
    # AND their manifest, written last, records each file's SHA-256 for `respot pull`
    outputs = get_json(s3, bucket, layout.outputs_manifest_key(sub.job_id))
    assert outputs["outcome"] == "completed" and outputs["attempt"] == 1
    recorded = {f["path"]: f["sha256"] for f in outputs["files"]}
    assert set(recorded) == {"result.json", "env.json", "nested/note.txt"}
    body = s3.get_object(Bucket=bucket, Key=done.outputs_prefix + "nested/note.txt")["Body"]
    assert recorded["nested/note.txt"] == hashlib.sha256(body.read()).hexdigest()
    # AND the completion report carries the manifest's own SHA-256 (what the record keeps)
    written = s3.get_object(Bucket=bucket, Key=layout.outputs_manifest_key(sub.job_id))["Body"]
    assert done.outputs_sha256 == hashlib.sha256(written.read()).hexdigest()
    manifests = s3.list_objects_v2(Bucket=bucket, Prefix=layout.manifests_prefix(sub.job_id))
    assert len(manifests["Contents"]) == 2
    assert exists(s3, bucket, layout.handoff_key(sub.job_id, 1))
    assert exists(s3, bucket, layout.logs_prefix(sub.job_id, 1) + "session.log")
    # AND the researcher's environment reached the session byte for byte (no shell anywhere)
    echoed = get_json(s3, bucket, done.outputs_prefix + "env.json")
    assert {k: echoed[k] for k in SHELLISH} == SHELLISH
    assert echoed["RESPOT_JOB_ID"] == sub.job_id and echoed["RESPOT_ATTEMPT"] == "1"


def test_an_interrupted_attempt_hands_off_and_the_next_resumes_from_its_step(stage: Stage) -> None:
    s3, bucket, mailbox = stage.s3, stage.bucket, stage.mailbox
    # Attempt 1 needs at least 20 s for its 1000 steps: the notice, sent once step 10 is
    # reported, reaches it long before that however loaded the machine; attempt 2 runs fast.
    steps = 1000
    sub = submit_job(
        s3,
        bucket,
        hyperparameters={
            "steps": steps,
            "sleep": 0.02,
            "resumed_sleep": 0.0,
            "checkpoint_every": 10_000,
        },
    )
    first = stage.boot(sub.job_id, 1)
    try:
        # WHEN the spot interruption notice comes while the session is training
        mailbox.wait_for(
            lambda m: isinstance(m.body, AgentProgress) and (m.body.step or 0) >= 10, timeout=30
        )
        first.imds.schedule_interruption("terminate")
        code = first.wait(30)
    finally:
        first.stop()
    mailbox.poll()
    # THEN the session checkpoints on the notice and stops; no step is lost
    msgs = mailbox.of(1)
    assert code == 0, first.log()
    preempted = msgs[-1].body
    assert isinstance(preempted, AgentPreempted), mailbox.kinds(1)
    assert preempted.notice == "spot-interruption"
    assert preempted.checkpoint_step is not None and 10 <= preempted.checkpoint_step < steps
    assert preempted.step == preempted.checkpoint_step  # zero lost work
    notice_ckpt = [m.body for m in msgs if isinstance(m.body, AgentCheckpoint)]
    assert [(c.step, c.reason) for c in notice_ckpt] == [(preempted.checkpoint_step, "notice")]
    handoff = get_json(s3, bucket, layout.handoff_key(sub.job_id, 1))
    assert handoff["checkpoint_step"] == preempted.checkpoint_step
    assert handoff["manifest_key"] == notice_ckpt[0].manifest_key

    # WHEN attempt 2 starts on a new instance, told to await attempt 1's handoff
    second = stage.boot(sub.job_id, 2, await_handoff=1)
    try:
        code = second.wait(60)
    finally:
        second.stop()
    mailbox.poll()
    # THEN it restores exactly that checkpoint and finishes with the uninterrupted result
    msgs = mailbox.of(2)
    assert code == 0, second.log()
    started, done = msgs[0].body, msgs[-1].body
    assert isinstance(started, AgentStarted) and isinstance(done, AgentCompleted)
    assert started.restored_step == preempted.checkpoint_step
    assert started.restored_manifest == notice_ckpt[0].manifest_key
    # The handoff marker was there: no waiting (setup_seconds now includes the warm start).
    waited = re.search(r"handoff from attempt 1: found after ([0-9.]+)s", second.log())
    assert waited is not None and float(waited.group(1)) < 1.0, second.log()
    result = get_json(s3, bucket, done.outputs_prefix + "result.json")
    assert result["resumed_from"] == preempted.checkpoint_step and result["attempt"] == 2
    assert result["total"] == sum(range(1, steps + 1))


def test_a_session_that_ignores_the_notice_is_stopped_before_the_instance_goes(
    stage: Stage,
) -> None:
    sub = submit_job(
        stage.s3,
        stage.bucket,
        hyperparameters={
            "steps": 100_000,
            "sleep": 0.01,
            "checkpoint_every": 20,
            "ignore_notice": True,
        },
    )
    agent = stage.boot(sub.job_id, 1)
    try:
        stage.mailbox.wait_for(lambda m: isinstance(m.body, AgentCheckpoint), timeout=30)
        # A notice with two seconds to go: the agent stops the session after 1.5 s.
        agent.imds.schedule_interruption("terminate", datetime.now(UTC) + timedelta(seconds=2))
        code = agent.wait(30)
    finally:
        agent.stop()
    stage.mailbox.poll()
    assert code == 0, agent.log()
    preempted = stage.mailbox.of(1)[-1].body
    assert isinstance(preempted, AgentPreempted), stage.mailbox.kinds(1)
    # Only periodic checkpoints exist; whatever came after the last one is reported as lost.
    assert preempted.checkpoint_step is not None and preempted.checkpoint_step % 20 == 0
    assert preempted.step is not None and preempted.step >= preempted.checkpoint_step
    assert exists(stage.s3, stage.bucket, layout.handoff_key(sub.job_id, 1))
    # The session was stopped by the agent, on its schedule: told of the notice, then (it
    # ignored it) SIGTERM at the agent's deadline, which it ignored too, then SIGKILL. The
    # order of the agent's own log says so on any machine; how many seconds each step took
    # on a loaded one is not the point (agent.wait bounds the whole).
    log = agent.log()
    steps = [
        "IMDS: spot terminate",
        "told the session",
        "the session ignored the notice; stopping it",
        "session ended: killed by SIGKILL",
    ]
    assert all(step in log for step in steps), log
    times = [logged_at(log, step) for step in steps]
    assert times == sorted(times), log


def test_a_rebalance_recommendation_checkpoints_without_stopping(stage: Stage) -> None:
    s3, bucket, mailbox = stage.s3, stage.bucket, stage.mailbox
    # 5,000 steps of 0.02 s (100 s): the recommendation, sent once step 5 is reported,
    # reaches the session long before its end however loaded the machine; once it has taken
    # the requested checkpoint the session finishes without sleeping.
    steps = 5_000
    sub = submit_job(
        s3,
        bucket,
        hyperparameters={
            "steps": steps,
            "sleep": 0.02,
            "checkpoint_every": 100_000,
            "fast_after_requested_checkpoint": True,
        },
    )
    agent = stage.boot(sub.job_id, 1)
    try:
        mailbox.wait_for(
            lambda m: isinstance(m.body, AgentProgress) and (m.body.step or 0) >= 5, timeout=30
        )
        agent.imds.recommend_rebalance()
        code = agent.wait(60)
    finally:
        agent.stop()
    mailbox.poll()
    assert code == 0, agent.log()
    bodies = [m.body for m in mailbox.of(1)]
    checkpoints = [b for b in bodies if isinstance(b, AgentCheckpoint)]
    assert len(checkpoints) == 1 and checkpoints[0].reason == "notice"
    assert 5 <= checkpoints[0].step < steps
    assert isinstance(bodies[-1], AgentCompleted) and bodies[-1].step == steps


def test_a_session_that_raises_fails_the_attempt_with_its_traceback(stage: Stage) -> None:
    s3, bucket, mailbox = stage.s3, stage.bucket, stage.mailbox
    sub = submit_job(s3, bucket, hyperparameters={"steps": 50, "checkpoint_every": 3, "fail_at": 7})
    agent = stage.boot(sub.job_id, 1)
    try:
        code = agent.wait(60)
    finally:
        agent.stop()
    mailbox.poll()
    assert code == 1, agent.log()
    failed = mailbox.of(1)[-1].body
    assert isinstance(failed, AgentFailed), mailbox.kinds(1)
    assert failed.reason == "the session raised ValueError: boom at step 7"
    assert failed.exit_code == 1 and failed.step == 6
    assert "Traceback (most recent call last):" in failed.log_tail
    assert any('raise ValueError(f"boom at step {step}")' in line for line in failed.log_tail)
    assert failed.log_tail[-1] == "ValueError: boom at step 7"
    # The checkpoint taken before the crash is in S3 all the same.
    assert any(isinstance(m.body, AgentCheckpoint) and m.body.step == 6 for m in mailbox.of(1))
    # AND what the session left in output_dir, for `respot pull` of a FAILED job
    outputs = get_json(s3, bucket, layout.outputs_manifest_key(sub.job_id))
    assert outputs["outcome"] == "failed"
    assert [f["path"] for f in outputs["files"]] == ["partial.txt"]


def test_a_missing_submission_fails_setup_and_says_why(stage: Stage) -> None:
    mailbox = stage.mailbox
    # No region in the environment either: the agent takes the instance's from IMDS.
    agent = stage.boot("no-such-job", 1, without=("AWS_REGION", "AWS_DEFAULT_REGION"))
    try:
        code = agent.wait(60)
    finally:
        agent.stop()
    mailbox.poll()
    assert code == 1
    [failed] = [m.body for m in mailbox.of(1)]
    assert isinstance(failed, AgentFailed)
    assert failed.reason.startswith("setup failed: cannot read the submission")


def test_a_session_process_that_lingers_after_train_returns_still_completes(
    stage: Stage, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The agent in this process (to shorten its 30 s grace), with a real child and IMDS.
    from infra.local.imds import ImdsServer
    from respot.agent import runner, trainloop
    from respot.agent.config import AgentConfig
    from respot.agent.imds import ImdsClient

    monkeypatch.setattr(trainloop, "EXIT_GRACE_SECONDS", 0.5)
    sub = submit_job(stage.s3, stage.bucket, hyperparameters={}, entry_point=LINGERING)
    imds = ImdsServer(
        instance_id="i-0lingering0000000",
        instance_type="g5.xlarge",
        availability_zone="us-east-1a",
        tags={"respot:job-id": sub.job_id, "respot:attempt": "1"},
    ).start()
    config = AgentConfig(
        bucket=stage.bucket,
        agent_queue_url=stage.queue_url,
        region="us-east-1",
        imds_endpoint=imds.url,
        work_dir=stage.work / "inproc",
        heartbeat_seconds=0.5,
        imds_poll_seconds=0.1,
    )
    sqs = stage.mailbox.sqs
    try:
        with caplog.at_level(logging.INFO, logger="respot.agent"):
            result = runner.Agent(config, s3=stage.s3, sqs=sqs, imds=ImdsClient(imds.url)).run()
    finally:
        imds.stop()
    stage.mailbox.poll()
    assert result.outcome == "completed", result
    assert isinstance(stage.mailbox.of(1)[-1].body, AgentCompleted)
    # it was the agent's grace that ended the lingering process, not the process itself
    assert "train() returned but the process does not exit; stopping it" in caplog.text


def test_secrets_reach_the_session_and_nothing_else(stage: Stage) -> None:
    # GIVEN a Secrets Manager secret and a job that names it by ARN
    import boto3

    client = boto3.client("secretsmanager", endpoint_url=stage.moto_url, region_name="us-east-1")
    arn = client.create_secret(
        Name=f"respot/jobs/token-{time.time_ns()}", SecretString="s3cr3t; $(id)"
    )["ARN"]
    sub = submit_job(
        stage.s3,
        stage.bucket,
        hyperparameters={"steps": 3, "checkpoint_every": 10, "echo_env": ["API_TOKEN"]},
        secrets={"API_TOKEN": arn},
    )
    # WHEN the agent runs it
    agent = stage.boot(sub.job_id, 1)
    try:
        code = agent.wait(60)
    finally:
        agent.stop()
    # THEN the session saw the value, byte for byte
    assert code == 0, agent.log()
    echoed = get_json(stage.s3, stage.bucket, layout.outputs_prefix(sub.job_id) + "env.json")
    assert echoed["API_TOKEN"] == "s3cr3t; $(id)"
    # AND the stored submission and the agent's own log hold only the reference
    stored = stage.s3.get_object(Bucket=stage.bucket, Key=layout.submission_key(sub.job_id))
    assert b"s3cr3t" not in stored["Body"].read()
    assert "s3cr3t" not in agent.log()


def test_a_notebook_whose_cell_raises_fails_and_leaves_its_executed_copy(stage: Stage) -> None:
    s3, bucket, mailbox = stage.s3, stage.bucket, stage.mailbox
    # GIVEN a notebook job (Papermill on the instance) whose third cell raises at step 3
    sub = submit_job(s3, bucket, hyperparameters={"fail_at": 3}, entry_point="failing.ipynb")
    agent = stage.boot(sub.job_id, 1)
    try:
        code = agent.wait(240)
    finally:
        agent.stop()
    mailbox.poll()
    # THEN the attempt fails naming the cell and the error, with the reports it made
    assert code == 1, agent.log()
    failed = mailbox.of(1)[-1].body
    assert isinstance(failed, AgentFailed), mailbox.kinds(1)
    # In [4]: papermill runs its injected-parameters cell after the parameters cell
    assert "the cell In [4] raised ValueError: boom at step 3" in failed.reason
    assert any(isinstance(m.body, AgentProgress) and m.body.step for m in mailbox.of(1))
    # AND the executed notebook (the traceback in it) and what the cells wrote are the
    # job's outputs, for `respot pull` of the FAILED job
    outputs = get_json(s3, bucket, layout.outputs_manifest_key(sub.job_id))
    assert outputs["outcome"] == "failed"
    assert {f["path"] for f in outputs["files"]} == {"failing.ipynb", "partial.txt"}
    executed = get_json(s3, bucket, layout.outputs_prefix(sub.job_id) + "failing.ipynb")
    errors = [o for c in executed["cells"] for o in c.get("outputs", []) if o.get("ename")]
    assert [(e["ename"], e["evalue"]) for e in errors] == [("ValueError", "boom at step 3")]
    assert "never reached" not in json.dumps(executed["cells"][-1].get("outputs", []))
