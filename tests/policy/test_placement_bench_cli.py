"""`respot bench placement`: the command line of the issue, its JSON and its errors."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from respot.cli import app
from respot.policy.placement_bench import PLACEMENT_POLICIES

runner = CliRunner()


def write_trace(path: Path, gap: int, data: list[int]) -> None:
    path.write_text(json.dumps({"metadata": {"gap_seconds": gap}, "data": data}))


@pytest.fixture
def trace_dir(tmp_path: Path) -> Path:
    rng = random.Random(3)
    for name, p, length in [
        ("us-east-1a_gpu_1", 0.6, 90),
        ("us-east-1b_gpu_1", 0.3, 80),  # the shortest: the set is cut to 80 ticks
        ("us-west-2a_gpu_1", 0.7, 85),
    ]:
        data: list[int] = []
        while len(data) < length:
            data += [1 if rng.random() < p else 0] * rng.randint(1, 6)
        write_trace(tmp_path / f"{name}.json", 600, data[:length])
    return tmp_path


def args(*traces: Path | str, extra: tuple[str, ...] = ()) -> list[str]:
    return ["bench", "placement", "--traces", *map(str, traces), "--work-hours", "2", *extra]


def test_json_has_one_line_per_cell_with_every_policy(trace_dir):
    extra = ("--deadline-hours", "3", "4", "--changeover-hours", "0.05", "0.2")
    result = runner.invoke(
        app, [*args(trace_dir, extra=extra), "--windows", "3", "--json", "--workers", "1"]
    )
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(o["deadline_hours"], o["changeover_hours"]) for o in lines] == [
        (3, 0.05),
        (3, 0.2),
        (4, 0.05),
        (4, 0.2),
    ]
    for obj in lines:
        assert obj["work_hours"] == 2 and obj["windows_per_trace"] == 3
        assert obj["pools"] == ["us-east-1a_gpu_1", "us-east-1b_gpu_1", "us-west-2a_gpu_1"]
        assert list(obj["results"]) == list(PLACEMENT_POLICIES)
        for stats in obj["results"].values():
            assert set(stats) == {"mean", "p75", "misses", "n"}
            assert stats["n"] == 3 and stats["misses"] == 0
        best = obj["results"]["omniscient"]["mean"]
        assert all(s["mean"] >= best - 1e-12 for s in obj["results"].values())


def test_files_are_a_set_like_their_directory_and_processes_change_nothing(trace_dir):
    files = sorted(trace_dir.glob("*.json"), reverse=True)  # any order: pools by file name
    extra = ("--deadline-hours", "3")
    by_files = runner.invoke(app, [*args(*files, extra=extra), "--windows", "2", "--json"])
    by_dir = runner.invoke(
        app, [*args(trace_dir, extra=extra), "--windows", "2", "--json", "--workers", "1"]
    )
    assert by_files.exit_code == by_dir.exit_code == 0, by_files.output
    assert by_files.stdout == by_dir.stdout


def test_table_names_the_baseline_and_the_gap(trace_dir):
    extra = ("--deadline-hours", "3", "--changeover-hours", "0.1")
    result = runner.invoke(app, [*args(trace_dir, extra=extra), "--windows", "2", "--workers", "1"])
    assert result.exit_code == 0, result.output
    for name in ["up-round-robin", "greedy-any", "omniscient", "respot", "gap closed"]:
        assert name in result.stdout


def one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_bad_sets_are_clear_errors(trace_dir, tmp_path):
    assert "no such file or directory" in one_line_error(
        runner.invoke(app, args(tmp_path / "nowhere", extra=("--deadline-hours", "3")))
    )
    write_trace(trace_dir / "us-west-2b_gpu_1.json", 300, [1] * 100)
    line = one_line_error(runner.invoke(app, args(trace_dir, extra=("--deadline-hours", "3"))))
    assert "share gap_seconds" in line and "us-west-2b_gpu_1: 300 s" in line


def test_windows_longer_than_the_shortest_trace_and_infeasible_jobs_are_errors(trace_dir):
    line = one_line_error(runner.invoke(app, args(trace_dir, extra=("--deadline-hours", "20"))))
    assert "shorter than a window" in line and "80 ticks" in line
    line = one_line_error(runner.invoke(app, args(trace_dir, extra=("--deadline-hours", "2"))))
    assert "cannot finish in time" in line
