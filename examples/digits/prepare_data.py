"""Write the digits dataset as `digits.npz`, the file `DigitsSession` reads.

    python examples/digits/prepare_data.py OUT_DIR     # writes OUT_DIR/digits.npz

The demo uploads that file to s3://respot-demo-data/digits/, which the job's data source
puts at `<data_dir>/digits/digits.npz` on the instance. scikit-learn ships the data: no
download.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np


def write_digits_npz(out_dir: Path) -> Path:
    """Write `out_dir/digits.npz` (x: float32 N x 64 in [0, 1], y: int64 N); returns its path."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "digits.npz"
    np.savez(path, x=x, y=y)
    return path


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("data/digits")
    print(write_digits_npz(target))
