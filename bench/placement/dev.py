"""Fast iteration on respot's multi-pool policy: rerun respot alone, reuse the saved baselines.

    python bench/placement/dev.py [--sets dev|heldout|all|NAME ...] [--out DIR]
                                  [--policy respot|respot-live-view|...]

The baselines and the omniscient optimum do not change when respot does, and window starts
are deterministic (`PoolSet.window_starts`), so a respot-only run over the same windows can
be compared with the other policies' means in the saved `results-*.jsonl` of this folder.
This runs `respot` alone on every cell of the chosen sets (the same traces and window counts
as the commands in README.md), prints respot's mean, misses, saving against up-round-robin
and the gap closed per cell and on average, and with `--out` writes merged JSONL files
(saved baselines + the new respot) that `report.py` renders. The held-out sets are built
with `resample.py` under /tmp when missing. A development tool: the figures of record come
from the full commands in README.md. `--policy respot-live-view` runs respot as live places
one job, from its own sightings only (`respot.policy.live_view`), in respot's column.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from respot.policy.bench import Cell
from respot.policy.placement_bench import run_placement_bench
from respot.policy.pools import load_pool_set

HERE = Path(__file__).resolve().parent
TRACES = HERE.parent / "traces"

# name -> (trace paths, windows, resample: (factor, source files) or None)
SETS: dict[str, tuple[list[Path], int, tuple[int, list[Path]] | None]] = {
    "aws-2022-10-26": (sorted((TRACES / "aws-2022-10-26").glob("*_1.json")), 100, None),
    "aws-2023-08-27": (sorted((TRACES / "aws-2023-08-27").glob("*_1.json")), 100, None),
    "aws-2023-04-19": ([TRACES / "aws-2023-04-19"], 8, None),
    "heldout-aws-2022-10-26-8node": (
        sorted((TRACES / "aws-2022-10-26").glob("*_8.json")),
        30,
        None,
    ),
    "heldout-aws-2023-08-27-600s": (
        [Path("/tmp/aws-2023-08-27-600s")],
        30,
        (2, sorted((TRACES / "aws-2023-08-27").glob("*_1.json"))),
    ),
    "heldout-aws-2023-04-19-102s": (
        [Path("/tmp/aws-2023-04-19-102s")],
        30,
        (3, sorted((TRACES / "aws-2023-04-19").glob("*.json"))),
    ),
}
GROUPS = {
    "dev": [name for name in SETS if not name.startswith("heldout")],
    "heldout": [name for name in SETS if name.startswith("heldout")],
}
GROUPS["all"] = GROUPS["dev"] + GROUPS["heldout"]
CELLS = [Cell(48.0, deadline, change) for deadline in (52, 60, 70) for change in (0.05, 0.2)]


def _ensure(name: str) -> list[Path]:
    paths, _, resample = SETS[name]
    if resample is not None and not paths[0].is_dir():
        factor, sources = resample
        subprocess.run(
            [sys.executable, str(HERE / "resample.py"), "--factor", str(factor), "--out"]
            + [str(paths[0])]
            + [str(p) for p in sources],
            check=True,
        )
    return paths


def run_set(
    name: str, out: Path | None, workers: int, policy: str = "respot", base: Path = HERE
) -> list[float]:
    """Run respot (or `policy`) on one set; print its cells; return the gap closed per cell."""
    _, windows, _ = SETS[name]
    saved = [
        json.loads(line)
        for line in (base / f"results-{name}.jsonl").read_text().splitlines()
        if line.strip()
    ]
    started = time.monotonic()
    results = run_placement_bench(
        load_pool_set(_ensure(name)), CELLS, windows, policies=(policy,), workers=workers
    )
    elapsed = time.monotonic() - started
    closed = []
    merged = []
    print(f"{name} ({windows} windows, {elapsed:.0f} s, {policy})")
    for row, result in zip(saved, results, strict=True):
        assert row["deadline_hours"] == result.cell.deadline_hours
        assert row["changeover_hours"] == result.cell.changeover_hours
        assert row["windows_per_trace"] == windows
        new = result.results[policy]
        old = row["results"]["respot"]
        rr = row["results"]["up-round-robin"]["mean"]
        best = row["results"]["omniscient"]["mean"]
        gap = (rr - new.mean) / (rr - best)
        closed.append(gap)
        print(
            f"  {row['deadline_hours']:>4} h {row['changeover_hours']:>4} h: respot "
            f"{new.mean:.4f} (saved {old['mean']:.4f}; RR {rr:.4f}, opt {best:.4f}) "
            f"misses {new.misses}  gap closed {gap:6.1%} (saved "
            f"{(rr - old['mean']) / (rr - best):6.1%}){'  ABOVE RR' if new.mean >= rr else ''}"
        )
        merged.append(dict(row, results={**row["results"], policy: new.to_json()}))
    print(f"  mean gap closed {statistics.fmean(closed):.1%}")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        text = "".join(json.dumps(row) + "\n" for row in merged)
        (out / f"results-{name}.jsonl").write_text(text)
    return closed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="+", default=["dev"], help="dev, heldout, all or names")
    parser.add_argument("--out", type=Path, help="write merged JSONL files here")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--base", type=Path, default=HERE, help="the saved results-*.jsonl to compare and merge"
    )
    parser.add_argument(
        "--policy",
        default="respot",
        choices=[
            "respot",
            "respot-omniscient-view",
            "respot-live-view",
            "respot-live-view-sightings-only",
            "respot-live-view-stop-first",
            "respot-planned",
            "respot-planned-replace",
            "respot-planned-lower",
            "respot-planned-raise",
        ],
    )
    args = parser.parse_args()
    names: list[str] = []
    for item in args.sets:
        names += GROUPS.get(item, [item])
    for name in names:
        if name not in SETS:
            parser.error(f"--sets: unknown set {name!r} (known: {', '.join(SETS)})")
        run_set(name, args.out, args.workers, args.policy, args.base)


if __name__ == "__main__":
    main()
