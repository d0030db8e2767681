"""Shared fixtures: fake AWS credentials, a moto server on 127.0.0.1, the AWS sample events."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
AWS_EVENTS = ROOT / "tests" / "events" / "aws"
TRACES = ROOT / "bench" / "traces"

os.environ.setdefault("JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION", "1")
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")


def aws_event(name: str) -> dict[str, Any]:
    """A sample event copied from the AWS documentation (tests/events/aws/<name>.json)."""
    data: dict[str, Any] = json.loads((AWS_EVENTS / f"{name}.json").read_text())
    return data


@pytest.fixture
def aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake credentials so that nothing can reach a real account."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SECURITY_TOKEN", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """A moto server on 127.0.0.1 shared by the session's tests (resources get random names)."""
    from infra.local.cloud import MotoServer

    server = MotoServer()
    url = server.start()
    yield url
    server.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest files first: `slow`, then `e2e`, then the rest, each in collection order.

    `make test` hands whole files to each worker (`--dist loadfile`) in this order
    (`--no-loadscope-reorder`: xdist would otherwise put the files with most tests first); a
    file of a few minutes started last would leave the other cores idle while it runs alone.
    """
    rank = {"slow": 0, "e2e": 1}
    items.sort(
        key=lambda item: min(
            (rank[m.name] for m in item.iter_markers() if m.name in rank), default=2
        )
    )


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: one worker per core this process may run on, plus one.

    Most of the suite's slow tests wait on simulated clocks (boots, notices, holds) rather than
    compute: with one worker per core, the cores were busy 65% of the time (`/usr/bin/time`,
    2 cores, 753 s); one more worker fills the waits (157%, 598 s). bench/busy/README.md.
    """
    return len(os.sched_getaffinity(0)) + 1
