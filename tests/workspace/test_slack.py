"""Slack says plainly what a workspace's interruption means (docs/notebooks.md): the
interruption reply of a workspace's thread says "variables are gone; files are kept"; a
training job's does not."""

from __future__ import annotations

import json
from datetime import timedelta

from respot.core.job import TimelineEntry
from respot.core.states import JobState
from respot.notify.cards import reply_for
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
