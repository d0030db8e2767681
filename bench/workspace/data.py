"""The workspaces the benchmark syncs: 1,000 small files of a researcher's kinds, or one big file.

Everything is drawn from a seed, so one seed gives the same bytes on every machine. The small
files have the kinds a notebook workspace holds (notebooks, the code next to them, small CSVs,
figures, notes), spread over nested directories, each of a size drawn log-uniformly between
`min_kib` and `max_kib` (most files are a few KiB, a few are near the top). Text kinds get
text, figures random bytes. No two files have the same content (a content-addressed store
would otherwise send a duplicate once, which `aws s3 sync` cannot do: unfair to it).

A change of `percent` of the files rewrites that many files, chosen by the seed, with new
content of a new size (as a save does); every other file keeps its bytes and its mtime. The
big file's change rewrites `percent` of its bytes in place: its size stays, its content (and
so its SHA-256) changes, and each tool sends the whole file again (none sends a part).
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path

import numpy as np

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
BIG_NAME = "data/big.bin"
_CHUNK = 64 * MIB


@dataclass(frozen=True)
class Kind:
    """One kind of file in a workspace: where it lives, its suffix, its share, text or not."""

    folder: str
    suffix: str
    share: float
    subfolders: int
    text: bool


# A notebook workspace: the notebooks, a package of code, data, figures, notes.
KINDS = (
    Kind("notebooks", ".ipynb", 0.15, 3, True),
    Kind("src/pkg", ".py", 0.35, 10, True),
    Kind("data", ".csv", 0.20, 5, True),
    Kind("figures", ".png", 0.15, 4, False),
    Kind("notes", ".md", 0.15, 2, True),
)
_VOCABULARY = (
    "import numpy torch model loss step epoch batch train eval def return self for in if "
    "else x y z lr 0.001 0.9 accuracy = ( ) [ ] : , . # plot data frame mean std seed"
)
_WORDS = tuple(_VOCABULARY.split(" "))
_TOKENS = tuple(w.encode() + b" " for w in _WORDS) * 7 + tuple(w.encode() + b"\n" for w in _WORDS)


def small_paths(n: int) -> list[tuple[str, Kind]]:
    """The relative paths of `n` files, each with its kind (shares as in KINDS, rounded)."""
    counts = [math.floor(n * k.share) for k in KINDS]
    counts[1] += n - sum(counts)  # what rounding left goes to the code
    out: list[tuple[str, Kind]] = []
    for kind, count in zip(KINDS, counts, strict=True):
        for i in range(count):
            sub = f"part{i % kind.subfolders:02d}"
            out.append((f"{kind.folder}/{sub}/file{i:04d}{kind.suffix}", kind))
    return out


def draw_size(rng: np.random.Generator, min_kib: float, max_kib: float) -> int:
    """A size in bytes, log-uniform between `min_kib` and `max_kib` KiB."""
    lo, hi = math.log(min_kib * KIB), math.log(max_kib * KIB)
    return round(math.exp(rng.uniform(lo, hi)))


def content(rng: np.random.Generator, kind: Kind, size: int, label: str) -> bytes:
    """`size` bytes of `kind`'s content; `label` first (so no two files are the same)."""
    head = f"# {label}\n".encode()
    if not kind.text:
        return (head + rng.bytes(size))[:size]
    # Words, one line break in eight; tokens are 2 bytes at least, so size/2 of them suffice.
    picks = rng.integers(0, len(_TOKENS), size=size // 2 + 2)
    body = head + b"".join(itemgetter(*picks.tolist())(_TOKENS))
    return body[:size]


def write_small(
    root: Path, n: int, seed: int, *, min_kib: float = 1, max_kib: float = 20
) -> list[str]:
    """Write `n` small files under `root`; returns their relative paths."""
    if n < 1 or not 0 < min_kib <= max_kib:
        raise ValueError("need n >= 1 and 0 < min_kib <= max_kib")
    rng = np.random.default_rng(seed)
    paths = small_paths(n)
    for rel, kind in paths:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        size = draw_size(rng, min_kib, max_kib)
        path.write_bytes(content(rng, kind, size, f"{rel} seed {seed}"))
    return [rel for rel, _ in paths]


def change_small(
    root: Path, percent: float, seed: int, *, min_kib: float = 1, max_kib: float = 20
) -> list[str]:
    """Rewrite `percent` of the files under `root` (at least one) with new content of a new
    size; returns the relative paths changed. The others are not touched."""
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    count = max(1, round(len(files) * percent / 100))
    rng = np.random.default_rng(seed)
    chosen = sorted(files[int(i)] for i in rng.choice(len(files), size=count, replace=False))
    by_suffix = {k.suffix: k for k in KINDS}
    for rel in chosen:
        path = root / rel
        old = path.stat().st_size
        size = draw_size(rng, min_kib, max_kib)
        while size == old:  # a save changes the size too (sync tools then need no mtime)
            size = draw_size(rng, min_kib, max_kib)
        kind = by_suffix.get(path.suffix, KINDS[1])
        path.write_bytes(content(rng, kind, size, f"{rel} changed seed {seed}"))
    return chosen


def write_big(root: Path, size: int, seed: int) -> list[str]:
    """Write one file of `size` bytes of random content (BIG_NAME); returns its path."""
    rng = np.random.default_rng(seed)
    path = root / BIG_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as out:
        left = size
        while left:
            n = min(left, _CHUNK)
            out.write(rng.bytes(n))
            left -= n
    return [BIG_NAME]


def change_big(root: Path, percent: float, seed: int) -> list[str]:
    """Rewrite `percent` of the big file's bytes in place (one region, at least one byte, at
    an offset drawn from `seed`); returns its path."""
    path = root / BIG_NAME
    size = path.stat().st_size
    n = max(1, min(size, round(size * percent / 100)))
    rng = np.random.default_rng(seed)
    offset = int(rng.integers(0, size - n + 1))
    with path.open("r+b") as fh:
        fh.seek(offset)
        left = n
        while left:
            k = min(left, _CHUNK)
            fh.write(rng.bytes(k))
            left -= k
        fh.flush()
        os.fsync(fh.fileno())
    return [BIG_NAME]


def tree_digest(root: Path) -> dict[str, str]:
    """{relative path: SHA-256} of every file under `root` (what a restore must give back)."""
    out: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            with path.open("rb") as fh:
                out[path.relative_to(root).as_posix()] = hashlib.file_digest(
                    fh, "sha256"
                ).hexdigest()
    return out


def tree_bytes(root: Path) -> int:
    """Total size of the files under `root`."""
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
