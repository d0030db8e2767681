"""Command jobs in the spec: `command` and `stop_signal` checked before anything is spent,
on every path (SDK, job files, raw JSON), with the field named and the fix said."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from respot.cli import app
from respot.exceptions import SpecError
from respot.spec.jobfile import load_job_file
from respot.spec.preflight import preflight
from respot.spec.static import checkpoint_warnings
from respot.spec.training import MAX_COMMAND_ARGS, TrainingEnvVar, validate_spec

BOOBY = "raise SystemExit('imported!')\n"
SESSION = "class DigitsSession:\n    def train(self):\n        pass\n"
SAVES = "    def step(self):\n        self.save_checkpoint(1)\n"


def test_a_command_job_needs_no_entry_point_and_keeps_its_argv() -> None:
    spec = TrainingEnvVar(name="plain", command=["python", "train.py", "--epochs", "3"])
    assert spec.command == ["python", "train.py", "--epochs", "3"] and spec.entry_point is None
    assert validate_spec(spec.to_json()) == spec


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"command": []}, "command: give the program and its arguments as a list"),
        ({"command": ["", "x"]}, "command: the program (the first item) is empty"),
        ({"command": "python train.py"}, "command: Input should be a valid list"),
        ({"command": ["python", None]}, "command[1]: Input should be a valid string"),
        ({"command": ["python", "a\x00b"]}, "command: argument 1 contains a NUL byte"),
        ({"command": ["x"] * (MAX_COMMAND_ARGS + 1)}, f"at most {MAX_COMMAND_ARGS}"),
        ({"command": ["python", "x" * 20_000]}, "characters in all"),
        (
            {"command": ["python", "t.py"], "entry_point": "a.b:C"},
            "command and entry_point both say what to run; keep one",
        ),
        ({"command": ["python"], "stop_signal": "SIGKILL"}, "stop_signal: 'SIGKILL' is not"),
        ({"entry_point": "a.b:C", "stop_signal": "SIGUSR1"}, "stop_signal is for command jobs"),
        ({}, "say what to run: set command"),
    ],
)
def test_a_bad_command_is_refused_naming_the_field_and_the_fix(
    fields: dict[str, object], says: str
) -> None:
    with pytest.raises(SpecError) as err:
        validate_spec({"name": "j", **fields})
    assert says in str(err.value)


def test_the_stop_signal_is_normalised_and_numbers_in_a_job_file_are_text(
    tmp_path: Path,
) -> None:
    assert TrainingEnvVar(name="j", command=["x"], stop_signal="usr1").stop_signal == "SIGUSR1"
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "job.yaml").write_text(
        "name: j\ncommand: [python, train.py, --epochs, 3, --lr, 0.5]\nsource_dir: .\n"
    )
    spec = load_job_file(tmp_path / "job.yaml").spec
    assert spec.command == ["python", "train.py", "--epochs", "3", "--lr", "0.5"]


# ---- run --check: what a reading of the source tells, before anything is spent -------------


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_an_entry_point_whose_class_does_not_exist_is_caught_without_importing_it(
    tmp_path: Path,
) -> None:
    # GIVEN a module that would raise if imported, defining DigitsSession
    write(tmp_path, {"digits/__init__.py": "", "digits/train.py": BOOBY + SESSION})
    spec = TrainingEnvVar(
        name="d", entry_point="digits.train:DigitSession", source_dir=str(tmp_path)
    )
    # THEN preflight names the class, what the module defines, and imports nothing
    assert preflight(spec, datetime.now(UTC)) == [
        "entry_point: train.py has no class 'DigitSession'; it defines DigitsSession "
        "(fix the name after ':')"
    ]
    good = spec.model_copy(update={"entry_point": "digits.train:DigitsSession"})
    assert preflight(good, datetime.now(UTC)) == []
    imported = TrainingEnvVar(name="d", entry_point="pkg:Session", source_dir=str(tmp_path))
    write(tmp_path, {"pkg/__init__.py": "from pkg.impl import Session\n"})
    assert preflight(imported, datetime.now(UTC)) == []
    # a namespace written by hand is not second-guessed
    dynamic = TrainingEnvVar(name="d", entry_point="dyn:Session", source_dir=str(tmp_path))
    write(tmp_path, {"dyn.py": "globals()['Session'] = type('Session', (), {})\n"})
    assert preflight(dynamic, datetime.now(UTC)) == []


def test_a_script_missing_from_source_dir_is_caught(tmp_path: Path) -> None:
    spec = TrainingEnvVar(name="c", command=["python", "trian.py"], source_dir=str(tmp_path))
    problems = preflight(spec, datetime.now(UTC))
    assert len(problems) == 1 and "command: 'trian.py' is not in source_dir" in problems[0]


@pytest.mark.parametrize(
    ("files", "fields", "warns"),
    [
        ({"t.py": "print('train')\n"}, {"command": ["python", "t.py"]}, True),
        (
            {"t.py": "import os\nd = os.environ['RESPOT_CHECKPOINT_DIR']\n"},
            {"command": ["python", "t.py"]},
            False,
        ),
        (
            {"t.py": "import respot\nrespot.checkpoint_saved(3)\n"},
            {"command": ["python", "t.py"]},
            False,
        ),
        ({"run.sh": "echo hi\n"}, {"command": ["bash", "run.sh"]}, False),  # unreadable: no claim
        ({"s.py": SESSION}, {"entry_point": "s:DigitsSession"}, True),
        ({"s.py": SESSION + SAVES}, {"entry_point": "s:DigitsSession"}, False),
    ],
)
def test_check_warns_when_nothing_in_the_job_can_checkpoint(
    tmp_path: Path, files: dict[str, str], fields: dict[str, object], warns: bool
) -> None:
    spec = TrainingEnvVar(name="w", source_dir=str(write(tmp_path, files)), **fields)
    warnings = checkpoint_warnings(spec)
    assert bool(warnings) is warns, warnings
    assert all("an interruption restarts it from zero" in w for w in warnings)


def test_run_check_with_command_builds_the_job_and_warns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "my job", {"train.py": "print('no checkpoints here')\n"})
    monkeypatch.chdir(tmp_path / "my job")
    result = CliRunner().invoke(
        app, ["run", "--check", "--json", "--command", "--", "python", "train.py", "--lr", "3"]
    )
    assert result.exit_code == 0, result.output
    spec = json.loads(result.stdout)
    assert spec["command"] == ["python", "train.py", "--lr", "3"] and spec["name"] == "my-job"
    assert spec["source_dir"] == str(tmp_path / "my job")
    shown = CliRunner().invoke(app, ["run", "--check", "--command", "--", "./train.sh"])
    assert shown.exit_code == 0 and "ok (my-job, ./train.sh)" in shown.stdout  # not train.sh
    assert (
        "restarts it from zero"
        in CliRunner()
        .invoke(app, ["run", "--check", "--command", "--", "python", "train.py"])
        .stdout
    )
    empty = CliRunner().invoke(app, ["run", "--check", "--command"])
    assert empty.exit_code == 1 and "--command needs the program" in empty.stderr
