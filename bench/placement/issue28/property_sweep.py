"""The robustness property of `tests/property/test_placement_markets.py`, on many more markets.

    python bench/placement/issue28/property_sweep.py [--seed 11] [--markets 1000]

The test draws 30 markets (hypothesis, derandomized) so that `make test` stays short; this
draws `--markets` more from seeds 10,001-100,000 (a `random.Random(--seed)` stream: market
seed, 2-18 pools, D = 26 or 34 h, d = 0.05 or 0.2 h) and runs the test's own check on each
(the live policy never misses, and its mean over four windows is never above
up-round-robin's by more than one decision). It prints every market that fails and the
count. About 45 s of CPU for 1,000 markets.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "property"))

from test_placement_markets import _check  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--markets", type=int, default=1000)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    failures = 0
    for _ in range(args.markets):
        seed = rng.randint(10_001, 100_000)
        pools = rng.randint(2, 18)
        deadline = rng.choice([26.0, 34.0])
        changeover = rng.choice([0.05, 0.2])
        try:
            _check(seed, pools, deadline, changeover)
        except AssertionError as error:
            failures += 1
            print(f"fails: {error}", flush=True)
    print(f"{failures} of {args.markets} markets fail the property")


if __name__ == "__main__":
    main()
