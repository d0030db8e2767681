"""bench.checkpoints on tiny sizes: the layout, the alternating order, one run end to end."""

from __future__ import annotations

from pathlib import Path

from bench.checkpoints import GIB, MIB, layout, markdown, run, summarize, tool_order


def test_layout_keeps_files_at_most_256_mib_above_one_gib() -> None:
    small = layout(GIB)
    assert [n for n, _ in small][:3] == ["model-00001.bin", "model-00002.bin", "optimizer.bin"]
    assert sum(size for _, size in small) == GIB
    big = layout(10 * GIB)
    assert len(big) == 70 and max(size for _, size in big) == 256 * MIB
    assert sum(size for _, size in big) == 10 * GIB
    assert len({n for n, _ in big}) == 70  # no name twice


def test_the_order_alternates_between_runs() -> None:
    tools = ("a", "b", "c")
    assert tool_order(0, tools) == ("a", "b", "c")
    assert tool_order(1, tools) == ("c", "b", "a")
    assert tool_order(2, tools) == tools


def test_summary_is_median_min_max_per_scenario_and_tool() -> None:
    rows = summarize({("full", "respot"): [3.0, 1.0, 2.0], ("restore", "s5cmd cp"): [5.0]})
    assert rows[0] == {
        "scenario": "full",
        "tool": "respot",
        "runs": 3,
        "median_s": 2.0,
        "min_s": 1.0,
        "max_s": 3.0,
        "seconds": [3.0, 1.0, 2.0],
    }
    assert rows[1]["scenario"] == "restore"


def test_a_tiny_two_run_comparison_restores_every_byte(tmp_path: Path) -> None:
    # respot and s5cmd only (the AWS CLI starts slowly); every scenario, two runs
    payload = run(
        0.25, tmp_path, runs=2, tools=("respot", "s5cmd cp", "s5cmd sync"), say=lambda _: None
    )
    seen = {(r["scenario"], r["tool"]): r for r in payload["rows"]}
    for scenario in ("full", "one-changed", "all-rewritten", "restore"):
        for tool in ("respot", "s5cmd cp", "s5cmd sync"):
            assert seen[(scenario, tool)]["runs"] == 2, (scenario, tool)
    # respot sends only the changed file after the first upload
    full = seen[("full", "respot")]["bytes_sent"]
    assert seen[("all-rewritten", "respot")]["bytes_sent"] < full
    assert seen[("restore, one GET per file", "respot")]["runs"] == 2
    assert payload["emulator"]["ranged_gets_per_restore"] == 7  # tiny files: one GET each
    assert "median s" in markdown(payload)
