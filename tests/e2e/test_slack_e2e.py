"""Slack end to end: the real handlers post to the local Slack through slack_sdk over HTTP.

One runtime serves the module. Each test follows one job from `run()` to its last Slack
reply, reading the thread from the local Slack's transcript as the team would see it.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from infra.local.market import ChaosSchedule
from infra.local.runtime import LocalRuntime, RuntimeOptions
from infra.local.slack import SlackThread
from respot.client.handle import run
from respot.core.job import JobRecord
from respot.exceptions import SpecError
from respot.notify import REPLY_KINDS
from respot.spec.training import TrainingEnvVar
from respot.wire.messages import JobSubmission, new_job_id

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SESSIONS = Path(__file__).parent / "sessions"
SCALE = 1.0 / 30.0
CHANNEL = "#ml-training"
MILESTONES = ["queued", "placed", "started", "interrupted", "resumed", "completed"]


@pytest.fixture(scope="module")
def rt() -> Iterator[LocalRuntime]:
    options = RuntimeOptions(
        time_scale=SCALE,
        chaos=ChaosSchedule(job_ids=set()),
        slack_channel=CHANNEL,
        notify_progress_seconds=60.0,  # simulated: a progress reply every 2 s at most
    )
    with LocalRuntime(options) as runtime:
        yield runtime


def counting(name: str, steps: int, **hyper: float) -> TrainingEnvVar:
    return TrainingEnvVar(
        name=name,
        entry_point="e2esessions.counting:CountingSession",
        source_dir=str(SESSIONS),
        hyperparameters={
            "steps": steps,
            "step_seconds": 0.02,
            "checkpoint_every": 40,
            **hyper,
        },
        instance_types=["g5.xlarge"],
    )


def thread_of(rt: LocalRuntime, record: JobRecord) -> SlackThread:
    assert rt.slack is not None
    where = record.notify["slack"]
    return rt.slack.thread(where["channel"], where["ts"])


def reply_kinds(thread: SlackThread) -> list[str]:
    return [str((m.metadata or {})["event_payload"]["kind"]) for m in thread.replies]


def in_order(kinds: list[str], expected: list[str]) -> bool:
    """`expected` appears in `kinds` as a subsequence."""
    rest = iter(kinds)
    return all(any(k == want for k in rest) for want in expected)


def assert_one_complete_thread(rt: LocalRuntime, record: JobRecord) -> SlackThread:
    """One parent card in its final state; one reply per news of the timeline, in order."""
    assert rt.slack is not None
    parents = [m for m in rt.slack.workspace.top_level(CHANNEL) if record.job_id in m.text]
    assert len(parents) == 1, [p.text for p in parents]
    thread = thread_of(rt, record)
    assert thread.parent is parents[0]
    assert thread.parent.text.startswith(f"{record.spec.name} ({record.job_id}) is COMPLETED")
    assert "% saved" in thread.parent.text
    kinds = reply_kinds(thread)
    # Nothing lost, nothing twice: the replies are exactly the timeline's news (progress
    # aside: the timeline keeps a denser history than the throttled notes Slack is sent).
    news = [e.kind for e in record.timeline if e.kind in REPLY_KINDS - {"progress"}]
    told = [k for k in kinds if k != "progress"]
    assert Counter(told) == Counter(news), (told, news)
    stamps = [(m.metadata or {})["event_payload"]["at"] for m in thread.replies]
    assert len(set(zip(kinds, stamps, strict=True))) == len(kinds)
    return thread


def test_an_interrupted_job_tells_its_whole_story_in_one_thread(rt: LocalRuntime) -> None:
    # GIVEN a job whose first instance is interrupted 4 s after it boots. That attempt trains
    # at most 5 s (then at most 1 s of notice hold: 3 s of the 4-s notice are kept to save),
    # 250 steps of 0.02 s: it cannot finish 800, even if the notice comes seconds late; the
    # resumed attempt runs fast.
    assert rt.market is not None and rt.slack is not None
    spec = counting("slack-story", 800, resumed_step_seconds=0.005)
    job_id = new_job_id(spec.name)
    rt.market.chaos.add(job_id, 1, 120.0)
    # WHEN it runs to completion and the notifications drain
    status = rt.run(spec, job_id=job_id).wait(timeout=360, poll_seconds=0.3)
    assert status.state == "COMPLETED"
    assert rt.wait_notifications(30)
    record = rt.job_record(job_id)
    assert record is not None and record.interruptions == 1
    # THEN one thread holds it all: the card in its final state, the news in order
    thread = assert_one_complete_thread(rt, record)
    kinds = reply_kinds(thread)
    assert in_order(kinds, MILESTONES), kinds
    assert "preempted" in kinds
    # AND progress replies, noted at most once per 2 s (60 simulated seconds)
    noted = [
        datetime.fromisoformat(payload["at"])
        for payload in ((m.metadata or {})["event_payload"] for m in thread.replies)
        if payload["kind"] == "progress"
    ]
    assert noted and all((b - a).total_seconds() >= 2.0 for a, b in itertools.pairwise(noted))
    completed = thread.replies[kinds.index("completed")].text
    assert "Completed at step 800" in completed
    assert "on-demand would have cost" in completed and "% saved" in completed
    assert rt.slack.errors() == []
    assert len(thread.parent.edits) >= len(thread.replies) - 1  # edited, never re-posted
    text = rt.slack_thread(job_id)
    assert text.splitlines()[0] == "*:white_check_mark: slack-story: COMPLETED*"


def test_a_slack_outage_never_delays_a_job_and_loses_nothing(rt: LocalRuntime) -> None:
    assert rt.slack is not None and rt.dispatcher is not None
    handle = rt.run(counting("slack-outage", 300))
    # GIVEN the job is running and Slack has its first news
    end = time.monotonic() + 60
    while time.monotonic() < end:
        record = handle.record()
        if record is not None and record.state.value == "RUNNING" and record.notify:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the job never ran")
    # WHEN Slack fails: 500s (until the notifier has met one), then refused connections,
    # until after the job is over
    down = time.monotonic()
    failed_before = sum(1 for f in rt.dispatcher.failures if f[0] == "notify")
    others_failed_before = [f for f in rt.dispatcher.failures if f[0] != "notify"]
    rt.slack.outage(500)
    while not any(c.error == "http 500" for c in rt.slack.calls) and time.monotonic() < down + 10:
        time.sleep(0.05)
    rt.slack.stop()
    status = handle.wait(timeout=240, poll_seconds=0.2)
    # THEN the job completed while Slack was still down, every other function untouched by
    # it: they ran and none failed (only notify, which holds the news back, did)
    assert status.state == "COMPLETED"
    assert not rt.slack.running
    control = [i for i in rt.dispatcher.invocations if i.started >= down]
    control = [i for i in control if i.function != "notify"]
    assert control
    assert [f for f in rt.dispatcher.failures if f[0] != "notify"] == others_failed_before
    # WHEN Slack comes back THEN everything held back arrives, in order, nothing lost or doubled
    rt.slack.start()
    rt.slack.recover()
    assert rt.wait_notifications(60)
    record = rt.job_record(handle.job_id)
    assert record is not None
    thread = assert_one_complete_thread(rt, record)
    assert in_order(reply_kinds(thread), ["queued", "placed", "started", "completed"])
    assert reply_kinds(thread)[-1] == "completed"
    assert any(c.error == "http 500" for c in rt.slack.calls)
    # AND the notifier did meet the outage: its messages went back to the queue, not away
    assert sum(1 for f in rt.dispatcher.failures if f[0] == "notify") > failed_before
    assert_no_dead_letters(rt)


def assert_no_dead_letters(rt: LocalRuntime) -> None:
    assert rt.deployment is not None
    sqs = rt.client("sqs")
    attrs = sqs.get_queue_attributes(
        QueueUrl=rt.deployment.dlq_urls["notifications"],
        AttributeNames=["ApproximateNumberOfMessages"],
    )["Attributes"]
    assert attrs["ApproximateNumberOfMessages"] == "0"


def test_a_submission_that_skipped_run_s_checks_is_refused_as_a_failed_job_told_once(
    rt: LocalRuntime,
) -> None:
    # GIVEN a submission published the way an SDK older than the stack would: signed by the
    # researcher, but never checked by run(); it names a secret in another region
    assert rt.slack is not None
    secret = "arn:aws:secretsmanager:us-west-2:123456789012:secret:respot/jobs/wandb-AbCdEf"
    job_id = new_job_id("past-run")
    sub = JobSubmission(
        job_id=job_id,
        spec=TrainingEnvVar(name="past-run", entry_point="a.b:C", secrets={"WANDB": secret}),
        submitted_at=datetime.now(UTC),
    )
    handle = rt.handle(job_id)
    with pytest.raises(SpecError, match=r"secrets\.WANDB: .* is in us-west-2"):
        run(sub.spec, deployment=rt.sdk_deployment(), session=rt.researcher_session())
    handle.publish(sub)
    # THEN the researcher sees it FAILED, with what run() would have said, and no instance
    status = handle.wait(timeout=120, poll_seconds=0.2)
    assert status.state == "FAILED", status
    said = f"secrets.WANDB: {secret} is in us-west-2; respot's instances"
    assert said in (status.reason or "")
    record = status.record
    assert record is not None and record.attempts == []
    me = rt.researcher_session().client("sts", endpoint_url=rt.sdk_deployment().endpoint_url)
    assert record.submission.submitted_by == me.get_caller_identity()["Arn"]
    # WHEN the same researcher publishes it again (a retrying client)
    handle.publish(sub)
    assert rt.wait_queue("commands", 30) and rt.wait_notifications(30)
    # THEN it changed nothing: one record, one Slack card, one failure reply with the reason
    again = rt.job_record(job_id)
    assert again is not None and again.timeline == record.timeline
    parents = [m for m in rt.slack.workspace.top_level(CHANNEL) if job_id in m.text]
    assert len(parents) == 1, [p.text for p in parents]
    thread = thread_of(rt, again)
    assert reply_kinds(thread).count("failed") == 1, reply_kinds(thread)
    assert any(said in m.text for m in thread.replies)
    instances = rt.client("ec2").describe_instances(
        Filters=[{"Name": "tag:respot:job-id", "Values": [job_id]}]
    )["Reservations"]
    assert instances == []
    assert rt.deployment is not None
    dead = rt.client("sqs").get_queue_attributes(
        QueueUrl=rt.deployment.dlq_urls["commands"], AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    assert dead["ApproximateNumberOfMessages"] == "0"
