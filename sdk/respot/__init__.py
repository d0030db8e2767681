"""respot: train ML models on spot GPUs, checkpointed to S3 and resumed after every interruption.

from respot import run, TrainingEnvVar

job = run(TrainingEnvVar(name="digits", entry_point="digits.train:DigitsSession",
                         source_dir="examples/digits", deadline="+48h"))
job.wait()
"""

from respot.client import JobHandle, JobStatus, run
from respot.core.states import JobState
from respot.exceptions import RespotError, SpecError
from respot.session import TrainingSession
from respot.spec import DataSourceEnvVar, TrainingEnvVar

__version__ = "0.1.0"
__all__ = [
    "DataSourceEnvVar",
    "JobHandle",
    "JobState",
    "JobStatus",
    "RespotError",
    "SpecError",
    "TrainingEnvVar",
    "TrainingSession",
    "run",
]
