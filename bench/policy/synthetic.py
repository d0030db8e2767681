"""Synthetic spot traces for the sensitivity check of bench/policy/README.md.

    python bench/policy/synthetic.py OUT_DIR [--dev-traces DIR]

writes one directory of trace files per set, in the format of bench/traces (bench/traces/README.md):

- resampled-195s, resampled-32s: the development traces seen at another tick length
  (a'[j] = a[floor(j * G' / 600)]: the same 27 days, other tick boundaries);
- markov-600s: memoryless two-state chains, availability 0.25 / 0.5 / 0.75 with mean
  up-runs of 1 h and 4 h;
- pareto-300s: run lengths (up and down) drawn from Pareto laws with tail index 1.5,
  availability 0.3 / 0.6 / 0.85: long runs and many blips, at 5-minute ticks;
- regimes-900s: days of mostly-available spot alternating with days of scarcity
  (availability within a regime 0.9 or 0.15), at 15-minute ticks.

Seeds are fixed, so the sets are the same on every machine. Nothing here looks at the
benchmark's results; the parameters are round numbers chosen to differ from the
development traces, not to match them.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from pathlib import Path

DAYS_SECONDS = 27 * 24 * 3600  # as long as the development traces


def _write(directory: Path, name: str, gap: int, data: list[int]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    payload = {"metadata": {"gap_seconds": gap}, "data": data}
    (directory / f"{name}.json").write_text(json.dumps(payload))


def resample(data: list[int], gap: int, new_gap: int) -> list[int]:
    """The trace seen every `new_gap` seconds instead of every `gap` seconds."""
    ticks = len(data) * gap // new_gap
    return [data[j * new_gap // gap] for j in range(ticks)]


def markov(rng: random.Random, gap: int, availability: float, mean_up_hours: float) -> list[int]:
    """A two-state chain with the given stationary availability and mean up-run."""
    mean_up_ticks = mean_up_hours * 3600 / gap
    mean_down_ticks = mean_up_ticks * (1 - availability) / availability
    leave = {1: 1 / mean_up_ticks, 0: 1 / mean_down_ticks}
    state = 1 if rng.random() < availability else 0
    data = []
    for _ in range(DAYS_SECONDS // gap):
        data.append(state)
        if rng.random() < leave[state]:
            state = 1 - state
    return data


def pareto_runs(rng: random.Random, gap: int, availability: float, tail: float = 1.5) -> list[int]:
    """Alternating runs with Pareto lengths (minimum one tick), scaled to the availability."""
    # A Pareto law with minimum m and index a has mean m * a / (a - 1).
    base_up = 600.0
    base_down = base_up * (1 - availability) / availability
    data: list[int] = []
    state = 1
    while len(data) < DAYS_SECONDS // gap:
        scale = base_up if state else base_down
        seconds = scale * (1 - rng.random()) ** (-1 / tail)
        data.extend([state] * max(1, math.ceil(seconds / gap)))
        state = 1 - state
    return data[: DAYS_SECONDS // gap]


def regimes(rng: random.Random, gap: int) -> list[int]:
    """Regimes of one to three days, alternately plentiful (0.9) and scarce (0.15)."""
    data: list[int] = []
    plentiful = rng.random() < 0.5
    while len(data) < DAYS_SECONDS // gap:
        days = rng.uniform(1, 3)
        level = 0.9 if plentiful else 0.15
        data.extend(markov(rng, gap, level, 2.0)[: int(days * 86400 / gap)])
        plentiful = not plentiful
    return data[: DAYS_SECONDS // gap]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument(
        "--dev-traces",
        type=Path,
        default=Path(__file__).resolve().parents[1] / "traces" / "aws-2022-10-26",
    )
    args = parser.parse_args()
    for path in sorted(args.dev_traces.glob("*.json")):
        trace = json.loads(path.read_text())
        gap = trace["metadata"]["gap_seconds"]
        data = [1 if a > 0 else 0 for a in trace["data"]]
        for new_gap in (195, 32):
            resampled = resample(data, gap, new_gap)
            _write(args.out / f"resampled-{new_gap}s", path.stem, new_gap, resampled)
    rng = random.Random(2024)
    for availability in (0.25, 0.5, 0.75):
        for mean_up in (1.0, 4.0):
            name = f"f{availability:.2f}_up{mean_up:g}h"
            _write(args.out / "markov-600s", name, 600, markov(rng, 600, availability, mean_up))
    for availability in (0.3, 0.6, 0.85):
        for copy in (1, 2):
            name = f"f{availability:.2f}_{copy}"
            _write(args.out / "pareto-300s", name, 300, pareto_runs(rng, 300, availability))
    for copy in range(1, 7):
        _write(args.out / "regimes-900s", f"regimes_{copy}", 900, regimes(rng, 900))


if __name__ == "__main__":
    main()
