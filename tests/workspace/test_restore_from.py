"""`restore_from:` (how `respot notebook start` continues a stopped workspace): the control
plane copies the named job's newest checkpoint into the new job's prefix before the first
launch, only for the same verified submitter and only from a finished job."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from pathlib import Path

from respot.core.states import JobState
from respot.spec.training import TrainingEnvVar
from respot.storage.checkpoints import CheckpointStore
from respot.wire.messages import JobSubmission
from tests.handlers.test_handlers import Env, env
from tests.security.test_identity import Person, person
from tests.security.test_ownership import cancel_cmd, publish, verified

__all__ = ["env", "verified"]  # the fixtures, imported for pytest


def submit(env: Env, who: Person, endpoint: str, restore_from: str | None = None) -> str:
    job_id = f"nb-{secrets.token_hex(4)}"
    spec = TrainingEnvVar(
        name="nb", command=["python", "-m", "respot.workspace.serve"], restore_from=restore_from
    )
    sub = JobSubmission(job_id=job_id, spec=spec, submitted_at=datetime.now(UTC))
    assert publish(env, sub, who, endpoint) == {"batchItemFailures": []}
    return job_id


def store(env: Env, job_id: str) -> CheckpointStore:
    return CheckpointStore(bucket=env.local.bucket, job_id=job_id, client=env.clients["s3"])


def stopped_workspace(env: Env, alice: Person, endpoint: str, tmp_path: Path) -> str:
    """Alice's workspace job with one checkpoint (a notebook), then stopped."""
    first = submit(env, alice, endpoint)
    files = tmp_path / "ws"
    files.mkdir()
    (files / "analysis.ipynb").write_text('{"cells": []}')
    store(env, first).upload(files, step=7, attempt=1, reason="periodic")
    publish(env, cancel_cmd(first), alice, endpoint)
    assert env.control.jobs.get(first).state is JobState.CANCELLED  # type: ignore[union-attr]
    return first


def test_the_owner_continues_from_the_stopped_jobs_checkpoint(
    verified: Env, moto_endpoint: str, tmp_path: Path
) -> None:
    alice = person(moto_endpoint, "alice")
    first = stopped_workspace(verified, alice, moto_endpoint, tmp_path)
    second = submit(verified, alice, moto_endpoint, restore_from=first)
    record = verified.control.jobs.get(second)
    assert record is not None and record.state is not JobState.FAILED, record.reason
    restored = store(verified, second).restore(tmp_path / "restored")
    assert restored is not None and restored.step == 7 and restored.job_id == second
    assert (tmp_path / "restored" / "analysis.ipynb").read_text() == '{"cells": []}'


def test_another_persons_job_is_refused_and_nothing_is_copied(
    verified: Env, moto_endpoint: str, tmp_path: Path
) -> None:
    alice, mallory = person(moto_endpoint, "alice"), person(moto_endpoint, "mallory")
    first = stopped_workspace(verified, alice, moto_endpoint, tmp_path)
    theirs = submit(verified, mallory, moto_endpoint, restore_from=first)
    record = verified.control.jobs.get(theirs)
    assert record is not None and record.state is JobState.FAILED
    assert f"restore_from: job {first} is not yours" in (record.reason or "")
    assert store(verified, theirs).manifest_keys() == []  # alice's notebook never left her prefix
    assert verified.live_instances(theirs) == []


def test_a_running_job_is_refused(verified: Env, moto_endpoint: str) -> None:
    alice = person(moto_endpoint, "alice")
    running = submit(verified, alice, moto_endpoint)
    second = submit(verified, alice, moto_endpoint, restore_from=running)
    record = verified.control.jobs.get(second)
    assert record is not None and record.state is JobState.FAILED
    assert "is still" in (record.reason or "") and "respot cancel" in (record.reason or "")
