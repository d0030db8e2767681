"""respot: train ML models on spot GPUs, checkpointed to S3 and resumed after every interruption.

from respot import run, TrainingEnvVar

job = run(TrainingEnvVar(name="digits", entry_point="digits.train:DigitsSession",
                         source_dir="examples/digits", deadline="+48h"))
job.wait()
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from respot.client.handle import JobHandle, run
    from respot.client.status import JobStatus
    from respot.commands.channel import checkpoint_saved, report
    from respot.core.states import JobState
    from respot.exceptions import RespotError, SpecError
    from respot.spec.training import DataSourceEnvVar, TrainingEnvVar
    from respot.sweep.client import SweepHandle, sweep
    from respot.sweep.spec import SweepSpec
    from respot.training.notebook import Interrupted, session
    from respot.training.session import TrainingSession

__version__ = "0.1.0"
__all__ = [
    "DataSourceEnvVar",
    "Interrupted",
    "JobHandle",
    "JobState",
    "JobStatus",
    "RespotError",
    "SpecError",
    "SweepHandle",
    "SweepSpec",
    "TrainingEnvVar",
    "TrainingSession",
    "checkpoint_saved",
    "report",
    "run",
    "session",
    "sweep",
]

# The public names are loaded on first use (PEP 562), so that `import respot.control.config` in a
# Lambda handler or on an instance does not also import the laptop's client (cold starts).
_HOMES = {
    "JobHandle": "respot.client.handle",
    "JobStatus": "respot.client.status",
    "run": "respot.client.handle",
    "report": "respot.commands.channel",
    "checkpoint_saved": "respot.commands.channel",
    "JobState": "respot.core.states",
    "RespotError": "respot.exceptions",
    "SpecError": "respot.exceptions",
    "TrainingSession": "respot.training.session",
    "session": "respot.training.notebook",
    "Interrupted": "respot.training.notebook",
    "DataSourceEnvVar": "respot.spec.training",
    "TrainingEnvVar": "respot.spec.training",
    "SweepHandle": "respot.sweep.client",
    "SweepSpec": "respot.sweep.spec",
    "sweep": "respot.sweep.client",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'respot' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
