"""One job-id rule (respot.spec.jobid) guards every place an id becomes a key, path or message."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from respot.agent.process import AttemptDirs
from respot.client.deployment import Deployment
from respot.client.handle import JobHandle, run
from respot.exceptions import RespotError, SpecError
from respot.spec.jobid import InvalidJobIdError, check_job_id, is_job_id
from respot.storage import layout
from respot.wire.messages import AgentMessage, AgentProgress, CancelCommand, new_job_id

HOSTILE_IDS = [
    "",
    " ",
    " job-1",
    "job-1 ",
    "job-1\n",
    "\njob-1",
    "job\x00",
    "..",
    "../../x",  # hostile-path
    "a/../../b",  # hostile-path
    "/etc/passwd",
    "jobs/other",
    "a\\b",
    "Job-1",
    "job.1",
    "-job",
    "job_1",
    "jöb",
    "\uff4a\uff4f\uff42",  # full-width letters
    "a" * 101,
    "job;rm -rf /",
    "$(id)",
]


@pytest.mark.parametrize("job_id", HOSTILE_IDS)
def test_hostile_ids_are_refused_everywhere(job_id: str, tmp_path: Path) -> None:
    assert not is_job_id(job_id)
    with pytest.raises(InvalidJobIdError, match=r"is not a job id|is text"):
        check_job_id(job_id)
    with pytest.raises(InvalidJobIdError):
        layout.job_prefix(job_id)
    with pytest.raises(InvalidJobIdError):
        layout.submission_key(job_id)
    with pytest.raises(InvalidJobIdError):
        AttemptDirs.of(tmp_path / "work", job_id, 1)
    with pytest.raises(ValidationError, match="job_id"):
        CancelCommand(job_id=job_id, requested_at=datetime.now(UTC))
    with pytest.raises(ValidationError, match="job_id"):
        AgentMessage(
            job_id=job_id,
            attempt=1,
            instance_id="i-1",
            seq=0,
            sent_at=datetime.now(UTC),
            body=AgentProgress(),
        )
    with pytest.raises(InvalidJobIdError):
        JobHandle(job_id, _deployment())
    assert isinstance(InvalidJobIdError("x"), RespotError)  # the CLI prints it, no traceback


@pytest.mark.parametrize("job_id", ["j", "job-1", "digits-20261123164200-a1b2c3", "a" * 100])
def test_plain_ids_pass(job_id: str, tmp_path: Path) -> None:
    assert check_job_id(job_id) == job_id
    assert layout.job_prefix(job_id) == f"jobs/{job_id}/"
    dirs = AttemptDirs.of(tmp_path, job_id, 3)
    assert dirs.root == tmp_path / job_id / "0003"


@pytest.mark.parametrize(
    "name", ["digits", "A.B_c-d", "x" * 64, "Ünïcode-free", "..", "__init__", "9-lives"]
)
def test_generated_ids_are_always_valid(name: str) -> None:
    assert is_job_id(new_job_id(name))


def test_run_refuses_a_bad_job_id_before_anything_is_sent() -> None:
    calls: list[str] = []

    class Recording:
        def __getattr__(self, name: str) -> Any:
            calls.append(name)
            raise AssertionError(f"{name} called")

    with pytest.raises(SpecError, match=r"job_id: '\.\./x' is not a job id"):
        run(
            {"name": "x", "entry_point": "a.b:C"},
            deployment=_deployment(),
            session=Recording(),
            job_id="../x",  # hostile-path
        )
    assert calls == []


def _deployment() -> Deployment:
    return Deployment(
        topic_arn="arn:aws:sns:us-east-1:123456789012:t",
        table_name="t",
        bucket="b",
        region="us-east-1",
        stack="test",
    )
