"""The on-instance agent: prepares a job attempt, runs its session, checkpoints, reports.

`python -m respot.agent` is the entry point on an instance (see `runner` for the steps);
`run_standalone` runs a session the same way with local directories only and no AWS.
"""

from __future__ import annotations

from respot.agent.config import AgentConfig
from respot.agent.runner import Agent, AgentResult
from respot.agent.standalone import run_standalone

__all__ = ["Agent", "AgentConfig", "AgentResult", "run_standalone"]
