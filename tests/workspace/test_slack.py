"""Slack says plainly what a workspace's interruption means (docs/notebooks.md): the
interruption reply of a workspace's thread says "variables are gone; files are kept"; a
training job's does not. A workspace's idle stop is said as such, not as "completed"."""

from __future__ import annotations

import json
from datetime import timedelta

from respot.core.job import JobRecord, TimelineEntry
from respot.core.states import JobState
from respot.notify.cards import reply_for
from respot.workspace import names
from tests.workspace.test_pure import ALICE, T0, job


def interruption() -> TimelineEntry:
    data = {"noticed": True, "instance_id": "i-1", "interruptions": 1, "step": 3}
    return TimelineEntry(at=T0 + timedelta(minutes=5), kind="interrupted", text="", data=data)


def test_a_workspaces_interruption_says_variables_are_gone_files_are_kept() -> None:
    post = reply_for(interruption(), job(1, "nlp", ALICE, JobState.INTERRUPTED))
    assert post is not None
    assert "variables are gone; files are kept" in json.dumps(post.payload())


def test_a_training_jobs_interruption_does_not() -> None:
    record = job(1, "nlp", ALICE, JobState.INTERRUPTED, workspace=False)
    post = reply_for(interruption(), record)
    assert post is not None and "variables are gone" not in json.dumps(post.payload())


def completed(record: JobRecord, metrics: dict[str, float]) -> str:
    record.progress.metrics = metrics
    record.finished_at = T0 + timedelta(minutes=40)
    entry = TimelineEntry(
        at=T0 + timedelta(minutes=40), kind="completed", text="completed", data={"step": 3}
    )
    post = reply_for(entry, record)
    assert post is not None
    return json.dumps(post.payload())


def test_a_workspace_that_stopped_idle_says_so_not_completed() -> None:
    # GIVEN the completion of a workspace whose supervisor reported its idle stop (the
    # metric travels with AgentCompleted: tests/workspace/test_serve.py's idle test)
    record = job(1, "nlp", ALICE, JobState.COMPLETED)
    said = completed(record, {names.IDLE_METRIC: 30.2})
    # THEN its thread says why it stopped, that files are kept, and how to bring it back
    assert "stopped after 30.2 minutes idle" in said
    assert "files are kept" in said and "respot notebook start nlp" in said
    assert "*Completed*" not in said


def test_other_completions_say_completed() -> None:
    # a workspace that completed otherwise (no idle report), and a training job that happens
    # to report a metric of that name, are "Completed" as any job
    for record, metrics in (
        (job(1, "nlp", ALICE, JobState.COMPLETED), {"loss": 0.1}),
        (job(2, "nlp", ALICE, JobState.COMPLETED, workspace=False), {names.IDLE_METRIC: 3.0}),
    ):
        said = completed(record, metrics)
        assert "*Completed*" in said and "minutes idle" not in said
