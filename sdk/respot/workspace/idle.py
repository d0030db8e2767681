"""The idle rule: when a workspace has had no kernel activity and no connected browser for
`idle_minutes`, it is synced and stopped (docs/notebooks.md, "Idle stop").

Pure and standard library only. Its input is what Jupyter Server's REST API says:
`GET /api/status` (`last_activity`: the newest of the server's API activity, kernel activity
and terminal activity; `connections`: kernel websockets) and `GET /api/kernels` (each kernel's
`execution_state`, `connections`, `last_activity`). The supervisor asks with
`no_track_activity=1`, so its own polling never counts as activity.

A workspace is active at an observation when a kernel is busy (or starting: a cell that runs
for hours without output is still work), or a kernel has a connection (a notebook open in a
browser tab); otherwise it was last active at the newest `last_activity` Jupyter reports (a
browser that only lists files keeps the server's API activity fresh).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

BUSY_STATES = frozenset({"busy", "starting", "restarting", "autorestarting"})


def parse_time(text: object) -> datetime | None:
    """Jupyter's ISO-8601 UTC time ('2026-11-27T01:02:03.456789Z'); None if unreadable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def last_active(
    status: Mapping[str, Any], kernels: Sequence[Mapping[str, Any]], now: datetime
) -> datetime | None:
    """When the workspace was last active, by one observation (`now` if it is active now)."""
    if int(status.get("connections") or 0) > 0:
        return now
    for kernel in kernels:
        if kernel.get("execution_state") in BUSY_STATES or int(kernel.get("connections") or 0):
            return now
    times = [parse_time(status.get("last_activity"))]
    times += [parse_time(k.get("last_activity")) for k in kernels]
    seen = [t for t in times if t is not None]
    return max(seen) if seen else None


@dataclass
class IdleWatch:
    """Folds observations into the newest activity seen; `idle_seconds` of none is idle."""

    idle_seconds: float
    started: datetime
    active: datetime = field(init=False)

    def __post_init__(self) -> None:
        if self.idle_seconds <= 0:
            raise ValueError("idle_seconds must be above 0")
        self.active = self.started

    def observe(
        self, status: Mapping[str, Any], kernels: Sequence[Mapping[str, Any]], now: datetime
    ) -> float:
        """Take one observation; the seconds the workspace has been idle since."""
        seen = last_active(status, kernels, now)
        if seen is not None and seen > self.active:
            self.active = min(seen, now)
        return self.idle_for(now)

    def idle_for(self, now: datetime) -> float:
        return max(0.0, (now - self.active).total_seconds())

    def is_idle(self, now: datetime) -> bool:
        return self.idle_for(now) >= self.idle_seconds

    def reason(self, now: datetime) -> str:
        minutes = self.idle_for(now) / 60
        return (
            f"idle for {minutes:.1f} min (no kernel activity and no connected browser since "
            f"{self.active.isoformat(timespec='seconds')}; idle_minutes is "
            f"{self.idle_seconds / 60:g}): the workspace was synced and stopped; "
            "`respot notebook start NAME` brings it back where it was"
        )
