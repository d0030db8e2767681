"""Command jobs in the spec: `command` and `stop_signal` checked before anything is spent,
on every path (SDK, job files, raw JSON), with the field named and the fix said."""

from __future__ import annotations

import pytest

from respot.exceptions import SpecError
from respot.spec.jobfile import load_job_file
from respot.spec.training import MAX_COMMAND_ARGS, TrainingEnvVar, validate_spec


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


def test_the_stop_signal_is_normalised_and_numbers_in_a_job_file_are_text(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert TrainingEnvVar(name="j", command=["x"], stop_signal="usr1").stop_signal == "SIGUSR1"
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "job.yaml").write_text(
        "name: j\ncommand: [python, train.py, --epochs, 3, --lr, 0.5]\nsource_dir: .\n"
    )
    spec = load_job_file(tmp_path / "job.yaml").spec
    assert spec.command == ["python", "train.py", "--epochs", "3", "--lr", "0.5"]
