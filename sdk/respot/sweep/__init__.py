"""Sweeps on spot: Optuna studies whose trials are respot jobs, driven by the control plane.

The study lives in the job table (an Optuna journal in DynamoDB, `respot.sweep.journal`); the
sweep Lambda tells it each trial's values and submits the next trials (`respot.sweep.engine`),
so a sweep needs no laptop and no server. Optuna is imported only where a sweep is used.
"""

from __future__ import annotations

from respot.sweep.exceptions import SweepError, SweepNotFoundError, SweepStorageError
from respot.sweep.spec import SweepSpec, validate_sweep

__all__ = [
    "SweepError",
    "SweepHandle",
    "SweepNotFoundError",
    "SweepSpec",
    "SweepStatus",
    "SweepStorageError",
    "load_sweep_file",
    "sweep",
    "validate_sweep",
]


def __getattr__(name: str) -> object:
    # The client pulls in boto3 helpers; keep `import respot.sweep` light for the Lambdas.
    if name in ("SweepHandle", "SweepStatus", "load_sweep_file", "sweep"):
        from respot.sweep import client

        return getattr(client, name)
    raise AttributeError(name)
