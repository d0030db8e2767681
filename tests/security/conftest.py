"""Fixtures of the security tests: the handlers' deployment on the shared moto server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import lambdas._runtime as runtime
from respot.control.config import ENV_DLQ_URL
from tests.handlers.test_handlers import Env


@pytest.fixture
def env(
    moto_endpoint: str, aws_credentials: None, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Env]:
    deployment = Env(moto_endpoint)
    monkeypatch.setenv(ENV_DLQ_URL, deployment.local.dlq_urls["commands"])
    yield deployment
    runtime.install(None)
