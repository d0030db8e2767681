"""Render `compare.py`'s JSONL files as per-cell tables and a leave-one-set-out choice.

    python bench/placement/issue28/planner_report.py bench/placement/issue28/planner/cmp-*.jsonl

Per set: each cell's mean / p75 / misses per policy, saving against up-round-robin and gap
closed; the mean gap closed per policy. Leave-one-set-out over the development sets
(`aws-*`): for each, the policy with the best mean gap closed over the *other two* is
chosen and its figure on the held-out one reported.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def main() -> None:
    rows = [json.loads(line) for p in sys.argv[1:] for line in Path(p).read_text().splitlines()]
    sets: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        sets[row["set"]].append(row)
    closed: dict[str, dict[str, float]] = {}
    for name, cells in sets.items():
        policies = list(dict.fromkeys(r["policy"] for r in cells))
        keys = list(dict.fromkeys((r["deadline_hours"], r["changeover_hours"]) for r in cells))
        print(f"\n### {name} ({cells[0]['windows']} windows a cell)\n")
        print("| D (h) | d (h) | RR | optimum | " + " | ".join(policies) + " |")
        print("|---|---|---|---|" + "---|" * len(policies))
        for key in keys:
            here = {
                r["policy"]: r for r in cells if (r["deadline_hours"], r["changeover_hours"]) == key
            }
            first = next(iter(here.values()))
            out = [
                f"{key[0]:g}",
                f"{key[1]:g}",
                f"{first['up-round-robin']:.4f}",
                f"{first['omniscient']:.4f}",
            ]
            for p in policies:
                r = here[p]
                out.append(
                    f"{r['mean']:.4f} / {r['p75']:.4f} / {r['misses']}; "
                    f"{100 * r['saving']:.2f}%, {100 * r['gap_closed']:.1f}%"
                )
            print("| " + " | ".join(out) + " |")
        means = {
            p: statistics.fmean(r["gap_closed"] for r in cells if r["policy"] == p)
            for p in policies
        }
        above = {
            p: sum(1 for r in cells if r["policy"] == p and r["mean"] > r["up-round-robin"])
            for p in policies
        }
        closed[name] = means
        row = " | ".join(f"{100 * means[p]:.1f}% ({above[p]} above RR)" for p in policies)
        print(f"| **mean gap closed** | | | | {row} |")
    dev = sorted(name for name in closed if name.startswith("aws-"))
    if len(dev) == 3:
        print("\n### Leave one development set out\n")
        print("| held out | chosen on the other two | its gap closed there | respot there |")
        print("|---|---|---|---|")
        for out in dev:
            others = [s for s in dev if s != out]
            policies = list(closed[out])
            chosen = max(policies, key=lambda p: statistics.fmean(closed[s][p] for s in others))
            print(
                f"| {out} | {chosen} | {100 * closed[out][chosen]:.1f}% | "
                f"{100 * closed[out].get('respot', float('nan')):.1f}% |"
            )


if __name__ == "__main__":
    main()
