"""Tag keys are checked as EC2 checks them when tags are exposed in instance metadata.

respot's launch template sets `InstanceMetadataTags`, and EC2 then fails the launch of an
instance whose tag key holds a space, a '/', a non-ASCII letter, or is only '.', '..' or
'_index' ("Work with instance tags in instance metadata", EC2 User Guide). Each path a spec
arrives by refuses such a key before anything is spent, naming the field and the fix.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lambdas._commands import read_command
from lambdas._runtime import PoisonMessageError
from respot.cli import app
from respot.exceptions import SpecError
from respot.spec.jobfile import JobFileError, load_job_file
from respot.spec.training import TrainingEnvVar
from respot.wire.messages import JobSubmission

GOOD = {"name": "digits-mlp", "entry_point": "digits.train:DigitsSession"}
BAD_KEYS = ["my team", "team/vision", "équipe", "Größe", "\u00a0x", ".", "..", "_index", "a*b"]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_the_sdk_refuses_a_key_imds_cannot_hold(key: str) -> None:
    with pytest.raises(SpecError) as info:
        TrainingEnvVar(**GOOD, tags={key: "x"})
    (line,) = info.value.problems
    assert line.startswith("tags: "), line
    assert "instance metadata" in line and "rename it" in line, line


@pytest.mark.parametrize(
    "key", ["team", "Team-1", "a+b=c.d,e_f:g@h", "cost:center", "x" * 128, "...", "_index2"]
)
def test_keys_ec2_accepts_in_imds_pass(key: str) -> None:
    assert TrainingEnvVar(**GOOD, tags={key: "value with spaces / and é"}).tags[key]


def test_the_fix_suggests_a_key_that_passes() -> None:
    with pytest.raises(SpecError) as info:
        TrainingEnvVar(**GOOD, tags={"my team/vision": "x"})
    (line,) = info.value.problems
    assert "e.g. 'my_team_vision'" in line
    assert TrainingEnvVar(**GOOD, tags={"my_team_vision": "x"})


def test_a_job_file_names_the_line_of_the_tag(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: a\nentry_point: a.b:C\ntags:\n  my team: vision\n")
    with pytest.raises(JobFileError) as info:
        load_job_file(job)
    (line,) = info.value.problems
    assert line.startswith(f"{job}:4: tags.my team: tag key 'my team' would fail"), line


def test_cli_set_names_the_override(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: a\nentry_point: a.b:C\n")
    result = CliRunner().invoke(app, ["run", str(job), "--check", "--set", "tags.a/b=x"])
    assert result.exit_code == 1
    assert "--set tags.a/b=x: tags.a/b: tag key 'a/b' would fail the launch" in result.stderr
    assert "Traceback" not in result.output


def test_a_raw_submit_message_is_refused_with_the_field() -> None:
    # GIVEN a submission written by hand (not through the SDK) inside an SNS envelope
    message = {
        "command": "submit",
        "job_id": "j-1",
        "spec": {**GOOD, "tags": {"team name": "x"}},
        "submitted_at": datetime.now(UTC).isoformat(),
    }
    body = json.dumps({"Type": "Notification", "MessageId": "m-1", "Message": json.dumps(message)})
    # THEN the commands Lambda's reader refuses it as poison, naming the field and the fix
    with pytest.raises(PoisonMessageError) as info:
        read_command(body, JobSubmission)
    assert "spec.tags: tag key 'team name' would fail the launch" in str(info.value)
    assert "rename it" in str(info.value)
