"""Command jobs: the contract between respot and a researcher's own script.

A command job (`TrainingEnvVar(command=["python", "train.py", ...])`) runs the script as it
is, in its own process group, with the job's Python; docs/commands.md is the contract. This
room holds the contract's pieces, shared by the script's side and the agent's side:

- `contract`: the environment variables, the notice file, the checkpoint completeness rule;
- `channel`: `report(step, **metrics)` and `checkpoint_saved(step)`, which any process of the
  job calls (no subclass, no import of anything but the standard library), and the agent's
  reader of what they write;
- `argv`: the argv the agent starts, from the job's command, Python and processes_per_node.

It imports nothing of respot: the script's side runs on the job's own Python, where respot's
dependencies may be absent. The agent runs the command in `respot.agent.commandjob`.
"""

from __future__ import annotations

from respot.commands.channel import checkpoint_saved, report

__all__ = ["checkpoint_saved", "report"]
