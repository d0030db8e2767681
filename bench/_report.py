"""What every benchmark shares: statistics, the machine it ran on, and writing its results."""

from __future__ import annotations

import json
import math
import os
import platform
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (0-100) by linear interpolation; None for no values."""
    data = sorted(v for v in values if v is not None)
    if not data:
        return None
    if len(data) == 1:
        return data[0]
    pos = (len(data) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def summary(values: Iterable[float | None]) -> dict[str, float | int | None]:
    """n, median, p95, max of the values that are not None."""
    data = [v for v in values if v is not None]
    return {
        "n": len(data),
        "median": _r(percentile(data, 50)),
        "p95": _r(percentile(data, 95)),
        "max": _r(max(data) if data else None),
    }


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def machine() -> dict[str, Any]:
    """The machine and moment of a run."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cores": os.cpu_count(),
        "cpu": model,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        # The machine may be shared with other work: the load says how busy it was.
        "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()],
        "commit": _commit(),
    }


def _commit() -> str | None:
    """The checkout's commit (with '+changes' if the tree differs from it), or None."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            check=False,
            cwd=root,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return None
    return f"{head}+changes" if head and dirty else head or None


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A markdown table."""

    def cell(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:,.3f}" if abs(v) < 1000 else f"{v:,.0f}"
        return str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def write(name: str, payload: dict[str, Any], markdown: str, *, command: str) -> Path:
    """Write bench/results/<name>.json and <name>.md (with the machine and the command)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {"benchmark": name, "command": command, "machine": machine(), **payload}
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    m = payload["machine"]
    header = (
        f"# {name}\n\n`{command}` — {m['date']}, {m['cores']} cores ({m['cpu']}), "
        f"Python {m['python']}, load average {m['load_average_1_5_15']}\n\n"
    )
    (RESULTS / f"{name}.md").write_text(header + markdown.strip() + "\n")
    return path
