"""What a command job sees, and when a checkpoint counts as complete (docs/commands.md).

Environment (set by the agent for the command's process group; docs/commands.md):
- RESPOT_CHECKPOINT_DIR: save checkpoints here; the newest complete one is restored into it
  before the command starts (empty on a first attempt);
- RESPOT_RESUMED: "1" when a checkpoint was restored, else "0"; RESPOT_RESUME_STEP: its step;
- RESPOT_OUTPUT_DIR: uploaded when the job ends (`respot pull`); RESPOT_DATA_DIR: the data;
- RESPOT_TENSORBOARD_DIR: event files written here are synced with the job's TensorBoard;
- RESPOT_JOB_ID, RESPOT_ATTEMPT (1, 2, ...), RESPOT_SEED;
- RESPOT_HYPERPARAMETERS: the spec's hyperparameters as JSON (a sweep trial's parameters);
- RESPOT_NOTICE_FILE: appears, whole, on the notice: {"notice": ..., "reclaim_at": ISO-8601};
- RESPOT_REBALANCE_FILE: appears, whole, on EC2's rebalance recommendation (no signal, no
  stop): {"notice": "rebalance", "reclaim_at": null}; a chance to checkpoint early;
- RESPOT_CHANNEL_DIR: where `respot.report` / `respot.checkpoint_saved` write.

The completeness rule: RESPOT_CHECKPOINT_DIR as a whole is one checkpoint, taken (copied to
a private snapshot, then uploaded, manifest last) only at two moments:
1. when a process of the job calls `respot.checkpoint_saved(step)` (it returns once the
   snapshot is taken: the directory may then be rewritten);
2. when the command exits with status 0 after the notice, if the directory changed since the
   last snapshot (or restore): a clean exit means it finished writing.
Anything else (a save in progress, a process killed or failing after the notice) is never
uploaded: the newest snapshot taken at 1 or 2 stays the job's checkpoint.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

ENV_CHECKPOINT_DIR = "RESPOT_CHECKPOINT_DIR"
ENV_RESUMED = "RESPOT_RESUMED"
ENV_RESUME_STEP = "RESPOT_RESUME_STEP"
ENV_OUTPUT_DIR = "RESPOT_OUTPUT_DIR"
ENV_DATA_DIR = "RESPOT_DATA_DIR"
ENV_TENSORBOARD_DIR = "RESPOT_TENSORBOARD_DIR"
ENV_JOB_ID = "RESPOT_JOB_ID"
ENV_ATTEMPT = "RESPOT_ATTEMPT"
ENV_NOTICE_FILE = "RESPOT_NOTICE_FILE"
ENV_REBALANCE_FILE = "RESPOT_REBALANCE_FILE"
ENV_CHANNEL_DIR = "RESPOT_CHANNEL_DIR"
ENV_HYPERPARAMETERS = "RESPOT_HYPERPARAMETERS"

DEFAULT_STOP_SIGNAL = "SIGTERM"

# When the agent kills a command still running after the notice ("the last safe moment",
# docs/commands.md): KILL_MARGIN_SECONDS before the reclaim instant, or a quarter of the
# notice when that is shorter. The agent's deadlines (respot.agent.notices) and a command that
# plans its own shutdown (respot.workspace.serve) both read it here.
DEFAULT_NOTICE_SECONDS = 120.0  # EC2's warning when the notice carries no readable time
MIN_NOTICE_SECONDS = 2.0  # a notice whose time has (nearly) passed still gets this much
KILL_MARGIN_SECONDS = 30.0

Signature = tuple[tuple[str, int, int], ...]


def write_notice(path: Path, notice: str, reclaim_at: datetime | None) -> None:
    """Make the notice file appear whole: written aside, then renamed into place."""
    body = {"notice": notice, "reclaim_at": reclaim_at.isoformat() if reclaim_at else None}
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(body) + "\n")
    os.replace(partial, path)


def read_notice(path: Path) -> dict[str, str | None] | None:
    """The notice file's content, or None before the notice."""
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def notice_seconds(reclaim_at: datetime | None, now: datetime) -> float:
    """Seconds from `now` to the reclaim instant (EC2's two minutes when unknown)."""
    left = DEFAULT_NOTICE_SECONDS if reclaim_at is None else (reclaim_at - now).total_seconds()
    return max(left, MIN_NOTICE_SECONDS)


def kill_margin(notice: float) -> float:
    """How long before the reclaim instant the agent kills the group, for a notice of `notice`
    seconds (the local runtime scales the two minutes down to a few seconds)."""
    return min(KILL_MARGIN_SECONDS, notice * 0.25)


def seconds_to_kill(reclaim_at: datetime | None, now: datetime) -> float:
    """Seconds from `now` (the notice) until the agent kills a group still running."""
    notice = notice_seconds(reclaim_at, now)
    return notice - kill_margin(notice)


def reclaim_time(notice: dict[str, str | None] | None) -> datetime | None:
    """The notice file's reclaim instant, or None when it has none or it is unreadable."""
    text = (notice or {}).get("reclaim_at")
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        return None
    return value if value.tzinfo is not None else None


def signature(directory: Path) -> Signature:
    """What the checkpoint directory holds: (path, size, mtime) of each file, sorted."""
    entries = []
    for path in sorted(directory.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        st = path.stat()
        entries.append((path.relative_to(directory).as_posix(), st.st_size, st.st_mtime_ns))
    return tuple(entries)


def snapshot_at_exit(*, noticed: bool, exit_code: int, changed: bool) -> bool:
    """Rule 2: is the directory the command left a complete checkpoint to upload?"""
    return noticed and exit_code == 0 and changed
