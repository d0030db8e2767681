"""Synthetic trace sets for `respot bench placement` (`respot.policy.synth`).

    python bench/placement/synth.py --seed 1 --pools 9 --out DIR [--regions R] [--gap 300]
                                    [--days 12]

Writes one trace file per pool into DIR, in the format of `bench/traces/`, then run
`respot bench placement --traces DIR ...`. The same arguments write the same files.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from respot.policy.synth import synth_market, write_market


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--pools", type=int, required=True, help="1 to 30")
    parser.add_argument("--regions", type=int, default=None, help="default: drawn, 1 to 5")
    parser.add_argument("--gap", type=int, default=300, help="tick length G in seconds")
    parser.add_argument("--days", type=float, default=12.0, help="length of the traces")
    parser.add_argument("--out", type=Path, required=True, help="directory for the files")
    args = parser.parse_args()
    try:
        market = synth_market(
            args.seed, pools=args.pools, regions=args.regions, gap_seconds=args.gap, days=args.days
        )
    except ValueError as exc:
        parser.error(str(exc))
    paths = write_market(args.out, market)
    print(f"{len(paths)} pools, {len(market.availability[0])} ticks of {args.gap} s -> {args.out}")


if __name__ == "__main__":
    main()
