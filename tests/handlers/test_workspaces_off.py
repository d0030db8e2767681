"""The stack setting `workspaces: false` at the control plane: a workspace's submission that
never went through `respot notebook start` (a raw message, an older SDK) is refused by the
commands function before launch: a FAILED job of its verified submitter whose reason names
the setting, nothing launched. Other jobs, and workspaces where the setting is on, go on."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from pathlib import Path

import pytest

from lambdas._commands import Home
from respot.core.states import JobState
from respot.wire.messages import JobSubmission
from respot.workspace import names
from respot.workspace.spec import workspace_spec
from tests.handlers.test_handlers import Env, env
from tests.handlers.test_refused_submissions import deliver, failed, job_submission, signed_body
from tests.security.test_hostile_handlers import reasons
from tests.security.test_identity import person
from tests.security.test_ownership import verified

__all__ = ["env", "verified"]


def workspace_submission(job_id: str, tmp_path: Path) -> JobSubmission:
    spec = workspace_spec("nlp", job_id=job_id, bucket="jobs-bucket", source_dir=tmp_path)
    return JobSubmission(job_id=job_id, spec=spec, submitted_at=datetime.now(UTC))


def test_a_raw_workspace_submission_is_refused_naming_the_setting(
    verified: Env, moto_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(names.ENV_WORKSPACES_SETTING, "false")  # the stack's `workspaces: false`
    alice = person(moto_endpoint, "alice")
    job_id = f"nb-nlp-{secrets.token_hex(4)}"
    sub = workspace_submission(job_id, tmp_path)
    assert deliver(verified, signed_body(verified, sub, alice, moto_endpoint)) == {
        "batchItemFailures": []
    }
    record = failed(verified, job_id)
    assert record.submission.submitted_by == alice.arn
    assert record.reason is not None and "command: workspaces are off" in record.reason
    assert "`workspaces: false`" in record.reason
    assert record.attempts == [] and verified.instances(job_id) == []  # nothing launched
    assert reasons(verified) == []
    # ... while a plain job under the same setting goes on as before
    other = f"job-{secrets.token_hex(4)}"
    deliver(verified, signed_body(verified, job_submission(other), alice, moto_endpoint))
    plain = verified.control.jobs.get(other)
    assert plain is not None and plain.state is not JobState.FAILED, plain.reason


def test_the_supervisor_without_the_tag_is_a_workspace_too(tmp_path: Path) -> None:
    spec = workspace_submission("nb-nlp-0001", tmp_path).spec
    off = Home("us-east-1", "123456789012", workspaces=False)
    untagged = spec.model_copy(update={"tags": {}})
    tagged_only = spec.model_copy(update={"command": ["python", "train.py"]})
    for each in (spec, untagged, tagged_only):
        assert [p for p in off.refused(each) if names.WORKSPACES_OFF in p], each
    on = Home("us-east-1", "123456789012")
    assert not [p for p in on.refused(spec) if names.WORKSPACES_OFF in p]


def test_the_setting_is_read_from_the_functions_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for value, expected in (("false", False), ("true", True), ("", True)):
        monkeypatch.setenv(names.ENV_WORKSPACES_SETTING, value)
        assert Home.of(None).workspaces is expected
    monkeypatch.delenv(names.ENV_WORKSPACES_SETTING)
    assert Home.of(None).workspaces is True  # a stack before the setting: on
