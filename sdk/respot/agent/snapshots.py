"""Consistent snapshots of a checkpoint directory, cheap enough to take at every checkpoint.

A snapshot is a private, never-modified copy of the directory in a staging area. Files whose
(inode, size, mtime, ctime) did not change since the previous snapshot are hard-linked from
it; the others are copied. The upload then reads the snapshot while training goes on and
rewrites the checkpoint directory.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

PARTIAL_SUFFIX = ".partial"


@dataclass(frozen=True)
class _Entry:
    signature: tuple[int, int, int, int]
    snapshot_path: Path


@dataclass(frozen=True)
class SnapshotStats:
    """What the newest snapshot cost."""

    files: int
    copied_bytes: int
    linked_bytes: int


class CheckpointSnapshots:
    """Take snapshots of `source` into numbered directories under `staging_root`."""

    def __init__(self, source: Path, staging_root: Path) -> None:
        self.source = Path(source)
        self.staging_root = Path(staging_root)
        self.staging_root.mkdir(parents=True, exist_ok=True)
        self._seq = 0
        self._index: dict[str, _Entry] = {}
        self.last_stats = SnapshotStats(0, 0, 0)

    def take(self, step: int) -> Path:
        """Snapshot `source` now; returns the snapshot directory (named `<seq>-<step>`)."""
        self._seq += 1
        final = self.staging_root / f"{self._seq:06d}-{step:012d}"
        partial = final.with_name(final.name + PARTIAL_SUFFIX)
        if partial.exists():
            shutil.rmtree(partial)
        partial.mkdir(parents=True)
        index: dict[str, _Entry] = {}
        copied = linked = 0
        for path in sorted(self.source.rglob("*")):
            if path.is_symlink() or not path.is_file():
                continue
            rel = path.relative_to(self.source).as_posix()
            st = path.stat()
            signature = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            target = partial / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            previous = self._index.get(rel)
            if previous is not None and previous.signature == signature:
                try:
                    os.link(previous.snapshot_path, target)
                    linked += st.st_size
                except OSError:
                    # The previous snapshot was already uploaded and removed: copy instead.
                    shutil.copy2(path, target)
                    copied += st.st_size
            else:
                shutil.copy2(path, target)
                copied += st.st_size
            index[rel] = _Entry(signature, final / rel)
        os.rename(partial, final)
        self._index = index
        self.last_stats = SnapshotStats(len(index), copied, linked)
        return final


def snapshot_seq(path: Path) -> int | None:
    """The sequence number of a snapshot directory, or None if `path` is not a complete one."""
    head, _, _ = path.name.partition("-")
    if path.name.endswith(PARTIAL_SUFFIX) or not head.isdigit():
        return None
    return int(head)
