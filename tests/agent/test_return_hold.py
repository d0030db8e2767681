"""A return's stop is held as a spot notice is: real agents, moto, local IMDS, session processes.

On a return from on-demand to spot the control plane asks the on-demand attempt to stop once
the spot instance has launched, with a hold limit (`StopAttempt.hold_seconds`). The on-demand
agent trains on until the spot successor is warm (its successor marker), then checkpoints and
stops; past the limit it stops anyway. Without warm start it is told at once.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from respot.storage import layout
from respot.wire.messages import AgentCheckpoint, AgentCompleted, AgentPreempted, AgentProgress

from .agent_harness import Mailbox, submit_job
from .test_agent import Stage, exists, get_json


@pytest.fixture
def stage(s3: Any, sqs: Any, bucket: str, agent_queue: str, moto_url: str, tmp_path: Path) -> Stage:
    return Stage(s3, bucket, agent_queue, Mailbox(sqs, agent_queue), moto_url, tmp_path)


LONG = {"steps": 20_000, "sleep": 0.01, "resumed_sleep": 0.0, "checkpoint_every": 500}


def ask_to_stop(stage: Stage, job_id: str, attempt: int, hold_seconds: float | None) -> None:
    """What the control plane's StopAttempt effect writes (respot.control.service)."""
    body: dict[str, Any] = {"notice": "stop", "reason": "spot launched for the return"}
    if hold_seconds is not None:
        body["hold_seconds"] = hold_seconds
    stage.s3.put_object(
        Bucket=stage.bucket,
        Key=layout.control_key(job_id, attempt),
        Body=json.dumps(body).encode(),
    )


def told(mailbox: Mailbox, attempt: int) -> bool:
    """Has the session checkpointed for the stop (it was told)?"""
    mailbox.poll()
    return any(
        isinstance(m.body, AgentCheckpoint) and m.body.reason == "notice"
        for m in mailbox.of(attempt)
    )


def last_step(mailbox: Mailbox, attempt: int) -> int:
    return max(
        (m.body.step or 0 for m in mailbox.of(attempt) if isinstance(m.body, AgentProgress)),
        default=0,
    )


def test_the_on_demand_instance_trains_until_its_spot_successor_is_warm(stage: Stage) -> None:
    s3, bucket, mailbox = stage.s3, stage.bucket, stage.mailbox
    sub = submit_job(s3, bucket, hyperparameters=LONG)
    first = stage.boot(sub.job_id, 1)
    second = None
    try:
        mailbox.wait_for(lambda m: isinstance(m.body, AgentCheckpoint), timeout=60)
        # WHEN the control plane asks it to stop for a return, holding for up to 60 s
        ask_to_stop(stage, sub.job_id, 1, hold_seconds=60)
        asked = time.monotonic()
        # THEN the agent holds the stop and the session is not told: it trains on (200 steps,
        # at least 2 s of it, past where it was once holding) while no successor exists.
        # Event-ordered: nothing can tell it before the successor below is booted.
        first.wait_for_log("while the spot successor warms up", timeout=60)
        mailbox.poll()
        held_at = last_step(mailbox, 1)
        mailbox.wait_for(
            lambda m: isinstance(m.body, AgentProgress) and (m.body.step or 0) > held_at + 200,
            timeout=60,
        )
        assert not told(mailbox, 1), mailbox.kinds(1)
        step_before = last_step(mailbox, 1)
        # WHEN the spot successor boots: it warms up, says so, and waits for the handoff
        second = stage.boot(sub.job_id, 2, await_handoff=1)
        code1 = first.wait(120)
        handed_off = time.monotonic()
        code2 = second.wait(120)
    finally:
        first.stop()
        if second is not None:
            second.stop()
    mailbox.poll()
    assert code1 == 0, first.log()
    assert code2 == 0, second.log()
    # THEN it was told once the successor was warm, well before the hold's limit
    marker = get_json(s3, bucket, layout.successor_ready_key(sub.job_id, 1))
    assert "telling the session now: the replacement is warm" in first.log()
    # and not before: its notice checkpoint was sent after the successor's marker was written
    notice = [
        m
        for m in mailbox.of(1)
        if isinstance(m.body, AgentCheckpoint) and m.body.reason == "notice"
    ]
    assert notice and notice[0].sent_at >= datetime.fromisoformat(marker["at"]), marker
    assert handed_off - asked < 60
    preempted = mailbox.of(1)[-1].body
    assert isinstance(preempted, AgentPreempted) and preempted.notice == "stop"
    assert preempted.step == preempted.checkpoint_step  # zero lost work
    assert preempted.checkpoint_step is not None and preempted.checkpoint_step > step_before
    # AND the successor, warm, resumed from exactly that step, after the on-demand's last
    started = [m.body for m in mailbox.of(2) if m.body.kind == "started"]
    assert len(started) == 1 and started[0].warm is True  # type: ignore[attr-defined]
    assert started[0].restored_step == preempted.checkpoint_step  # type: ignore[attr-defined]
    done = mailbox.of(2)[-1].body
    assert isinstance(done, AgentCompleted), mailbox.kinds(2)
    result = get_json(s3, bucket, done.outputs_prefix + "result.json")
    assert result["total"] == sum(range(1, 20_001))
    assert result["resumed_from"] == preempted.checkpoint_step
    firsts = [m.body.first_step_at for m in mailbox.of(2) if isinstance(m.body, AgentProgress)]
    assert preempted.last_step_at is not None
    assert firsts and firsts[-1] is not None and firsts[-1] >= preempted.last_step_at


