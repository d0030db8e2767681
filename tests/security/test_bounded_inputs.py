"""Inputs bounded on every path they arrive by (issue 24, items 6-10): the SDK and job files
refuse them naming the field and the fix; the commands function dead-letters them raw with
that reason, without failing the rest of the batch; the agent checks again where it matters.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lambdas import commands
from respot.agent.environment import EnvironmentBuildError, job_requirements
from respot.exceptions import SpecError
from respot.spec.jobfile import JobFileError, load_job_file
from respot.spec.requirements import RequirementsError, check_requirement, parse_requirements
from respot.spec.training import TrainingEnvVar, validate_spec
from tests.handlers.test_handlers import CONTEXT, Env
from tests.security.test_hostile_handlers import raw_submission, reasons

BASE = {"name": "x", "entry_point": "a.b:C"}

# ---- item 6: a requirement is one line pip reads as a requirement, never an option ----------

SMUGGLED = [
    "six;\n--no-index",  # the reproduced one: pip read the option
    "six\r--index-url=https://evil.example/simple",
    "six\x0c--no-index",  # a form feed: str.splitlines (and so pip) splits there too
    "six\u2028--no-index",
    "six\x85--no-index",
    "six\x00",
]


@pytest.mark.parametrize("line", SMUGGLED)
def test_a_requirement_with_a_line_break_or_control_character_is_refused(line: str) -> None:
    with pytest.raises(RequirementsError, match="one requirement per line"):
        check_requirement(line)
    # AND through the spec (SDK, job files, CLI, raw messages all validate it): named
    with pytest.raises(SpecError) as err:
        validate_spec({**BASE, "requirements": [line]})
    assert any(p.startswith("requirements") for p in err.value.problems), err.value.problems


def test_a_requirements_file_line_that_is_an_option_is_refused_wherever_it_is_split() -> None:
    for text in ("six\n--no-index\n", "six\x0c--no-index\n", "six\u2028-e .\n"):
        with pytest.raises(RequirementsError, match="pip options are not accepted"):
            parse_requirements(text)


def test_a_smuggled_requirement_in_a_job_file_or_a_set_names_where_it_came_from(
    tmp_path: Path,
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text('name: x\nentry_point: a.b:C\nrequirements: ["six;\\n--no-index"]\n')
    with pytest.raises(JobFileError) as err:
        load_job_file(job)
    assert any("job.yaml:3: requirements" in p for p in err.value.problems), err.value.problems
    job.write_text("name: x\nentry_point: a.b:C\n")
    with pytest.raises(JobFileError) as err:
        load_job_file(job, overrides=['requirements=["six;\\n--no-index"]'])
    assert any(p.startswith("--set requirements=") for p in err.value.problems), err.value.problems


def test_a_raw_submission_with_a_smuggled_requirement_is_dead_lettered(env: Env) -> None:
    bad = env.sns_envelope(
        raw_submission("job-req", spec={**BASE, "requirements": ["six;\n--no-index"]}), "submit"
    )
    good = env.sns_envelope(raw_submission("job-fine"), "submit")
    response = commands.handler(env.sqs_event(bad, good), CONTEXT)
    assert response == {"batchItemFailures": []}
    (reason,) = reasons(env)
    assert "requirements" in reason and "one requirement per line" in reason, reason
    assert env.control.jobs.get("job-req") is None
    assert env.control.jobs.get("job-fine") is not None


def test_the_agent_checks_the_requirements_again_before_pip(tmp_path: Path) -> None:
    # A spec that skipped validation (defense in depth: the agent is the last gate to pip).
    spec = TrainingEnvVar.model_construct(**BASE, requirements=["six;\n--no-index"])
    with pytest.raises(EnvironmentBuildError, match="one requirement per line"):
        job_requirements(spec, tmp_path)
    fine = TrainingEnvVar.model_construct(**BASE, requirements=["six==1.16.0"])
    assert job_requirements(fine, tmp_path) == ["six==1.16.0"]
    assert json.dumps(job_requirements(fine, tmp_path))  # plain lines


# ---- item 5: no credentials in a recorded URL ----------------------------------------------


@pytest.mark.parametrize(
    ("remote", "recorded"),
    [
        ("https://user:TOKEN@host/repo.git", "https://host/repo.git"),
        ("https://TOKEN@github.com/org/repo.git", "https://github.com/org/repo.git"),
        ("https://gitlab.com/org/repo.git?private_token=TOKEN", "https://gitlab.com/org/repo.git"),
        ("ssh://git:TOKEN@host:2222/org/repo.git", "ssh://host:2222/org/repo.git"),
        ("TOKEN@github.com:org/repo.git", "github.com:org/repo.git"),
        ("https://u:TOKEN@[::1]:8080/r.git#TOKEN", "https://[::1]:8080/r.git"),
        ("https://github.com/org/repo.git", "https://github.com/org/repo.git"),
        ("/home/alice/repo", "/home/alice/repo"),
    ],
)
def test_a_recorded_remote_keeps_no_credentials(remote: str, recorded: str) -> None:
    from respot.wire.messages import Provenance

    assert Provenance(git_remote=remote).git_remote == recorded
    # AND read back from JSON (a raw message, a record written before this fix) as well
    raw = json.dumps({"git_remote": remote})
    assert Provenance.model_validate_json(raw).git_remote == recorded


def test_the_sdk_records_a_tokened_remote_without_the_token(tmp_path: Path) -> None:
    import subprocess

    from respot.client.handle import capture_provenance

    git = ["git", "-C", str(tmp_path), "-c", "user.email=a@b", "-c", "user.name=a"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "train.py").write_text("x = 1\n")
    subprocess.run([*git, "add", "train.py"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "c"], check=True)
    remote = "https://alice:ghp_SECRETTOKEN@github.com/org/repo.git"
    subprocess.run([*git, "remote", "add", "origin", remote], check=True)
    spec = TrainingEnvVar(**BASE, source_dir=str(tmp_path))
    provenance = capture_provenance(spec)
    assert provenance.git_remote == "https://github.com/org/repo.git"
    assert "SECRETTOKEN" not in provenance.model_dump_json()


def test_a_raw_submission_with_a_tokened_remote_is_recorded_without_it(env: Env) -> None:
    body = env.sns_envelope(
        raw_submission(
            "job-remote", provenance={"git_remote": "https://bob:SECRETTOKEN@host/r.git"}
        ),
        "submit",
    )
    commands.handler(env.sqs_event(body), CONTEXT)
    record = env.control.jobs.get("job-remote")
    assert record is not None and record.submission.provenance is not None
    assert record.submission.provenance.git_remote == "https://host/r.git"
    item = env.clients["dynamodb"].get_item(
        TableName=env.local.table_name, Key={"pk": {"S": "JOB#job-remote"}, "sk": {"S": "JOB"}}
    )
    assert item.get("Item") and "SECRETTOKEN" not in json.dumps(item)


# ---- item 8: free text that reaches a record is bounded, so a cancel always lands -----------


def test_a_cancel_with_a_150_kb_reason_cancels_the_job(env: Env) -> None:
    from respot.core.states import JobState
    from tests.handlers.test_handlers import submit_job

    job_id, _ = submit_job(env)
    # Raw, as a script (or an older SDK) would publish it: no laptop in between.
    cancel = json.dumps(
        {
            "command": "cancel",
            "job_id": job_id,
            "requested_at": "2026-11-26T00:00:00+00:00",
            "reason": "r" * 150_000,
        }
    )
    response = commands.handler(env.sqs_event(env.sns_envelope(cancel, "cancel")), CONTEXT)
    # THEN it lands on the first try: the job is cancelled, its instance terminated
    assert response == {"batchItemFailures": []}
    assert reasons(env) == []
    record = env.control.jobs.get(job_id)
    assert record is not None and record.state is JobState.CANCELLED
    assert env.live_instances(job_id) == []
    # AND the reason is kept, cut with a marker that says how much was cut
    assert record.reason is not None and "more characters cut by respot" in record.reason
    assert len(record.reason) < 2_500


def test_an_agent_failure_with_a_250_kb_reason_fails_the_job(env: Env) -> None:
    from datetime import UTC, datetime

    from lambdas import agent_events, spot_fulfillment
    from respot.core.states import JobState
    from tests.handlers.test_handlers import submit_job

    job_id, iid = submit_job(env)
    spot_fulfillment.handler(env.ec2_event("spot-request-fulfillment", iid), CONTEXT)
    failed = json.dumps(
        {
            "schema_version": 1,
            "job_id": job_id,
            "attempt": 1,
            "instance_id": iid,
            "seq": 1,
            "sent_at": datetime.now(UTC).isoformat(),
            "body": {
                "kind": "failed",
                "reason": "Traceback: " + "x" * 250_000,
                "log_tail": ["line " + "y" * 2_000] * 200,
                "stage": "session",
            },
        }
    )
    assert len(failed) > 250_000
    response = agent_events.handler(env.sqs_event(failed), CONTEXT)
    assert response == {"batchItemFailures": []}
    record = env.control.jobs.get(job_id)
    assert record is not None and record.state is JobState.FAILED
    assert record.reason is not None and record.reason.startswith("Traceback: xxx")
    assert "more characters cut by respot" in record.reason
    entry = next(e for e in record.timeline if e.kind == "failed")
    assert len(entry.data["log_tail"]) <= 50
    assert all(len(line) <= 500 for line in entry.data["log_tail"])


def test_the_record_write_itself_fits_a_record_to_dynamodb(env: Env) -> None:
    # The last gate: whatever built the record (a path that forgot to bound a text), the
    # write never exceeds DynamoDB's 400 KB item limit (moto enforces it as AWS does).
    from respot.aws.jobs import MAX_DOC_BYTES
    from respot.core.job import TimelineEntry
    from tests.handlers.test_handlers import submit_job

    job_id, _ = submit_job(env)
    record = env.control.jobs.get(job_id)
    assert record is not None
    huge = record.model_copy(deep=True)
    huge.reason = "z" * 300_000
    for i in range(40):
        huge.add_timeline(
            TimelineEntry(at=record.created_at, kind="note", text=f"{i}" + "t" * 20_000)
        )
    written = env.control.jobs.save(huge, expected_version=record.version)
    stored = env.control.jobs.get(job_id)
    assert stored is not None and stored.version == written.version
    assert len(stored.model_dump_json(exclude_none=True)) <= MAX_DOC_BYTES
    assert stored.reason is not None and stored.reason.startswith("zzz")
    assert "more characters cut by respot" in stored.reason
    assert stored.timeline[-1].text.startswith("39t")  # the newest entries are kept


def test_fitting_a_record_cuts_free_text_never_the_pools_an_attempt_tried() -> None:
    # `tried` is state, not text: placement skips the pools in it, so a record cut to fit
    # must not forget any (a job would try them again, round and round).
    from respot.aws.jobs import MAX_DOC_BYTES, fit_record
    from respot.core.events import Submitted
    from tests.core.factories import submission
    from tests.core.test_lifecycle import Driver

    placed = Driver()
    placed.apply(Submitted(submission()))  # queued, then placed: its first attempt
    record = placed.job
    assert record is not None and record.attempts
    tried = [f"spot:g5.xlarge:us-east-1{i}: InsufficientInstanceCapacity" for i in range(80)]
    record.attempts[-1].tried = list(tried)
    record.reason = "z" * (MAX_DOC_BYTES + 1)
    fitted = fit_record(record)
    assert len(fitted.model_dump_json(exclude_none=True).encode()) <= MAX_DOC_BYTES
    assert fitted.attempts[-1].tried == tried
    assert fitted.reason is not None and "more characters cut by respot" in fitted.reason


def test_every_free_text_model_from_outside_is_cut_where_it_is_parsed() -> None:
    from datetime import UTC, datetime

    from respot.sweep.model import SweepStop, TrialEvent
    from respot.wire.limits import MAX_REASON_CHARS
    from respot.wire.messages import AgentBootFailed, AgentFailed, AgentStarted, CancelCommand

    long = "w" * 1_000_000
    texts = [
        CancelCommand(job_id="j", requested_at=datetime.now(UTC), reason=long).reason,
        AgentFailed(reason=long).reason,
        AgentBootFailed(reason=long).reason,
        AgentStarted(warm_failure=long).warm_failure or "",
        TrialEvent(sweep_id="s", job_id="j", trial=0, state="FAILED", reason=long).reason or "",
        SweepStop(sweep_id="s", reason=long).reason,
    ]
    for text in texts:
        assert len(text) <= MAX_REASON_CHARS and text.endswith("more characters cut by respot]")
    assert len(AgentBootFailed(reason="r", log_tail=["l" * 9_000] * 900).log_tail) == 50


# ---- item 9: YAML limits judged on the parser's events, before anything is expanded ---------


def alias_bomb(levels: int = 9) -> str:
    """~700 bytes that stand for 9**9 strings once expanded."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    previous = "a"
    for name in "bcdefghijklm"[: levels - 1]:
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{previous}"] * 9) + "]")
        previous = name
    return "\n".join(lines) + "\n"


