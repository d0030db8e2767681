"""Markdown tables from `respot bench policy --json` output (used for bench/policy/README.md).

    python bench/policy/report.py RESULTS.jsonl [--summary NAME]

Without --summary: the full table (every policy, every cell, gap closed). With --summary:
one line per cell comparing Uniform Progress, respot and the optimum, for the sensitivity
section; NAME labels the trace set.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

POLICIES = ["on-demand", "greedy", "uniform-progress", "omniscient", "respot"]


def _load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _saving_and_closed(results: dict) -> tuple[float, float]:
    up = results["uniform-progress"]["mean"]
    best = results["omniscient"]["mean"]
    ours = results["respot"]["mean"]
    return (up - ours) / up, (up - ours) / (up - best) if up > best else float("nan")


def full_table(rows: list[dict]) -> str:
    header = "| D (h) | d (h) | " + " | ".join(POLICIES) + " | saving vs UP | gap closed |"
    lines = [header, "|---" * (len(POLICIES) + 4) + "|"]
    for row in rows:
        res = row["results"]
        cells = [
            f"{res[p]['mean']:.4f} / {res[p]['p75']:.4f} / {res[p]['misses']}" for p in POLICIES
        ]
        saving, closed = _saving_and_closed(res)
        lines.append(
            f"| {row['deadline_hours']} | {row['changeover_hours']} | "
            + " | ".join(cells)
            + f" | {saving:.2%} | {closed:.1%} |"
        )
    savings, closeds = zip(*(_saving_and_closed(r["results"]) for r in rows), strict=True)
    lines.append(
        f"| **mean of the cells** | | | | | | | **{statistics.fmean(savings):.2%}** | "
        f"**{statistics.fmean(closeds):.1%}** |"
    )
    return "\n".join(lines)


def summary(rows: list[dict], name: str) -> str:
    parts = []
    for row in rows:
        res = row["results"]
        saving, closed = _saving_and_closed(res)
        parts.append(
            f"| {name} | {row['deadline_hours']}/{row['changeover_hours']} | "
            f"{res['greedy']['mean']:.4f} | {res['uniform-progress']['mean']:.4f} | "
            f"{res['respot']['mean']:.4f} | {res['omniscient']['mean']:.4f} | "
            f"{saving:+.2%} | {closed:.1%} | {res['respot']['misses']} |"
        )
    savings, closeds = zip(*(_saving_and_closed(r["results"]) for r in rows), strict=True)
    parts.append(
        f"| {name} | **mean** | | | | | **{statistics.fmean(savings):+.2%}** | "
        f"**{statistics.fmean(closeds):.1%}** | |"
    )
    return "\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--summary", metavar="NAME")
    args = parser.parse_args()
    rows = _load(args.results)
    print(summary(rows, args.summary) if args.summary else full_table(rows))


if __name__ == "__main__":
    main()
