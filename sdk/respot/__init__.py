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
    from respot.client import JobHandle, JobStatus, run
    from respot.core.states import JobState
    from respot.exceptions import RespotError, SpecError
    from respot.notebook import Interrupted, session
    from respot.session import TrainingSession
    from respot.spec import DataSourceEnvVar, TrainingEnvVar
    from respot.sweep.client import SweepHandle, sweep
    from respot.sweep.spec import SweepSpec

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
    "run",
    "session",
    "sweep",
]

# The public names are loaded on first use (PEP 562), so that `import respot.config` in a
# Lambda handler or on an instance does not also import the laptop's client (cold starts).
_HOMES = {
    "JobHandle": "respot.client",
    "JobStatus": "respot.client",
    "run": "respot.client",
    "JobState": "respot.core.states",
    "RespotError": "respot.exceptions",
    "SpecError": "respot.exceptions",
    "TrainingSession": "respot.session",
    "session": "respot.notebook",
    "Interrupted": "respot.notebook",
    "DataSourceEnvVar": "respot.spec",
    "TrainingEnvVar": "respot.spec",
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