@pytest.fixture
def nothing_expanded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail at once (instead of hanging) if a bomb reaches PyYAML's composer or loader: the
    guard must refuse it on the parser's events first."""
    import yaml

    real_compose, real_load = yaml.compose, yaml.safe_load

    def compose(text: str, *args: Any, **kwargs: Any) -> Any:
        assert "*h" not in text and "[[[[[[[[" not in text, "composed before the guard"
        return real_compose(text, *args, **kwargs)

    def safe_load(text: str) -> Any:
        assert "*h" not in text and "[[[[[[[[" not in text, "loaded before the guard"
        return real_load(text)

    monkeypatch.setattr(yaml, "compose", compose)
    monkeypatch.setattr(yaml, "safe_load", safe_load)


def test_an_alias_bomb_job_file_is_refused_before_it_is_expanded(
    tmp_path: Path, nothing_expanded: None
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(
        "name: x\nentry_point: a.b:C\nhyperparameters:\n  " + alias_bomb().replace("\n", "\n  ")
    )
    assert len(job.read_bytes()) < 1_000
    with pytest.raises(JobFileError) as err:
        load_job_file(job)
    (problem,) = err.value.problems
    assert problem.startswith(f"{job}:") and "aliases (*name) are expanded" in problem


def test_an_alias_bomb_sweep_file_is_refused_before_it_is_expanded(
    tmp_path: Path, nothing_expanded: None
) -> None:
    from respot.sweep.client import load_sweep_file

    path = tmp_path / "sweep.yaml"
    path.write_text("name: s\nmetric: m\nn_trials: 2\n" + alias_bomb())
    with pytest.raises(SpecError) as err:
        load_sweep_file(path)
    assert any("aliases (*name) are expanded" in p for p in err.value.problems)


def test_a_recursive_alias_is_refused(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: x\nentry_point: a.b:C\nhyperparameters: &h {self: *h}\n")
    with pytest.raises(JobFileError, match="names no anchor written before it"):
        load_job_file(job)


@pytest.mark.parametrize(
    "value",
    [
        "[" * 5000 + "]" * 5000,  # a RecursionError traceback before
        "{a: " * 40 + "1" + "}" * 40,
        "[&a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1], &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a], "
        "&c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b], &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c],"
        " &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d], [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]]",
    ],
)
def test_a_set_value_too_deep_or_too_large_names_the_override(
    tmp_path: Path, value: str, nothing_expanded: None
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: x\nentry_point: a.b:C\n")
    with pytest.raises(JobFileError) as err:
        load_job_file(job, overrides=[f"hyperparameters.x={value}"])
    (problem,) = err.value.problems
    assert problem.startswith("--set 'hyperparameters.x=") and (
        "levels deep" in problem or "aliases (*name) are expanded" in problem
    ), problem


def test_respot_run_check_refuses_an_alias_bomb_without_a_traceback(
    tmp_path: Path, nothing_expanded: None
) -> None:
    from typer.testing import CliRunner

    from respot.cli import app

    job = tmp_path / "job.yaml"
    job.write_text(
        "name: x\nentry_point: a.b:C\nhyperparameters:\n  " + alias_bomb().replace("\n", "\n  ")
    )
    result = CliRunner().invoke(app, ["run", str(job), "--check"])
    assert result.exit_code != 0
    assert "aliases (*name) are expanded" in result.output
    assert "Traceback" not in result.output


def test_ordinary_anchors_and_aliases_still_read(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(
        "name: x\nentry_point: a.b:C\nhyperparameters:\n  base: &base {lr: 0.1, layers: [1, 2]}\n"
        "  copy: *base\n"
    )
    spec = load_job_file(job).spec
    assert spec.hyperparameters["copy"] == {"lr": 0.1, "layers": [1, 2]}


# ---- item 10: what fails on the instance or while signing is refused on the laptop ----------


def test_a_notebook_hyperparameter_that_is_not_a_python_name_is_refused(tmp_path: Path) -> None:
    from respot.spec.jobfile import load_notebook_job

    notebook = tmp_path / "train.ipynb"
    notebook.write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    for key, fix in (("learning-rate", "learning_rate"), ("class", "class_")):
        with pytest.raises(JobFileError) as err:
            load_notebook_job(notebook, overrides=[f"hyperparameters.{key}=1"])
        (problem,) = err.value.problems
        assert problem.startswith(f"--set hyperparameters.{key}=1: hyperparameters"), problem
        assert "not a Python name" in problem and repr(fix) in problem
    # AND in a job file (a key with '.', written quoted), and raw (the same model)
    job = tmp_path / "job.yaml"
    job.write_text("name: x\nentry_point: train.ipynb\nhyperparameters: {'opt.lr': 1}\n")
    with pytest.raises(JobFileError) as err:
        load_job_file(job)
    assert any("job.yaml:3: hyperparameters" in p and "'opt_lr'" in p for p in err.value.problems)
    # AND a session entry point keeps its wider keys
    validate_spec({**BASE, "hyperparameters": {"learning-rate": 1, "opt.lr": 2}})


def test_a_huge_integer_is_refused_naming_the_field_before_signing() -> None:
    for hyperparameters in ({"x": 10**5000}, {"x": {"y": [1, -(2**70)]}}):
        with pytest.raises(SpecError) as err:
            validate_spec({**BASE, "hyperparameters": hyperparameters})
        (problem,) = err.value.problems
        assert problem.startswith("hyperparameters: hyperparameters['x']"), problem
        assert "write it as text in quotes" in problem
    validate_spec({**BASE, "hyperparameters": {"x": 2**63 - 1}})


def test_a_number_python_cannot_read_in_a_job_file_or_a_set_names_where(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: x\nentry_point: a.b:C\nhyperparameters:\n  seed: " + "9" * 5000 + "\n")
    with pytest.raises(JobFileError) as err:
        load_job_file(job)
    (problem,) = err.value.problems
    assert problem.startswith(f"{job}:4:") and "write it as text in quotes" in problem
    job.write_text("name: x\nentry_point: a.b:C\n")
    with pytest.raises(JobFileError) as err:
        load_job_file(job, overrides=["hyperparameters.seed=" + "9" * 5000])
    (problem,) = err.value.problems
    assert problem.startswith("--set 'hyperparameters.seed=99") and "in quotes" in problem


def test_run_check_refuses_a_job_too_large_to_publish_naming_the_field(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from respot.cli import app
    from respot.wire.messages import JobSubmission, encode

    job = tmp_path / "job.yaml"
    big = json.dumps(["v" * 100] * 2_500)  # ~260 KB of hyperparameters
    job.write_text(f"name: x\nentry_point: a.b:C\nhyperparameters:\n  table: {big}\n")
    result = CliRunner().invoke(app, ["run", str(job), "--check"])
    assert result.exit_code != 0, result.output
    assert "hyperparameters: the job is" in result.output and "SNS accepts" in result.output
    # AND the limit is the one publishing enforces: a spec preflight passes is publishable
    from datetime import UTC, datetime

    from respot.spec.preflight import ENVELOPE_ROOM_BYTES, MAX_PUBLISHED_BYTES, preflight

    fits = "v" * (MAX_PUBLISHED_BYTES - ENVELOPE_ROOM_BYTES - 2_000)
    spec = TrainingEnvVar(**BASE, hyperparameters={"t": fits})
    assert preflight(spec, datetime.now(UTC)) == []
    encode(JobSubmission(job_id="j", spec=spec, submitted_at=datetime.now(UTC)))
