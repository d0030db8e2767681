"""TrainingEnvVar: clear errors that name the field and the fix; versioned JSON round trips."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from respot.exceptions import MessageTooLargeError, SpecError
from respot.spec.training import TrainingEnvVar, parse_duration, validate_spec
from respot.wire.messages import JobSubmission, encode

GOOD = {"name": "digits-mlp", "entry_point": "digits.train:DigitsSession"}


def problems(**fields: object) -> list[str]:
    with pytest.raises(SpecError) as info:
        TrainingEnvVar(**{**GOOD, **fields})
    return info.value.problems


def test_minimal_spec_has_sensible_defaults() -> None:
    spec = TrainingEnvVar(**GOOD)
    assert spec.schema_version == 1
    assert spec.max_spot_wait == timedelta(minutes=20)
    assert spec.on_demand_fallback is True and spec.checkpoint_keep == 3


@pytest.mark.parametrize(
    ("fields", "field", "fix"),
    [
        ({"name": "my job"}, "name", "digits-mlp"),
        ({"entry_point": "train.py"}, "entry_point", "package.module:SessionClass"),
        ({"instance_types": ["g5-xlarge"]}, "instance_types", "g5.xlarge"),
        ({"instance_types": []}, "instance_types", "at least one"),
        ({"instance_types": ["g5.xlarge", "g5.xlarge"]}, "instance_types", "twice"),
        ({"max_spot_price": -1}, "max_spot_price", "USD per hour"),
        ({"environment": {"AWS_SECRET_ACCESS_KEY": "x"}}, "environment", "rename"),
        ({"environment": {"1X": "y"}}, "environment", "letters, digits"),
        ({"data": [{"s3_uri": "http://x", "local_path": "d"}]}, "data[0].s3_uri", "s3://"),
        (
            {"data": [{"s3_uri": "s3://bucket/k", "local_path": "../etc"}]},  # hostile-path
            "data[0].local_path",
            "without '..'",
        ),
        ({"deadline": "2026-11-27T09:00:00"}, "deadline", "zone"),
        ({"deadline": "friday"}, "deadline", "ISO-8601"),
        ({"max_runtime": "forever"}, "max_runtime", "'4h'"),
        ({"tags": {"aws:owner": "x"}}, "tags", "reserved"),
        ({"slack_channel": "General"}, "slack_channel", "#name"),
        ({"hyperparameters": {"lr": float("nan")}}, "hyperparameters", "NaN"),
        ({"hyperparameters": {"fn": object()}}, "hyperparameters", "JSON values"),
        ({"seed": -1}, "seed", "greater than or equal to 0"),
        ({"estimated_runtime": "5h", "max_runtime": "1h"}, "spec", "raise max_runtime"),
    ],
)
def test_each_problem_names_the_field_and_the_fix(
    fields: dict[str, object], field: str, fix: str
) -> None:
    lines = problems(**fields)
    assert len(lines) == 1, lines
    assert lines[0].startswith(field), lines
    assert fix in lines[0], lines


def test_misspelt_field_gets_a_suggestion() -> None:
    (line,) = problems(instance_type=["g5.xlarge"])
    assert line == "instance_type: unknown field; did you mean 'instance_types'?"


def test_nothing_to_run_is_refused() -> None:
    with pytest.raises(SpecError, match="say what to run"):
        TrainingEnvVar(name="x")


def test_all_problems_are_reported_at_once() -> None:
    with pytest.raises(SpecError) as info:
        validate_spec({"name": "", "entry_point": "x", "seed": "abc"})
    assert len(info.value.problems) == 3
    assert "3 problem(s)" in str(info.value)


def test_durations_and_relative_deadline() -> None:
    assert parse_duration("1h30m") == timedelta(minutes=90)
    assert parse_duration("PT4H") == timedelta(hours=4)
    assert parse_duration(90) == timedelta(seconds=90)
    before = datetime.now(UTC)
    spec = TrainingEnvVar(**GOOD, deadline="+48h")
    after = datetime.now(UTC)
    assert spec.deadline is not None
    assert before + timedelta(hours=48) <= spec.deadline <= after + timedelta(hours=48)


def test_json_round_trip_is_stable() -> None:
    spec = TrainingEnvVar(
        **GOOD,
        deadline="2026-12-01T09:00:00+01:00",
        max_runtime="2h",
        hyperparameters={"lr": 0.1, "layers": [64, 32]},
        environment={"MODE": "x; rm -rf / $(curl e)"},
        tags={"team": "nlp"},
    )
    text = spec.to_json()
    assert json.loads(text)["schema_version"] == 1
    again = validate_spec(text)
    assert again == spec
    assert again.environment["MODE"] == "x; rm -rf / $(curl e)"


def test_oversize_message_is_refused_before_sending() -> None:
    spec = TrainingEnvVar(**GOOD, hyperparameters={"blob": "x" * 300_000})
    sub = JobSubmission(job_id="j", spec=spec, submitted_at=datetime.now(UTC))
    with pytest.raises(MessageTooLargeError, match="S3"):
        encode(sub)


def test_absurd_durations_are_refused_not_crashed_on() -> None:
    # Found by tests/property: 1e14 seconds overflowed timedelta.
    (line,) = problems(estimated_runtime=86_400_000_000_000)
    assert line.startswith("estimated_runtime") and "366 days" in line
