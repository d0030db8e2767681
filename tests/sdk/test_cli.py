"""The `respot` command's parsing, validation and JSON output, with no deployment at all."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from respot.cli import app

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "examples" / "digits" / "job.yaml"


def test_check_validates_a_job_file_and_prints_the_spec_as_json() -> None:
    result = CliRunner().invoke(
        app, ["run", str(DIGITS), "--check", "--json", "--set", "hyperparameters.lr=0.01"]
    )
    assert result.exit_code == 0, result.output
    spec = json.loads(result.stdout)
    assert spec["name"] == "digits-mlp" and spec["hyperparameters"]["lr"] == 0.01
    assert spec["source_dir"] == str(DIGITS.parent)


def test_an_invalid_job_file_fails_with_located_problems_and_no_traceback(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: x\nentry_point: a.b:C\ninstance_types: [g5.xlarge, g5-xlarge]\n")
    result = CliRunner().invoke(app, ["run", str(job), "--check"])
    assert result.exit_code == 1
    assert f"{job}:3: instance_types[1]: 'g5-xlarge' is not an EC2 instance type" in result.stderr
    assert "Traceback" not in result.output


def test_run_needs_a_job_file_or_a_rerun_but_not_both(tmp_path: Path) -> None:
    neither = CliRunner().invoke(app, ["run"])
    both = CliRunner().invoke(app, ["run", str(DIGITS), "--rerun", "some-job"])
    for result in (neither, both):
        assert result.exit_code == 1 and "give a job file, or --rerun JOB" in result.stderr


def test_every_command_is_listed_and_help_imports_nothing_heavy() -> None:
    # WHEN a fresh interpreter loads the command and renders its help
    probe = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from respot.cli import app\n"
        "out = CliRunner().invoke(app, ['--help']).output\n"
        "heavy = [m for m in ('boto3', 'matplotlib', 'infra.local.runtime', 'tensorboard',"
        " 'moto') if m in sys.modules]\n"
        "print(heavy); print(out)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    # THEN none of the heavy packages was imported, and every command is there
    first, _, text = result.stdout.partition("\n")
    assert first == "[]"
    for command in ("run", "ls", "status", "logs", "cancel", "cost", "tensorboard", "timeline"):
        assert f" {command} " in text
