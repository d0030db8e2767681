"""One trainer per job across a hand-off, with faults at the S3 boundary (docs/agent.md, step 3).

Real agents, moto behind a fault-injecting proxy (`s3_faults`), local IMDS, session processes.
- The spot successor's marker write fails: it retries (bounded); if it still fails, the
  successor waits for the hand-off as long as its predecessor may be holding its stop and
  saving (the stop's `hold_seconds`), heartbeating meanwhile, instead of training beside it
  after `RESPOT_HANDOFF_WAIT_SECONDS`.
- The predecessor's final manifest PUT is slow: the handoff marker is never written before
  it, so no checkpoint of the old attempt can land after its successor restored.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from respot.storage import layout
from respot.wire.messages import AgentCompleted, AgentPreempted, AgentProgress, AgentStarted

from .agent_harness import AgentProcess, Mailbox, submit_job
from .s3_faults import FaultProxy, Rule
from .test_agent import Stage, exists
from .test_return_hold import LONG, ask_to_stop

SUCCESSOR_MARKER_OF_1 = r"/handoff/0001\.successor\.json$"
CONTROL_OF_1 = r"/control/0001\.json$"


@pytest.fixture
def stage(s3: Any, sqs: Any, bucket: str, agent_queue: str, moto_url: str, tmp_path: Path) -> Stage:
    return Stage(s3, bucket, agent_queue, Mailbox(sqs, agent_queue), moto_url, tmp_path)


@pytest.fixture
def proxy(moto_url: str) -> Iterator[FaultProxy]:
    p = FaultProxy(moto_url).start()
    yield p
    p.stop()


@pytest.fixture
def own_proxy(moto_url: str) -> Iterator[FaultProxy]:
    """A second proxy: the on-demand attempt's own, so a rule can apply to it alone."""
    p = FaultProxy(moto_url).start()
    yield p
    p.stop()


def _started(stage: Stage, attempt: int) -> tuple[int, AgentStarted]:
    """(seq, body) of the attempt's one AgentStarted."""
    found = [(m.seq, m.body) for m in stage.mailbox.of(attempt) if isinstance(m.body, AgentStarted)]
    assert len(found) == 1, stage.mailbox.kinds(attempt)
    return found[0]


