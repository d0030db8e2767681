"""`budget_action: hard` in the control plane (issue 26), on the moto server: once a
researcher has paid her whole monthly budget, an admission pass asks her running job's agent
to checkpoint and stop (the control object in S3, as a planned market move does); when the
agent reports it stopped, the job is CANCELLED with the reason and its checkpoint kept, and
nothing is launched for it. Under the default `hold`, the same spend stops nothing."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from respot.cli.jobs import render_status
from respot.core.events import AgentReport
from respot.core.job import CheckpointInfo
from respot.core.states import JobState
from respot.storage import layout
from respot.wire.messages import AgentMessage, AgentPreempted
from tests.control.test_admission import Account
from tests.control.test_budget_alerts import ANN, _settings
from tests.handlers.test_handlers import Env, env, submission

__all__ = ["env"]


def _running_and_paid(env: Env, usd: float) -> str:
    """A job of ann's, admitted and launched, now RUNNING for an hour at `usd` an hour, with a
    checkpoint at step 40."""
    sub = submission(instance_types=["g5.xlarge"]).model_copy(update={"submitted_by": ANN})
    env.control.submit(sub)
    record = env.control.jobs.get(sub.job_id)
    assert record is not None and record.current is not None
    assert record.current.instance_id is not None
    now = datetime.now(UTC)
    att = record.current.model_copy(
        update={
            "price_per_hour": usd,
            "launched_at": now - timedelta(hours=1),
            "started_at": now - timedelta(minutes=55),
            "last_heard_at": now,
        }
    )
    save_training(env, record, att, now)
    return sub.job_id


def save_training(env: Env, record: Any, att: Any, now: datetime) -> None:
    """`record` saved RUNNING on attempt `att`, heard `now`, its checkpoint at step 40."""
    env.control.jobs.save(
        record.model_copy(
            update={
                "attempts": [att],
                "state": JobState.RUNNING,
                "last_heartbeat_at": now,
                "checkpoint": CheckpointInfo(step=40, manifest_key="m40", attempt=1, at=now),
            }
        ),
        expected_version=record.version,
    )


def _control_object(env: Env, job_id: str) -> dict[str, object] | None:
    try:
        got = env.clients["s3"].get_object(
            Bucket=env.control.bucket, Key=layout.control_key(job_id, 1)
        )
    except ClientError:
        return None
    return json.loads(got["Body"].read())


@pytest.fixture
def queued(env: Env) -> Env:
    env.control.settings = replace(env.control.settings, admission=True)
    env.control.admission.enabled = True
    env.control.admission.account = Account(env)
    return env


def test_hard_checkpoints_and_stops_the_running_job_of_whoever_paid_the_budget(
    queued: Env,
) -> None:
    env = queued
    _settings(env, {"enabled": True, "researcher_budgets": {"ann": 10}, "budget_action": "hard"})
    job_id = _running_and_paid(env, 12.0)
    launched = len(env.instances(job_id))
    # WHEN a pass runs (the tick)
    env.control.admit("the tick")
    # THEN her job's agent is asked to checkpoint and stop, with the reason
    said = _control_object(env, job_id)
    assert said is not None and said["notice"] == "stop"
    assert "has paid $12.00 of its $10.00" in str(said["reason"])
    record = env.control.jobs.get(job_id)
    assert record is not None and record.state is JobState.RUNNING
    assert record.policy["stopping"]["cause"] == "budget"
    # AND `respot status` says so
    from rich.console import Console

    out = Console(record=True, width=200)
    render_status(record, out, datetime.now(UTC))
    assert "stopping    budget: researcher" in out.export_text()
    # AND another pass asks nothing more of it
    version = record.version
    env.control.admit("the tick")
    again = env.control.jobs.get(job_id)
    assert again is not None and again.version == version
    # WHEN the agent reports it stopped after its notice checkpoint
    instance = record.current.instance_id if record.current else None
    assert instance is not None
    body = AgentPreempted(step=44, checkpoint_step=40, notice="stop")
    message = AgentMessage(
        job_id=job_id,
        attempt=1,
        instance_id=instance,
        seq=99,
        sent_at=datetime.now(UTC),
        body=body,
    )
    env.control.apply(job_id, AgentReport(message))
    # THEN it is CANCELLED with the reason and the checkpoint named; its instance goes and
    # nothing new is launched
    final = env.control.jobs.get(job_id)
    assert final is not None and final.state is JobState.CANCELLED
    assert final.reason is not None and "budget_action is hard" in final.reason
    assert "checkpoint at step 40 is kept" in final.reason
    assert env.live_instances(job_id) == [] and len(env.instances(job_id)) == launched


def test_hold_stops_nothing_running(queued: Env) -> None:
    env = queued
    _settings(env, {"enabled": True, "researcher_budgets": {"ann": 10}})
    job_id = _running_and_paid(env, 12.0)
    env.control.admit("the tick")
    assert _control_object(env, job_id) is None
    record = env.control.jobs.get(job_id)
    assert record is not None and record.state is JobState.RUNNING
    assert "stopping" not in record.policy
