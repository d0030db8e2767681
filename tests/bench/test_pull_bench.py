"""bench.pull's machinery on a 1 MiB output: both tools download it, alternating, and it
summarizes what it timed (the figures themselves come from the benchmark, never a test)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.pull import markdown, run, summarize

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_both_tools_download_the_output_in_alternating_order(tmp_path: Path) -> None:
    rows = run(1, 2, tmp_path, aws_defaults=False)
    assert [(r["run"], r["tool"]) for r in rows] == [
        (1, "respot pull"),
        (1, "aws s3 cp"),
        (2, "aws s3 cp"),
        (2, "respot pull"),
    ]
    stats = summarize(rows)
    assert set(stats) == {"respot pull", "aws s3 cp"} and all(
        s["runs"] == 2 for s in stats.values()
    )
    assert "respot pull | 2 |" in markdown(rows, 1, aws_defaults=False)
