"""What a researcher reads: each text the local-runtime tour found wrong, as it must read now."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from respot.cli import app, jobs, observe
from respot.cli.jobs import render_status
from respot.core.events import AgentReport, CancelRequested, InterruptionNotice
from respot.core.job import JobRecord
from respot.core.lifecycle.progress import CHECKPOINT_NOTES_KEPT
from respot.spec.jobfile import JobFileError, load_job_file
from respot.wire.messages import (
    AgentCheckpoint,
    AgentFailed,
    AgentPreempted,
    AgentProgress,
    CancelCommand,
)
from tests.core.factories import T0, agent
from tests.core.test_lifecycle import started_job

ROOT = Path(__file__).resolve().parents[2]


def fake_connection(monkeypatch: pytest.MonkeyPatch, record: JobRecord | None) -> None:
    """The CLI's deployment replaced by one that knows `record` (and nothing else)."""
    conn = SimpleNamespace(
        record=lambda job_id: record,
        recent=lambda limit: [record] if record else [],
        deployment=None,
        session=None,
        local=True,
        handle=lambda job_id: None,
    )
    for module in (jobs, observe):
        monkeypatch.setattr(module, "connect", lambda local: conn)


def failed_at_step_10() -> JobRecord:
    """Heartbeats told step 5; the session then raised at step 10 (its report says so)."""
    d = started_job()
    assert d.job is not None
    d.apply(AgentReport(agent(d.job, 1, "i-1", AgentProgress(step=5), seq=2, sent=4)), 4)
    failed = AgentFailed(reason="the session raised ValueError: boom", step=10, log_tail=["x"])
    d.apply(AgentReport(agent(d.job, 1, "i-1", failed, seq=3, sent=5)), 5)
    assert d.job is not None
    return d.job


def test_status_of_a_job_that_failed_at_step_10_says_step_10() -> None:
    record = failed_at_step_10()
    buffer = io.StringIO()
    render_status(record, Console(file=buffer, width=200), datetime.now(UTC))
    text = buffer.getvalue()
    assert "progress    step 10 " in text, text
    assert "step -" not in text


def test_no_note_reads_at_step_none() -> None:
    # GIVEN a job interrupted before it reported any step or saved any checkpoint
    d = started_job()
    assert d.job is not None
    d.apply(InterruptionNotice("i-1", 1, "interruption", "terminate"), 4)
    stopped = AgentPreempted(step=None, checkpoint_step=None, notice="spot-interruption")
    d.apply(AgentReport(agent(d.job, 1, "i-1", stopped, seq=2, sent=5)), 5)
    assert d.job is not None
    texts = [e.text for e in d.job.timeline]
    # THEN its notes say what is known, never "None"
    assert not [t for t in texts if "None" in t], texts
    assert any("before its first reported step" in t for t in texts), texts
    assert any("no checkpoint yet" in t for t in texts), texts


def test_a_cancel_names_who_once() -> None:
    d = started_job()
    cmd = CancelCommand(job_id="job-1", requested_at=T0, requested_by="arn:aws:iam::1:user/ana")
    d.apply(CancelRequested(cmd), 5)
    assert d.job is not None
    assert d.job.reason == "cancelled by arn:aws:iam::1:user/ana"
    own = CancelCommand(job_id="job-1", requested_at=T0, reason="loss diverged", requested_by="b")
    other = started_job()
    other.apply(CancelRequested(own), 5)
    assert other.job is not None and other.job.reason == "loss diverged by b"


def test_logs_of_a_job_whose_environment_failed_show_why(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a job whose environment could not be built: the session never printed a line
    d = started_job()
    assert d.job is not None
    pip = ["ERROR: No matching distribution found for torchh==9.9"]
    failed = AgentFailed(
        reason="job environment: pip install failed", log_tail=pip, stage="environment"
    )
    d.apply(AgentReport(agent(d.job, 1, "i-1", failed, seq=2, sent=4)), 4)
    fake_connection(monkeypatch, d.job)

    class NoStreams:
        warnings: list[str] = []

        def __init__(self, *args: Any) -> None:
            pass

        def read(self, record: Any) -> Iterator[Any]:
            return iter([])

    monkeypatch.setattr("respot.client.logs.JobLogs", NoStreams)
    result = CliRunner().invoke(app, ["logs", "job-1"])
    # THEN `respot logs` says why, with the lines the failure report carried
    assert result.exit_code == 0, result.output
    assert "the job failed: job environment: pip install failed" in result.stdout
    assert "No matching distribution found for torchh==9.9" in result.stdout


def test_ls_live_with_nothing_live_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_connection(monkeypatch, failed_at_step_10())  # one job, over
    result = CliRunner().invoke(app, ["ls", "--live"])
    assert result.exit_code == 0, result.output
    assert "no live jobs" in result.stdout and "no jobs yet" not in result.stdout


def test_the_local_runtime_prints_no_node_banner() -> None:
    # The runtime synthesizes the stack with CDK; jsii's Node banner came out as Python bytes.
    env = {k: v for k, v in os.environ.items() if not k.startswith("JSII_SILENCE")}
    code = "import infra.local.runtime, aws_cdk; aws_cdk.App(); print('ready')"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "b'!!" not in done.stderr and "end-of-life" not in done.stderr, done.stderr


def test_a_rule_between_fields_names_the_overrides_that_broke_it(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: a\nentry_point: a.b:C\n")
    with pytest.raises(JobFileError) as info:
        load_job_file(job, ["max_runtime=1h", "seed=3", "estimated_runtime=5h"])
    (line,) = info.value.problems
    assert line.startswith("--set max_runtime=1h, --set estimated_runtime=5h: "), line
    assert "seed" not in line.split(": ")[0]


def test_the_timeline_says_it_keeps_only_the_newest_periodic_checkpoints(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    d = started_job()
    assert d.job is not None
    for n, step in enumerate(range(10, 60, 10), start=2):  # five periodic checkpoints
        body = AgentCheckpoint(
            step=step, manifest_key=f"m/{step}", size_bytes=1, uploaded_bytes=1, upload_seconds=0.1
        )
        d.apply(AgentReport(agent(d.job, 1, "i-1", body, seq=n, sent=3 + n)), 3 + n)
    assert d.job is not None
    kept = [e for e in d.job.timeline if e.kind == "checkpoint"]
    assert len(kept) == CHECKPOINT_NOTES_KEPT
    fake_connection(monkeypatch, d.job)
    result = CliRunner().invoke(app, ["timeline", "job-1"])
    assert result.exit_code == 0, result.output
    assert f"only the newest {CHECKPOINT_NOTES_KEPT} periodic checkpoints" in result.stdout


def test_a_deployment_refusal_names_the_override(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from respot.client.deployment import Deployment

    # GIVEN a deployment that allows g5.xlarge only, and a job file overridden to ask for p5
    deployment = Deployment(
        topic_arn="arn:aws:sns:us-east-1:123456789012:t",
        table_name="t",
        bucket="b",
        region="us-east-1",
        instance_types=("g5.xlarge",),
    )
    conn = SimpleNamespace(deployment=deployment, session=None, local=True)
    monkeypatch.setattr(jobs, "connect", lambda local: conn)
    job = tmp_path / "job.yaml"
    job.write_text("name: a\nentry_point: a.b:C\n")
    override = "instance_types=[p5.48xlarge]"
    result = CliRunner().invoke(app, ["run", str(job), "--set", override])
    # THEN the refusal (made at submission, by the deployment) names the --set it concerns
    assert result.exit_code == 1
    assert f"--set {override}: instance_types: p5.48xlarge is not allowed" in result.stderr
