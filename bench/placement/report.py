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
# Since issue 28 `respot` is the live policy (one job's own sightings) and the same policy
# seeing every pool is `respot-omniscient-view`, shown when the file has it. Files saved
# before issue 28 have `respot` = the policy seeing every pool.
OMNISCIENT_VIEW = "respot-omniscient-view"


def _load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def saving_and_closed(results: dict, policy: str = "respot") -> tuple[float, float]:
    """(RR - policy) / RR and (RR - policy) / (RR - optimum), on the means."""
    rr = results["up-round-robin"]["mean"]
    best = results["omniscient"]["mean"]
    ours = results[policy]["mean"]
    return (rr - ours) / rr, (rr - ours) / (rr - best) if rr > best else float("nan")


def table(rows: list[dict], name: str) -> str:
    first = rows[0]
    policies = POLICIES + ([OMNISCIENT_VIEW] if OMNISCIENT_VIEW in first["results"] else [])
    lines = [
        f"### {name}: {len(first['pools'])} pools ({', '.join(first['pools'])}), "
        f"{first['windows_per_trace']} windows",
        "",
        "| D (h) | d (h) | " + " | ".join(policies) + " | saving vs RR | gap closed |",
        "|---" * (len(policies) + 4) + "|",
    ]
    for row in rows:
        res = row["results"]
        cells = [
            f"{res[p]['mean']:.4f} / {res[p]['p75']:.4f} / {res[p]['misses']}" for p in policies
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
        + " |" * (len(policies) + 1)
        + f" **{statistics.fmean(savings):.2%}** | **{statistics.fmean(closeds):.1%}** |"
    )
    misses = sum(r["results"][p]["misses"] for r in rows for p in policies)
    below = sum(s > 0 for s in savings)
    lines += [
        "",
        f"Bar: misses (all policies) {misses}; respot below RR in {below} of {len(rows)} "
        f"cells; gap closed on average {statistics.fmean(closeds):.1%} (bar: 50%).",
    ]
    if OMNISCIENT_VIEW in first["results"]:
        view = [saving_and_closed(r["results"], OMNISCIENT_VIEW) for r in rows]
        lines.append(
            f"{OMNISCIENT_VIEW} (every pool seen, not the control plane's view): below RR in "
            f"{sum(s > 0 for s, _ in view)} of {len(rows)} cells; gap closed on average "
            f"{statistics.fmean(c for _, c in view):.1%}."
        )
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