@pytest.mark.parametrize(
    ("warm_start", "hold_seconds"),
    [
        (False, 60.0),  # no warm hand-off can happen: the hold would only delay the stop
        (True, None),  # a stop with no hold (a move to on-demand): as before
    ],
)
def test_a_stop_that_cannot_be_handed_off_warm_is_told_at_once(
    stage: Stage, warm_start: bool, hold_seconds: float | None
) -> None:
    s3, bucket, mailbox = stage.s3, stage.bucket, stage.mailbox
    sub = submit_job(s3, bucket, hyperparameters=LONG, warm_start=warm_start)
    first = stage.boot(sub.job_id, 1)
    try:
        mailbox.wait_for(lambda m: isinstance(m.body, AgentCheckpoint), timeout=60)
        ask_to_stop(stage, sub.job_id, 1, hold_seconds=hold_seconds)
        asked = time.monotonic()
        code = first.wait(60)
        stopped = time.monotonic()
    finally:
        first.stop()
    mailbox.poll()
    assert code == 0, first.log()
    preempted = mailbox.of(1)[-1].body
    assert isinstance(preempted, AgentPreempted) and preempted.notice == "stop"
    assert preempted.step == preempted.checkpoint_step
    # no successor ever came, and it stopped long before the 60 s it might have held
    assert stopped - asked < 20, first.log()
    assert "holding the notice" not in first.log()
    if not warm_start:
        assert "no notice hold: this job's replacement starts cold" in first.log()


def test_the_hold_ends_at_the_control_planes_limit_without_a_successor(stage: Stage) -> None:
    s3, bucket, mailbox = stage.s3, stage.bucket, stage.mailbox
    sub = submit_job(s3, bucket, hyperparameters=LONG)
    first = stage.boot(sub.job_id, 1)
    try:
        mailbox.wait_for(lambda m: isinstance(m.body, AgentCheckpoint), timeout=60)
        # WHEN the stop holds for at most 4 s and no successor ever says it is warm
        asked_at = datetime.now(UTC)
        ask_to_stop(stage, sub.job_id, 1, hold_seconds=4)
        asked = time.monotonic()
        first.wait_for_log("holding the notice from the session for up to 4.0s", timeout=60)
        code = first.wait(60)
        stopped = time.monotonic()
    finally:
        first.stop()
    mailbox.poll()
    # THEN it checkpointed and stopped once the limit was reached, and says why
    assert code == 0, first.log()
    assert "telling the session now: the hold's time is up" in first.log()
    assert 4 <= stopped - asked < 30, first.log()
    # and the session was not told before the limit: its notice checkpoint came 4 s or more
    # after the stop was asked for (timestamps, so no wall-clock guess about when to look)
    notice = [
        m
        for m in mailbox.of(1)
        if isinstance(m.body, AgentCheckpoint) and m.body.reason == "notice"
    ]
    assert notice and (notice[0].sent_at - asked_at).total_seconds() >= 4, mailbox.kinds(1)
    preempted = mailbox.of(1)[-1].body
    assert isinstance(preempted, AgentPreempted) and preempted.step == preempted.checkpoint_step
    assert exists(s3, bucket, layout.handoff_key(sub.job_id, 1))


def test_the_successor_waits_long_enough_for_a_held_stop() -> None:
    # Once the successor is warm, the on-demand agent sees its marker within a poll, having
    # read the stop within one heartbeat at worst, and has STOP_NOTICE_SECONDS to save and
    # hand off: the successor's default wait for that handoff covers all of it.
    from respot.agent.config import AgentConfig
    from respot.agent.notices import STOP_NOTICE_SECONDS
    from respot.agent.warmstart import HOLD_POLL_SECONDS

    defaults = AgentConfig.from_env(
        {"RESPOT_BUCKET": "b", "RESPOT_AGENT_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/1/q"}
    )
    needed = defaults.heartbeat_seconds + HOLD_POLL_SECONDS + STOP_NOTICE_SECONDS
    assert defaults.handoff_wait_seconds > needed
