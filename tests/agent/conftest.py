"""Fixtures of the agent tests: a real moto server, a bucket, a queue, a local IMDS server."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

REGION = "us-east-1"
FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
}
JOBS_DIR = Path(__file__).parent / "jobs"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    """A moto server on 127.0.0.1 (random port), shared by the agent tests."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def fake_aws(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Fake credentials in this process's environment; nothing can reach a real account."""
    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    return dict(FAKE_CREDENTIALS)


@pytest.fixture
def s3(moto_url: str, fake_aws: dict[str, str]) -> Any:
    return boto3.client("s3", endpoint_url=moto_url, region_name=REGION)


@pytest.fixture
def sqs(moto_url: str, fake_aws: dict[str, str]) -> Any:
    return boto3.client("sqs", endpoint_url=moto_url, region_name=REGION)


@pytest.fixture
def bucket(s3: Any) -> str:
    name = f"respot-test-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    return name


@pytest.fixture
def agent_queue(sqs: Any) -> str:
    return str(sqs.create_queue(QueueName=f"agent-{uuid.uuid4().hex[:12]}")["QueueUrl"])


def child_env(**extra: str) -> dict[str, str]:
    """An environment for a child process: this one's PATH etc., fake AWS, and `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "RESPOT_"))}
    env.update(FAKE_CREDENTIALS)
    env.update(extra)
    return env
