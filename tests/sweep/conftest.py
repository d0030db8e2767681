"""A job table on the moto server, and a sweep engine on it with fake trial jobs."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest

from respot.sweep.engine import SweepEngine
from respot.sweep.model import SweepRecord, SweepSubmission, Trial
from respot.sweep.spec import validate_sweep
from respot.sweep.table import SweepTable
from respot.wire.messages import CodeArtifact, JobSubmission


@pytest.fixture
def dynamodb(moto_endpoint: str, aws_credentials: None) -> Any:
    return boto3.client("dynamodb", endpoint_url=moto_endpoint, region_name="us-east-1")


@pytest.fixture
def table(dynamodb: Any) -> Iterator[SweepTable]:
    name = f"sweeps-{secrets.token_hex(4)}"
    dynamodb.create_table(
        TableName=name,
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    yield SweepTable(name, dynamodb)
    dynamodb.delete_table(TableName=name)


class FakeJobs:
    """Trial jobs as the engine sees them: what was submitted and cancelled."""

    def __init__(self) -> None:
        self.submitted: dict[str, JobSubmission] = {}
        self.cancelled: list[tuple[str, str]] = []
        self.refuse_first = 0  # refuse this many submissions, the first ones
        self.ended: dict[str, str] = {}  # job id -> the end it reached before a cancel

    def submit(self, submission: JobSubmission) -> None:
        if self.refuse_first > 0:
            self.refuse_first -= 1
            raise RuntimeError("RunInstances said no")
        self.submitted.setdefault(submission.job_id, submission)

    def cancel(self, job_id: str, reason: str) -> str | None:
        self.cancelled.append((job_id, reason))
        return self.ended.get(job_id, "CANCELLED")  # compare-and-set: an earlier end stays

    def copy_code(self, code: CodeArtifact, job_id: str) -> CodeArtifact:
        return code.model_copy(update={"s3_uri": f"s3://b/jobs/{job_id}/code/{code.sha256}.zip"})


class FakeNews:
    def __init__(self) -> None:
        self.posts: list[tuple[str, list[int]]] = []

    def post(self, record: SweepRecord, finished: list[Trial]) -> dict[str, str] | None:
        self.posts.append((record.state.value, [t.number for t in finished]))
        return {"channel": "C1", "ts": "1.0"}


def sweep_spec(**changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": "s",
        "metric": "val_loss",
        "n_trials": 6,
        "parallelism": 2,
        "search_space": {
            "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
            "layers": {"type": "int", "low": 1, "high": 4},
            "opt": {"type": "categorical", "choices": ["adam", "sgd"]},
        },
        "sampler": {"name": "tpe", "seed": 3, "n_startup_trials": 2},
        "pruner": {"name": "median", "n_startup_trials": 1, "n_warmup_steps": 0},
        "job": {"entry_point": "m:S", "hyperparameters": {"steps": 100, "lr": 1.0}},
    }
    spec.update(changes)
    return spec


def submission(sweep_id: str | None = None, **changes: Any) -> SweepSubmission:
    return SweepSubmission(
        sweep_id=sweep_id or f"s-20261123000000-{secrets.token_hex(3)}",
        spec=validate_sweep(sweep_spec(**changes)),
        code=CodeArtifact(s3_uri="s3://b/jobs/x/code/abc.zip", sha256="abc", size_bytes=3),
        submitted_at=datetime.now(UTC),
        submitted_by="arn:aws:sts::123456789012:assumed-role/researcher/alice",
    )


@pytest.fixture
def jobs() -> FakeJobs:
    return FakeJobs()


@pytest.fixture
def news() -> FakeNews:
    return FakeNews()


@pytest.fixture
def engine(table: SweepTable, jobs: FakeJobs, news: FakeNews) -> SweepEngine:
    return SweepEngine(table=table, jobs=jobs, news=news)
