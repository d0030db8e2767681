"""The submit and reconcile handlers drive the activity switch (respot/control/activity.py)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

import lambdas._activity as activity_lambda
from lambdas import commands, instance_state, reconcile
from respot.control.activity import ActivitySwitch, Switchboard
from respot.core.states import JobState
from tests.handlers.test_handlers import CONTEXT, Env, submission, submit_job

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


def test_a_refused_submission_turns_the_pollers_on_for_its_news_then_a_tick_turns_them_off(
    env: tuple[Env, ActivitySwitch],
) -> None:
    # GIVEN an idle deployment (pollers off) and a submission its instances could not serve
    deployment, switch = env
    assert not deployment.local.mappings.polling("notifications")
    sub = submission(secrets={"K": "arn:aws:secretsmanager:us-west-2:123456789012:secret:x"})
    response = commands.handler(
        deployment.sqs_event(deployment.sns_envelope(sub.model_dump_json(), "submit")), CONTEXT
    )
    assert response == {"batchItemFailures": []}
    # THEN the job is FAILED, nothing launched, and the notifications poller is on for its news
    record = deployment.control.jobs.get(sub.job_id)
    assert record is not None and record.state is JobState.FAILED
    assert deployment.instances(sub.job_id) == []
    assert deployment.local.mappings.polling("notifications")
    # AND once the news is gone, the tick turns the pollers off: no live job keeps them
    for queue in ("agent-events", "notifications"):
        deployment.clients["sqs"].purge_queue(QueueUrl=deployment.local.queue_urls[queue])
    reconcile.handler(TICK, CONTEXT)
    assert not deployment.local.mappings.polling("notifications")
    assert switch.marker().state != "on"


def test_an_ec2_event_of_a_live_job_turns_on_pollers_a_deploy_disabled(
    env: tuple[Env, ActivitySwitch],
) -> None:
    # GIVEN a live job, then a deploy that re-applied the template: the reconcile schedule and
    # the switched mappings are disabled, while the marker still says "on"
    deployment, switch = env
    job_id, instance_id = submit_job(deployment)
    local = deployment.local
    rule = local.schedule_rule_names["reconcile"]
    local.client("events").disable_rule(Name=rule)
    for queue in ("agent-events", "notifications"):
        local.mappings.update_event_source_mapping(
            UUID=str(local.mappings.uuid_of(queue)), Enabled=False
        )
    assert not _on(deployment) and switch.marker().state == "on"
    # WHEN the next EC2 event of the job arrives (no tick runs: its schedule is off)
    event = deployment.ec2_event("instance-state-change", instance_id, state="running")
    instance_state.handler(event, CONTEXT)
    # THEN the schedule and the pollers are on again
    assert _on(deployment) and local.mappings.polling("notifications")
    assert local.client("events").describe_rule(Name=rule)["State"] == "ENABLED"
    record = deployment.control.jobs.get(job_id)
    assert record is not None and not record.state.is_terminal()
