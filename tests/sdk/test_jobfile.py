"""Job files: the same checks as TrainingEnvVar, with each problem at its line and field."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from respot.spec.jobfile import JobFileError, load_job_file, parse_override

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def problems_of(path: Path, overrides: list[str] | None = None) -> list[str]:
    with pytest.raises(JobFileError) as info:
        load_job_file(path, overrides)
    return info.value.problems


def test_each_problem_names_its_file_line_and_field(tmp_path: Path) -> None:
    # GIVEN a job file with a bad instance type in a list, a bad URI and a misspelt field
    path = write(
        tmp_path,
        """
        # the digits job
        name: digits-mlp
        entry_point: digits.train:DigitsSession
        instance_types:
          - g5.xlarge
          - g5-xlarge
        data:
          - s3_uri: http://bucket/digits
            local_path: digits
        max_spot_wiat: 30m
        """,
    )
    # WHEN it is loaded THEN every problem points at the line it is written on
    found = problems_of(path)
    assert f"{path}:6: instance_types[1]: 'g5-xlarge' is not an EC2 instance type" in found[0]
    assert any(p.startswith(f"{path}:8: data[0].s3_uri: 'http://bucket/digits'") for p in found)
    assert f"{path}:10: max_spot_wiat: unknown field; did you mean 'max_spot_wait'?" in found


def test_malformed_yaml_is_reported_at_its_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "name: digits\n\tentry_point: a.b:C\n")
    (problem,) = problems_of(path)
    assert problem.startswith(f"{path}:2:1: not valid YAML")
    assert "'\\t'" in problem


def test_a_key_given_twice_is_an_error_not_a_silent_overwrite(tmp_path: Path) -> None:
    path = write(tmp_path, "name: a\nentry_point: a.b:C\nname: b\n")
    assert problems_of(path) == [f"{path}:3: name: given twice (first on line 1); keep one"]


def test_a_file_that_is_not_a_mapping_says_what_it_should_be(tmp_path: Path) -> None:
    path = write(tmp_path, "- name: a\n")
    (problem,) = problems_of(path)
    assert problem.startswith(f"{path}:1: the file must be a mapping of fields")


def test_a_missing_field_names_the_field(tmp_path: Path) -> None:
    path = write(tmp_path, "entry_point: a.b:C\n")
    assert problems_of(path) == [f"{path}: name: required; set it"]


def test_set_overrides_parse_values_as_yaml(tmp_path: Path) -> None:
    # GIVEN the digits example and overrides of a number, a list, a new nested key
    job = load_job_file(
        ROOT / "examples" / "digits" / "job.yaml",
        [
            "hyperparameters.lr=0.01",
            "instance_types=[g5.xlarge, g4dn.xlarge]",
            "tags.team=vision",
            "data[0].local_path=numbers",
        ],
    )
    spec = job.spec
    assert spec.hyperparameters["lr"] == 0.01 and spec.hyperparameters["epochs"] == 70
    assert spec.instance_types == ["g5.xlarge", "g4dn.xlarge"]
    assert spec.tags == {"team": "vision"}
    assert spec.data[0].local_path == "numbers"
    # source_dir "." is the job file's directory, wherever the command runs from
    assert Path(spec.source_dir or "") == ROOT / "examples" / "digits"


def test_a_problem_in_an_override_names_the_override(tmp_path: Path) -> None:
    path = write(tmp_path, "name: a\nentry_point: a.b:C\n")
    found = problems_of(path, ["instance_types=[g5.xlarge, bogus]"])
    assert found == [
        "--set instance_types=[g5.xlarge, bogus]: instance_types[1]: 'bogus' is not an EC2 "
        "instance type; write family.size, e.g. 'g5.xlarge'"
    ]


@pytest.mark.parametrize(
    ("text", "fix"),
    [("lr", "key=value"), ("=3", "key=value"), ("a..b=1", "field path"), ("x=[1", "YAML")],
)
def test_malformed_overrides_say_how_to_write_them(text: str, fix: str) -> None:
    with pytest.raises(JobFileError) as info:
        parse_override(text)
    assert fix in info.value.problems[0]


def test_checks_that_need_this_machine_point_at_their_field(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        name: a
        entry_point: pkg.train:Session
        source_dir: ./not-here
        """,
    )
    (problem,) = problems_of(path)
    assert problem.startswith(f"{path}:3: source_dir: ")
    assert "is not a directory on this machine" in problem
