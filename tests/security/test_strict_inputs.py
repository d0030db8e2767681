"""Strict inputs on the laptop: full-match patterns, depth limits, and output that is text."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from respot.aws.ec2events import EventShapeError, parse_ec2_event
from respot.cli import app
from respot.cli import context as cli_context
from respot.exceptions import SpecError
from respot.spec.jobfile import JobFileError, load_job_file
from respot.spec.training import validate_spec
from respot.wire.limits import InputLimitError, check_json_text, json_depth
from tests.conftest import aws_event

BASE = {"name": "x", "entry_point": "a.b:C"}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("name", "digits\n"),
        ("entry_point", "a.b:C\n"),
        ("instance_types", ["g5.xlarge\n"]),
        ("slack_channel", "#team\n"),
        ("image", "repo/name:1\n"),
        ("data", [{"s3_uri": "s3://bucket-a/key\n", "local_path": "d"}]),
        ("environment", {"NAME\n": "v"}),
        ("hyperparameters", {"lr\n": 1}),
        ("tags", {"team\n": "x"}),
    ],
)
def test_a_trailing_newline_is_refused_by_every_pattern(field: str, value: object) -> None:
    with pytest.raises(SpecError) as err:
        validate_spec({**BASE, field: value})
    assert any(p.startswith(field) for p in err.value.problems), err.value.problems


def test_json_depth_counts_only_structure() -> None:
    assert json_depth('{"a": [1, {"b": "[[[[["}]}') == 3
    with pytest.raises(InputLimitError, match="nests 65 levels deep; at most 64"):
        check_json_text("[" * 65 + "]" * 65)


def test_a_thousand_deep_yaml_file_is_a_clear_error(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: x\nentry_point: a.b:C\nhyperparameters:\n  h: " + "[" * 1000 + "]" * 1000)
    with pytest.raises(JobFileError, match="nested"):
        load_job_file(job)
    result = CliRunner().invoke(app, ["run", str(job), "--check"])
    assert result.exit_code == 1
    assert "nested" in result.output and "Traceback" not in result.output
    assert not isinstance(result.exception, RecursionError)


def test_deep_block_yaml_is_refused_before_it_is_read(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    lines = ["name: x", "entry_point: a.b:C", "hyperparameters:"]
    lines += [f"{'  ' * (i + 1)}k{i}:" for i in range(40)] + [f"{'  ' * 41}1"]
    job.write_text("\n".join(lines) + "\n")
    with pytest.raises(JobFileError, match="nested more than 32 levels"):
        load_job_file(job)


def test_cli_errors_print_user_text_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, highlight=False, emoji=False, width=200)
    monkeypatch.setitem(cli_context._CONSOLES, "err", console)
    with pytest.raises(typer.Exit):
        cli_context.fail("job a:b:c :smile: [red]not red[/red] [link=x]y[/link]")
    text = buffer.getvalue()
    assert "a:b:c :smile: [red]not red[/red] [link=x]y[/link]" in text
    assert "\N{SMILING FACE WITH OPEN MOUTH AND SMILING EYES}" not in text


def test_the_cli_consoles_do_not_render_emoji_codes() -> None:
    cli_context._CONSOLES.clear()
    for console in (cli_context.console(), cli_context.err_console()):
        with console.capture() as captured:
            console.print(":smile: a:b:c", markup=False)
        assert ":smile:" in captured.get()


def test_the_powertools_style_underscore_event_is_malformed() -> None:
    event = aws_event("spot-interruption-warning")
    event["detail"]["instance_id"] = event["detail"].pop("instance-id")
    with pytest.raises(EventShapeError, match="malformed"):
        parse_ec2_event(event)
    event = aws_event("spot-interruption-warning")
    event["detail_type"] = event.pop("detail-type")
    with pytest.raises(EventShapeError):
        parse_ec2_event(event)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("name", "../../etc"),  # hostile-path
        ("name", "a b"),
        ("name", "$(id)"),
        ("name", "x" * 65),
        ("name", ""),
        ("entry_point", "os:system"),  # a module outside the code is caught on the laptop
        ("entry_point", "a.b:C; rm -rf /"),
        ("entry_point", "../a:C"),  # hostile-path
        ("entry_point", "a.b:C\nimport os"),
        ("instance_types", ["g5.xlarge; reboot"]),
        ("instance_types", ["G5.XLARGE"]),
        ("instance_types", ["../g5"]),  # hostile-path
        ("data", [{"s3_uri": "s3://UPPER/key", "local_path": "d"}]),
        ("data", [{"s3_uri": "https://bucket/key", "local_path": "d"}]),
        ("data", [{"s3_uri": "s3://bucket-a/key", "local_path": "../outside"}]),  # hostile-path
        ("data", [{"s3_uri": "s3://bucket-a/key", "local_path": "/etc"}]),
        ("data", [{"s3_uri": "s3://bucket-a/key", "local_path": "a\x00b"}]),
        ("environment", {"LD_PRELOAD=x": "1"}),
        ("environment", {"RESPOT_JOB_ID": "other-job"}),
        ("tags", {"respot:job-id": "other-job"}),
        ("slack_channel", "#general <!channel>"),
    ],
)
def test_hostile_spec_values_are_refused_naming_the_field(field: str, value: object) -> None:
    spec = {**BASE, field: value}
    if field == "entry_point" and value == "os:system":
        from respot.spec.preflight import preflight

        env = validate_spec({**spec, "source_dir": "."})
        problems = preflight(env, now=__import__("datetime").datetime.now().astimezone())
        assert any(p.startswith("entry_point") for p in problems), problems
        return
    with pytest.raises(SpecError) as err:
        validate_spec(spec)
    assert any(p.startswith(field) for p in err.value.problems), err.value.problems
