"""No silent loss of work (issue 25): a job interrupted with no checkpoint anywhere is told so
in its timeline, its Slack thread and `respot status` ("restarts from zero")."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from rich.console import Console

from respot.cli.jobs import render_status
from respot.core.events import InstanceDown, ReconcileTick
from respot.notify import reply_for
from respot.wire.messages import AgentPreempted
from tests.core.factories import SETTINGS, at
from tests.notify.story import Story

SAYS = "restarts from zero: this job never checkpointed"


def interrupted(checkpoint_step: int | None) -> Story:
    story = Story().submit(0).place("i-1", 5).start("i-1", 1, 10).progress("i-1", 1, 40, 20)
    if checkpoint_step is not None:
        story.checkpoint("i-1", 1, checkpoint_step, 25)
    story.notice("i-1", 1, 30)
    body = AgentPreempted(step=40, checkpoint_step=checkpoint_step, notice="spot-interruption")
    story._agent(1, "i-1", body, 32)
    return story


def status_text(story: Story) -> str:
    out = io.StringIO()
    render_status(story.record, Console(file=out, width=200), at(40) + timedelta(seconds=1))
    return out.getvalue()


def test_an_interruption_with_no_checkpoint_anywhere_says_the_job_restarts_from_zero() -> None:
    story = interrupted(None)
    notes = [e for e in story.record.timeline if e.kind == "no-checkpoint"]
    assert len(notes) == 1 and notes[0].text.startswith(SAYS), story.record.timeline
    assert "i-1 stopped at step 40" in notes[0].text
    # Slack: a reply of its own, and the preempted reply does not claim a saved checkpoint
    reply = reply_for(notes[0], story.record)
    assert reply is not None and SAYS in reply.text
    preempted = next(e for e in story.record.timeline if e.kind == "preempted")
    said = reply_for(preempted, story.record)
    assert said is not None and "No checkpoint on the notice" in said.text
    assert "Checkpoint saved" not in said.text
    # `respot status`
    assert f"checkpoint  none: {SAYS}" in status_text(story)


def test_a_job_with_a_checkpoint_is_not_told_it_restarts_from_zero() -> None:
    story = interrupted(30)
    assert not [e for e in story.record.timeline if e.kind == "no-checkpoint"]
    assert SAYS not in status_text(story)


def test_a_command_job_is_named_by_its_argv_in_the_timeline_and_on_slack() -> None:
    story = Story(entry_point=None, command=["python", "train.py", "--epochs", "3"]).submit(0)
    queued = story.record.timeline[0]
    assert queued.text == "queued demo (python train.py --epochs 3)"
    reply = reply_for(queued, story.record)
    assert reply is not None and "python train.py --epochs 3" in reply.text


def lost_without_report(how: str, checkpoint_step: int | None = None) -> Story:
    """Attempt 1 trains to step 40, then its instance is lost and its agent never reports."""
    story = Story().submit(0).place("i-1", 5).start("i-1", 1, 10).progress("i-1", 1, 40, 20)
    if checkpoint_step is not None:
        story.checkpoint("i-1", 1, checkpoint_step, 25)
    if how == "noticed, then terminated":
        story.notice("i-1", 1, 30).apply(InstanceDown("i-1", 1, "terminated"), 35)
    elif how == "terminated without notice":
        story.apply(InstanceDown("i-1", 1, "terminated"), 30)
    else:  # silent: the tick's heartbeat timeout
        silent = 20 + SETTINGS.heartbeat_timeout.total_seconds() + 1
        story.apply(ReconcileTick(at(silent)), silent)
    return story


HOWS = ["noticed, then terminated", "terminated without notice", "silent"]


@pytest.mark.parametrize("how", HOWS)
def test_an_instance_lost_without_its_agents_report_says_the_job_restarts_from_zero(
    how: str,
) -> None:
    story = lost_without_report(how)
    notes = [e for e in story.record.timeline if e.kind == "no-checkpoint"]
    assert len(notes) == 1 and notes[0].text.startswith(SAYS), story.record.timeline
    assert "i-1" in notes[0].text and "at step 40" in notes[0].text
    reply = reply_for(notes[0], story.record)
    assert reply is not None and SAYS in reply.text
    assert f"checkpoint  none: {SAYS}" in status_text(story)
    # a late report from the agent (it was sent, the instance event came first) adds no other
    story._agent(1, "i-1", AgentPreempted(step=40, notice="spot-interruption"), 60)
    assert len([e for e in story.record.timeline if e.kind == "no-checkpoint"]) == 1


@pytest.mark.parametrize("how", HOWS)
def test_an_instance_lost_after_a_checkpoint_is_not_said_to_restart_from_zero(how: str) -> None:
    story = lost_without_report(how, checkpoint_step=30)
    assert not [e for e in story.record.timeline if e.kind == "no-checkpoint"]
