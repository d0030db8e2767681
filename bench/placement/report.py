"""Markdown tables from `respot bench placement --json` output (bench/placement/README.md).

    python bench/placement/report.py RESULTS.jsonl [RESULTS.jsonl ...]

One table per file: every policy's mean / p75 / misses per cell, respot's saving against
up-round-robin (RR) and the share of the gap between RR and the optimum it closes; then the
mean of the cells, and a line on the bar of issue 13 (no misses, below RR in every cell, at
least half the gap closed on average).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

POLICIES = ["up-home", "up-round-robin", "greedy-any", "omniscient", "respot"]


def _load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def saving_and_closed(results: dict) -> tuple[float, float]:
    """(RR - respot) / RR and (RR - respot) / (RR - optimum), on the means."""
    rr = results["up-round-robin"]["mean"]
    best = results["omniscient"]["mean"]
    ours = results["respot"]["mean"]
    return (rr - ours) / rr, (rr - ours) / (rr - best) if rr > best else float("nan")


def table(rows: list[dict], name: str) -> str:
    first = rows[0]
    lines = [
        f"### {name}: {len(first['pools'])} pools ({', '.join(first['pools'])}), "
        f"{first['windows_per_trace']} windows",
        "",
        "| D (h) | d (h) | " + " | ".join(POLICIES) + " | saving vs RR | gap closed |",
        "|---" * (len(POLICIES) + 4) + "|",
    ]
    for row in rows:
        res = row["results"]
        cells = [
            f"{res[p]['mean']:.4f} / {res[p]['p75']:.4f} / {res[p]['misses']}" for p in POLICIES
        ]
        saving, closed = saving_and_closed(res)
        lines.append(
            f"| {row['deadline_hours']} | {row['changeover_hours']} | "
            + " | ".join(cells)
            + f" | {saving:.2%} | {closed:.1%} |"
        )
    savings, closeds = zip(*(saving_and_closed(r["results"]) for r in rows), strict=True)
    lines.append(
        "| **mean of the cells** |"
        + " |" * (len(POLICIES) + 1)
        + f" **{statistics.fmean(savings):.2%}** | **{statistics.fmean(closeds):.1%}** |"
    )
    misses = sum(r["results"][p]["misses"] for r in rows for p in POLICIES)
    below = sum(s > 0 for s in savings)
    lines += [
        "",
        f"Bar: misses (all policies) {misses}; respot below RR in {below} of {len(rows)} "
        f"cells; gap closed on average {statistics.fmean(closeds):.1%} (bar: 50%).",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, nargs="+")
    args = parser.parse_args()
    blocks = []
    for path in args.results:
        name = path.stem.removeprefix("results-")
        blocks.append(table(_load(path), name))
    print("\n\n".join(blocks))


if __name__ == "__main__":
    main()