def _wait_for_log(agent: AgentProcess, text: str, timeout: float) -> bool:
    """Wait until `text` is in the agent's log (or its process ended); False on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in agent.log():
            return True
        if agent.process.poll() is not None:
            return text in agent.log()
        time.sleep(0.1)
    return False


def _first_wait_report(log: str) -> str:
    return next((line for line in log.splitlines() if "handoff from attempt" in line), "")


def test_a_successor_whose_marker_write_fails_waits_for_its_held_predecessor(
    stage: Stage, proxy: FaultProxy, own_proxy: FaultProxy
) -> None:
    s3, bucket, mailbox = stage.s3, stage.bucket, stage.mailbox
    sub = submit_job(s3, bucket, hyperparameters=LONG)
    # GIVEN S3 refuses every write of the spot successor's warm marker
    refuse = proxy.add(Rule("PUT", SUCCESSOR_MARKER_OF_1, fail=True))
    # (the on-demand attempt talks to S3 through a proxy of its own, so that it can be kept
    # from reading its stop request until the successor has: see below)
    first = stage.boot(sub.job_id, 1, AWS_ENDPOINT_URL=own_proxy.url)
    second = None
    try:
        mailbox.wait_for(lambda m: m.attempt == 1 and m.body.kind == "checkpoint", timeout=60)
        # WHEN the on-demand attempt is asked to stop for a return, held up to 15 s, and the
        # spot successor, which waits only 3 s by default, boots
        unseen = own_proxy.add(Rule("GET", CONTROL_OF_1, fail=True))
        ask_to_stop(stage, sub.job_id, 1, hold_seconds=15)
        second = stage.boot(
            sub.job_id,
            2,
            await_handoff=1,
            AWS_ENDPOINT_URL=proxy.url,
            RESPOT_HANDOFF_WAIT_SECONDS="3",
        )
        # The 15 s hold starts when the on-demand attempt reads its stop request; the successor
        # first boots and tries its marker at once (botocore's jittered back-off, slower on a
        # loaded machine), so let the hold start only once the successor is in its wait and has
        # read the stop, as it is on AWS where the stop comes before the successor launches.
        assert _wait_for_log(second, "is asked to stop", 120), second.log()
        own_proxy.remove(unseen)
        asked = time.monotonic()
        code1 = first.wait(120)
        code2 = second.wait(120)
    finally:
        first.stop()
        if second is not None:
            second.stop()
    mailbox.poll()
    assert code1 == 0, first.log()
    assert code2 == 0, second.log()
    # THEN the marker write was retried, never succeeded, and the hold ran to its limit
    assert len(refuse.hits) >= 3, refuse.hits
    assert not exists(s3, bucket, layout.successor_ready_key(sub.job_id, 1))
    assert "telling the session now: the hold's time is up" in first.log()
    assert time.monotonic() - asked >= 15
    # AND the successor restored the on-demand attempt's final checkpoint: it waited for it
    preempted = mailbox.of(1)[-1].body
    assert isinstance(preempted, AgentPreempted), mailbox.kinds(1)
    assert preempted.step == preempted.checkpoint_step
    seq, started = _started(stage, 2)
    assert started.restored_step == preempted.checkpoint_step, second.log()
    assert "found" in _first_wait_report(second.log()), second.log()
    # AND it heartbeat while it waited (so the control plane does not judge it lost)
    beats = [m for m in mailbox.of(2) if isinstance(m.body, AgentProgress) and m.seq < seq]
    assert len(beats) >= 3, mailbox.kinds(2)
    # AND it trained only after the on-demand attempt's last step: one trainer at a time
    firsts = [m.body.first_step_at for m in mailbox.of(2) if isinstance(m.body, AgentProgress)]
    assert preempted.last_step_at is not None
    assert firsts[-1] is not None and firsts[-1] >= preempted.last_step_at
    assert isinstance(mailbox.of(2)[-1].body, AgentCompleted), mailbox.kinds(2)


def test_a_successor_marker_write_that_fails_for_a_while_is_retried(
    stage: Stage, proxy: FaultProxy
) -> None:
    s3, bucket, mailbox = stage.s3, stage.bucket, stage.mailbox
    sub = submit_job(s3, bucket, hyperparameters=LONG)
    # GIVEN S3 refuses the first 7 writes of the successor's warm marker (more than the 5
    # tries of botocore's standard retry mode: one write call fails)
    refuse = proxy.add(Rule("PUT", SUCCESSOR_MARKER_OF_1, fail=True, times=7))
    first = stage.boot(sub.job_id, 1)
    second = None
    try:
        mailbox.wait_for(lambda m: m.attempt == 1 and m.body.kind == "checkpoint", timeout=60)
        ask_to_stop(stage, sub.job_id, 1, hold_seconds=90)
        asked = time.monotonic()
        second = stage.boot(sub.job_id, 2, await_handoff=1, AWS_ENDPOINT_URL=proxy.url)
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
    # THEN a later write got through and the on-demand attempt stopped for it, not at 90 s
    assert "telling the session now: the replacement is warm" in first.log()
    assert len(refuse.hits) == 7
    assert exists(s3, bucket, layout.successor_ready_key(sub.job_id, 1))
    assert handed_off - asked < 60
    preempted = mailbox.of(1)[-1].body
    assert isinstance(preempted, AgentPreempted)
    assert _started(stage, 2)[1].restored_step == preempted.checkpoint_step


def test_a_slow_final_manifest_never_lands_after_the_handoff(
    stage: Stage, proxy: FaultProxy
) -> None:
    s3, bucket, mailbox = stage.s3, stage.bucket, stage.mailbox
    # A cold job: told at once on the notice, so the timing is the notice's alone.
    # Nothing is pruned, so every manifest attempt 1 ever wrote is still there to compare.
    sub = submit_job(s3, bucket, hyperparameters=LONG, warm_start=False, checkpoint_keep=100)
    first = stage.boot(sub.job_id, 1, AWS_ENDPOINT_URL=proxy.url)
    second = None
    try:
        mailbox.wait_for(lambda m: m.attempt == 1 and m.body.kind == "checkpoint", timeout=60)
        second = stage.boot(sub.job_id, 2, await_handoff=1, RESPOT_HANDOFF_WAIT_SECONDS="30")
        # GIVEN every manifest PUT of attempt 1 takes 8 s from now on (S3 applies it anyway)
        slow = proxy.add(Rule("PUT", r"/checkpoints/manifests/\d+-0001\.json$", delay=8.0))
        # WHEN its spot notice gives it 6 s: the final upload outlasts the notice's deadlines
        first.imds.schedule_interruption("terminate", datetime.now(UTC) + timedelta(seconds=6))
        code1 = first.wait(60)
        code2 = second.wait(120)
        assert proxy.wait_idle(30), "a request held by the proxy never finished"
    finally:
        first.stop()
        if second is not None:
            second.stop()
    mailbox.poll()
    assert code1 == 0, first.log()
    assert code2 == 0, second.log()
    assert slow.hits, "no manifest PUT was slowed: the fault was never injected"
    # THEN what the successor restored is attempt 1's newest checkpoint: none landed after it
    prefix = layout.manifests_prefix(sub.job_id)
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    firsts = [layout.parse_manifest_key(o["Key"]) for o in listed]
    newest_of_1 = max(step for step, attempt in (p for p in firsts if p) if attempt == 1)
    _, started = _started(stage, 2)
    assert started.restored_step == newest_of_1, (started.restored_step, newest_of_1)
    preempted = mailbox.of(1)[-1].body
    assert isinstance(preempted, AgentPreempted)
    assert preempted.checkpoint_step == started.restored_step
