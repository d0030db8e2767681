"""The on-instance agent: prepares a job attempt, runs its session, checkpoints, reports.

`python -m respot.agent` is the entry point on an instance (see `runner` for the steps);
`run_standalone` runs a session the same way with local directories only and no AWS.
Names are imported on first use, so the session process (`session_main`) stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from respot.agent.config import AgentConfig
    from respot.agent.runner import Agent, AgentResult
    from respot.agent.standalone import run_standalone

__all__ = ["Agent", "AgentConfig", "AgentResult", "run_standalone"]

_WHERE = {
    "Agent": "respot.agent.runner",
    "AgentResult": "respot.agent.runner",
    "AgentConfig": "respot.agent.config",
    "run_standalone": "respot.agent.standalone",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'respot.agent' has no attribute {name!r}")
