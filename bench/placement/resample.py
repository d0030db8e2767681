"""Held-out trace sets for `respot bench placement`: the same pools at a longer tick.

    python bench/placement/resample.py --factor 2 --out DIR TRACE.json [TRACE.json ...]

Each output file keeps its name; tick t of the output covers ticks t*k .. t*k + k - 1 of the
input and is 1 only if spot was available in all k of them (a run must be kept through the
whole longer tick), `gap_seconds` is k times the input's. Used for the held-out check in
bench/placement/README.md (other tick lengths than the development sets').
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+", type=Path)
    parser.add_argument("--factor", type=int, required=True, help="ticks merged into one (>= 2)")
    parser.add_argument("--out", type=Path, required=True, help="directory for the new files")
    args = parser.parse_args()
    if args.factor < 2:
        parser.error("--factor must be >= 2")
    args.out.mkdir(parents=True, exist_ok=True)
    k = args.factor
    for path in args.traces:
        trace = json.loads(path.read_text())
        data = trace["data"]
        merged = [1 if all(data[i : i + k]) else 0 for i in range(0, len(data) - k + 1, k)]
        gap = trace["metadata"]["gap_seconds"] * k
        out = {"metadata": {"gap_seconds": gap}, "data": merged}
        (args.out / path.name).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
