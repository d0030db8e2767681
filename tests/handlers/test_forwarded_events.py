"""EC2 events forwarded from another region's bus reach the home handlers as they are.

EventBridge delivers a cross-region event unchanged: the original `source` (aws.ec2),
`account`, `detail-type` and `detail`, with `region` the region where it happened (AWS,
"Sending and receiving events between AWS Regions"). The handlers find the job from the
instance id alone, so a satellite region's notice is acted on like the home region's. The
satellite stack's rules forward them (infra/satellite.py, tests/infra/test_satellite.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import lambdas._runtime as runtime
from lambdas import instance_state, spot_interruption
from respot.control.config import ENV_DLQ_URL
from tests.handlers.test_handlers import CONTEXT, Env, submit_job

SATELLITE = "us-west-2"


@pytest.fixture
def home(
    moto_endpoint: str, aws_credentials: None, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Env]:
    """The home region's deployment on the moto server (as test_handlers' `env`)."""
    deployment = Env(moto_endpoint)
    monkeypatch.setenv(ENV_DLQ_URL, deployment.local.dlq_urls["commands"])
    yield deployment
    runtime.install(None)


def forwarded(event: dict[str, Any], region: str = SATELLITE) -> dict[str, Any]:
    """`event` as it arrives on the home bus from `region`'s rule."""
    event = dict(event, region=region)
    event["resources"] = [r.replace("us-east-2", region) for r in event.get("resources", [])]
    return event


def test_a_forwarded_interruption_warning_replaces_the_instance(home: Env) -> None:
    job_id, iid = submit_job(home)
    instance_state.handler(
        forwarded(home.ec2_event("instance-state-change", iid, state="running")), CONTEXT
    )
    event = forwarded(home.ec2_event("spot-interruption-warning", iid))
    assert event["region"] == SATELLITE and event["source"] == "aws.ec2"
    result = spot_interruption.handler(event, CONTEXT)
    assert result["state"] == "REQUESTED"
    record = home.control.jobs.get(job_id)
    assert record is not None and record.interruptions == 1 and len(record.attempts) == 2
    # a second copy (two rules, or a retry) changes nothing
    assert spot_interruption.handler(event, CONTEXT)["outcome"] == "duplicate"


def test_a_forwarded_event_for_an_instance_of_no_job_is_ignored(home: Env) -> None:
    event = forwarded(home.ec2_event("spot-interruption-warning", "i-0123456789abcdef0"))
    assert spot_interruption.handler(event, CONTEXT)["outcome"] == "ignored: not a respot instance"
