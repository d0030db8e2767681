"""The local channel between a command job's processes and the agent: a spool directory.

Any process of the job (every torchrun rank, a DataLoader worker, a shell script's child)
calls `report` or `checkpoint_saved`; each call writes one small JSON file into
RESPOT_CHANNEL_DIR, aside first and then renamed, so the agent never reads half a message.
The agent (`ChannelReader`) reads them in the order they were written and removes each one
once it has acted on it; `checkpoint_saved` waits for that removal, so when it returns the
checkpoint directory has been snapshotted and may be rewritten.

Standard library only: this runs on the job's own Python (respot puts only its own package
on the command's path, not its dependencies). Outside a respot job (no RESPOT_CHANNEL_DIR)
both calls do nothing and return False, so a script runs the same on a laptop.
"""

from __future__ import annotations

import atexit
import itertools
import json
import logging
import math
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from respot.commands.contract import ENV_CHANNEL_DIR

logger = logging.getLogger(__name__)

REPORT_INTERVAL_SECONDS = 0.5  # one report file per process per this (the newest is kept)
CHECKPOINT_WAIT_SECONDS = 600.0  # checkpoint_saved waits this long at most for the snapshot
MAX_MESSAGE_BYTES = 64 * 1024
MAX_METRICS = 50
MAX_STEP = 2**62


class _Throttle:
    """This process's report throttle: when the last one left, and the one held back."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.last_sent = 0.0
        self.pending: dict[str, Any] | None = None


_throttle = _Throttle()
_seq = itertools.count()


def _channel() -> Path | None:
    value = os.environ.get(ENV_CHANNEL_DIR)
    return Path(value) if value else None


def _write(directory: Path, body: dict[str, Any]) -> Path:
    name = f"{time.time_ns():020d}-{os.getpid()}-{next(_seq):06d}.json"
    final = directory / name
    partial = directory / f".{name}.partial"
    partial.write_text(json.dumps(body))
    os.replace(partial, final)
    return final


def _metrics(metrics: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, raw in metrics.items():
        # A tensor's or NumPy's scalar becomes a float; anything else raises here.
        value = float(raw)
        if math.isfinite(value):
            out[str(key)[:128]] = value
    return out


def report(step: int, total_steps: int | None = None, **metrics: Any) -> bool:
    """Tell respot the job's step and metrics (progress, ETA, Slack, TensorBoard, sweeps).

    Cheap to call every step: at most one message per process every half second leaves,
    the newest one (a held-back one leaves with the next call, `checkpoint_saved`, or at exit).
    """
    directory = _channel()
    if directory is None:
        return False
    body = {
        "type": "report",
        "step": int(step),
        "total_steps": None if total_steps is None else int(total_steps),
        "metrics": _metrics(metrics),
        "at": time.time(),
    }
    now = time.monotonic()
    with _throttle.lock:
        if now - _throttle.last_sent < REPORT_INTERVAL_SECONDS:
            _throttle.pending = body
            return True
        _throttle.pending, _throttle.last_sent = None, now
    _send(directory, body)
    return True


def flush() -> None:
    """Send a report that the half-second throttle held back (also run at exit)."""
    directory = _channel()
    with _throttle.lock:
        body, _throttle.pending = _throttle.pending, None
        _throttle.last_sent = time.monotonic()
    if body is not None and directory is not None:
        _send(directory, body)


def _send(directory: Path, body: dict[str, Any]) -> None:
    try:
        _write(directory, body)
    except OSError as exc:  # the attempt's directory is gone: the agent is not listening
        logger.warning("respot: could not report (%s)", exc)


def checkpoint_saved(step: int, *, timeout: float = CHECKPOINT_WAIT_SECONDS) -> bool:
    """Say that RESPOT_CHECKPOINT_DIR now holds a complete checkpoint of `step`.

    Returns once the agent has snapshotted the directory (True), so the caller may rewrite
    it; False outside a respot job, if the agent's snapshot failed (the agent's log says
    why; the job's checkpoint stays the one before), or if no agent took it within `timeout`
    seconds.
    """
    directory = _channel()
    if directory is None:
        return False
    flush()
    path = _write(directory, {"type": "checkpoint", "step": int(step), "at": time.time()})
    deadline = time.monotonic() + timeout
    while path.exists():
        if time.monotonic() >= deadline:
            logger.warning("respot: no snapshot of step %d within %.0fs", step, timeout)
            return False
        time.sleep(0.02)
    failed = _failed_marker(path)
    if failed.exists():
        failed.unlink(missing_ok=True)
        logger.warning("respot: the snapshot of step %d failed (the agent's log says why)", step)
        return False
    return True


def _failed_marker(message: Path) -> Path:
    """Written by the agent beside a checkpoint message it could not snapshot, before it
    removes the message (not a `.json`: the reader never takes it for a message)."""
    return message.with_suffix(".failed")


atexit.register(flush)


# ---- the agent's side ------------------------------------------------------------------------


@dataclass(frozen=True)
class ChannelMessage:
    """One message a process of the job wrote."""

    path: Path
    kind: Literal["report", "checkpoint"]
    step: int
    total_steps: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    at: float | None = None


class ChannelReader:
    """Reads the spool directory in the order the messages were written."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.rejected = 0

    def poll(self) -> list[ChannelMessage]:
        """The messages waiting, oldest first; a malformed one is removed and skipped.
        Reports are removed as they are read; a checkpoint stays until `done`."""
        out: list[ChannelMessage] = []
        for path in sorted(self.directory.glob("[0-9]*.json")):
            message = _parse(path)
            if message is None:
                self.rejected += 1
                logger.warning("ignoring a malformed message from the command: %s", path.name)
                path.unlink(missing_ok=True)
                continue
            if message.kind == "report":
                path.unlink(missing_ok=True)
            out.append(message)
        return out

    @staticmethod
    def done(message: ChannelMessage, *, ok: bool = True) -> None:
        """The checkpoint is snapshotted (`ok`) or its snapshot failed: its
        `checkpoint_saved` call returns True or False."""
        if not ok:
            _failed_marker(message.path).touch()
        message.path.unlink(missing_ok=True)


def _parse(path: Path) -> ChannelMessage | None:
    try:
        if path.stat().st_size > MAX_MESSAGE_BYTES:
            return None
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("type") not in ("report", "checkpoint"):
        return None
    step = data.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
        return None
    total = data.get("total_steps")
    if total is not None and (
        isinstance(total, bool) or not isinstance(total, int) or not 0 < total <= MAX_STEP
    ):
        total = None
    raw = data.get("metrics") or {}
    metrics: dict[str, float] = {}
    if isinstance(raw, dict):
        for key, value in list(raw.items())[:MAX_METRICS]:
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if number and math.isfinite(value):
                metrics[str(key)[:128]] = float(value)
    at = data.get("at")
    return ChannelMessage(
        path=path,
        kind=data["type"],
        step=step,
        total_steps=total,
        metrics=metrics,
        at=float(at) if isinstance(at, int | float) and not isinstance(at, bool) else None,
    )
