"""The submit and reconcile handlers drive the activity switch (respot/control/activity.py)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

import lambdas._activity as activity_lambda
from lambdas import reconcile
from respot.control.activity import ActivitySwitch, Switchboard
from tests.handlers.test_handlers import CONTEXT, Env, submit_job

TICK = {"source": "aws.events", "detail-type": "Scheduled Event"}


@pytest.fixture
def env(moto_endpoint: str, aws_credentials: None) -> Iterator[tuple[Env, ActivitySwitch]]:
    deployment = Env(moto_endpoint)
    local = deployment.local
    local.mappings.transition_seconds = 0.0
    idle = ["agent-events", "notifications"]
    board = Switchboard(
        local.client("events"),
        local.mappings,
        local.schedule_rule_names["reconcile"],
        [str(local.mappings.uuid_of(q)) for q in idle],
        sleep=lambda s: None,
    )
    switch = ActivitySwitch(
        ddb=deployment.clients["dynamodb"],
        table_name=local.table_name,
        board=board,
        sqs=deployment.clients["sqs"],
        queue_urls=[local.queue_urls[q] for q in idle],
        grace=timedelta(0),  # no grace: the tick may turn off at once
    )
    activity_lambda.install(lambda: switch)
    yield deployment, switch
    activity_lambda.install(None)


def _on(deployment: Env) -> bool:
    return deployment.local.mappings.polling("agent-events")


def test_submit_turns_on_and_a_tick_with_a_live_job_keeps_on(
    env: tuple[Env, ActivitySwitch],
) -> None:
    deployment, switch = env
    assert not _on(deployment)
    submit_job(deployment)
    assert _on(deployment) and switch.marker().state == "on"
    result = reconcile.handler(TICK, CONTEXT)
    assert result["activity"] == "stay-on"
    assert _on(deployment)


def test_a_live_job_whose_tick_failed_still_keeps_the_pollers_on(
    env: tuple[Env, ActivitySwitch], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a live job (its instance then looks gone, so only the live index says it is live)
    deployment, switch = env
    submit_job(deployment)
    control = deployment.control
    monkeypatch.setattr(control.capacity, "managed_instances", lambda: [])

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("this job's tick failed")

    monkeypatch.setattr(control, "apply", broken)
    for queue in ("agent-events", "notifications"):  # nothing waits: only the job is left
        deployment.clients["sqs"].purge_queue(QueueUrl=deployment.local.queue_urls[queue])
    assert switch.waiting_messages() == 0
    # WHEN the tick's look at that job fails (so no result comes back for it)
    result = reconcile.handler(TICK, CONTEXT)
    # THEN the switch still counts it as live and stays on
    assert result["jobs"] == 0
    assert result["activity"] == "stay-on"
    assert _on(deployment) and switch.marker().state == "on"
