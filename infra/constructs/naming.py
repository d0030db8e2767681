"""Construct ids from wiring names: "agent-events" -> "AgentEvents"."""

from __future__ import annotations

import re


def pascal_id(name: str) -> str:
    """A PascalCase construct id for a wiring name (kebab- or snake_case)."""
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[-_\s]+", name) if part)
