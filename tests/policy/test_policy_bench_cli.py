"""`respot bench policy`: the command line of the issue, its JSON, its table and its errors."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from respot.cli import app
from respot.policy.bench import BENCH_POLICIES, Cell, run_bench
from respot.policy.model import Trace

runner = CliRunner()


def write_trace(path: Path, gap: int, data: list[int]) -> None:
    path.write_text(json.dumps({"metadata": {"gap_seconds": gap}, "data": data}))


@pytest.fixture
def trace_dir(tmp_path: Path) -> Path:
    rng = random.Random(3)
    for name, p in [("zone-a_gpu_1", 0.8), ("zone-b_gpu_1", 0.3)]:
        data = []
        while len(data) < 80:
            data += [1 if rng.random() < p else 0] * rng.randint(1, 6)
        write_trace(tmp_path / f"{name}.json", 600, data[:80])
    return tmp_path


def bench_args(trace_dir: Path, *extra: str) -> list[str]:
    return ["bench", "policy", "--traces", str(trace_dir), "--work-hours", "2", *extra]


def test_space_separated_values_give_one_json_line_per_cell(trace_dir):
    # WHEN the syntax is used: several values after one flag
    args = bench_args(trace_dir, "--deadline-hours", "3", "4", "--changeover-hours", "0.05", "0.2")
    result = runner.invoke(app, [*args, "--windows", "3", "--json", "--workers", "1"])
    # THEN there is one JSON object per (D, d) cell, in order
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    cells = [(obj["deadline_hours"], obj["changeover_hours"]) for obj in lines]
    assert cells == [(3, 0.05), (3, 0.2), (4, 0.05), (4, 0.2)]
    for obj in lines:
        assert obj["work_hours"] == 2 and obj["windows_per_trace"] == 3
        assert list(obj["results"]) == list(BENCH_POLICIES)
        for stats in obj["results"].values():
            assert set(stats) == {"mean", "p75", "misses", "n"}
            assert stats["n"] == 6 and stats["misses"] == 0
        assert obj["results"]["on-demand"]["mean"] == 1.0
        best = obj["results"]["omniscient"]["mean"]
        assert all(s["mean"] >= best - 1e-12 for s in obj["results"].values())


def test_repeated_flags_mean_the_same(trace_dir):
    spaced = runner.invoke(
        app,
        [*bench_args(trace_dir, "--deadline-hours", "3", "4"), "--windows", "2", "--json"],
    )
    repeated = runner.invoke(
        app,
        [
            *bench_args(trace_dir, "--deadline-hours", "3", "--deadline-hours", "4"),
            *["--windows", "2", "--json", "--workers", "1"],
        ],
    )
    assert spaced.exit_code == repeated.exit_code == 0
    assert spaced.stdout == repeated.stdout  # processes or not, the same numbers


def test_table_output_names_every_policy(trace_dir):
    args = bench_args(trace_dir, "--deadline-hours", "3", "--changeover-hours", "0.1")
    result = runner.invoke(app, [*args, "--windows", "2", "--workers", "1"])
    assert result.exit_code == 0, result.output
    for name in ["uniform-progress", "omniscient", "respot", "gap closed"]:
        assert name in result.stdout


def one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_missing_or_empty_directory_is_a_clear_error(tmp_path):
    missing = tmp_path / "nowhere"
    assert "nowhere: no such directory" in one_line_error(
        runner.invoke(app, bench_args(missing, "--deadline-hours", "3"))
    )
    assert "no trace files" in one_line_error(
        runner.invoke(app, bench_args(tmp_path, "--deadline-hours", "3"))
    )


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "not valid JSON"),
        (json.dumps({"data": [1, 0]}), "missing metadata.gap_seconds"),
        (json.dumps({"metadata": {"gap_seconds": 0}, "data": [1]}), "positive integer"),
        (json.dumps({"metadata": {"gap_seconds": 600}, "data": []}), "non-empty list"),
        (json.dumps({"metadata": {"gap_seconds": 600}, "data": [1, -1]}), "data[1]"),
        (json.dumps({"metadata": {"gap_seconds": 600}, "data": [1, "x"]}), "data[1]"),
    ],
)
def test_malformed_trace_names_the_file_and_the_problem(trace_dir, content, problem):
    (trace_dir / "broken.json").write_text(content)
    line = one_line_error(runner.invoke(app, bench_args(trace_dir, "--deadline-hours", "3")))
    assert "broken.json" in line and problem in line


def test_trace_shorter_than_a_window_and_infeasible_jobs_are_errors(trace_dir):
    line = one_line_error(runner.invoke(app, bench_args(trace_dir, "--deadline-hours", "20")))
    assert "zone-a_gpu_1" in line and "shorter than a window" in line
    line = one_line_error(runner.invoke(app, bench_args(trace_dir, "--deadline-hours", "2")))
    assert "cannot finish in time" in line


def test_any_tick_length_is_accepted():
    # G = 195 s does not divide C, D or d: the rules still apply in integer seconds
    rng = random.Random(5)
    traces = [
        Trace(
            name=f"t{k}", gap_seconds=195, availability=tuple(rng.randint(0, 1) for _ in range(90))
        )
        for k in range(2)
    ]
    (result,) = run_bench(traces, [Cell(2, 3, 0.2)], 4, workers=1)
    assert result.results["respot"].misses == 0
    assert result.results["on-demand"].mean == 1.0
    assert result.results["omniscient"].mean <= result.results["respot"].mean
