"""A checkpoint the restore refused as corrupt is in the job's story, not only the agent's log
(issue 24, item 11): the timeline and Slack say which step was refused and which was used."""

from __future__ import annotations

from respot.core.events import AgentReport, InterruptionNotice
from respot.notify.cards import reply_for
from respot.wire.messages import AgentStarted, RefusedCheckpoint
from tests.core.factories import agent
from tests.core.test_lifecycle import started_job

REFUSED = RefusedCheckpoint(
    step=60,
    manifest_key="jobs/job-1/checkpoints/manifests/000000000060-0001.json",
    reason="state.pt has SHA-256 0123456789ab, the manifest says ba9876543210",
)


def resumed_with(body: AgentStarted):  # type: ignore[no-untyped-def]
    d = started_job()
    assert d.job is not None
    d.apply(InterruptionNotice("i-1", 1, "interruption", "terminate"), 20)
    d.launch_ok("i-2", 21)
    d.apply(AgentReport(agent(d.job, 2, "i-2", body)), 30)
    return d.job


def test_the_timeline_says_which_step_was_refused_and_which_was_used() -> None:
    job = resumed_with(AgentStarted(restored_step=40, refused_checkpoints=[REFUSED]))
    (entry,) = [e for e in job.timeline if e.kind == "checkpoint-refused"]
    assert entry.text.startswith("checkpoint at step 60 refused as corrupt (state.pt has SHA-256")
    assert entry.text.endswith("resumed from step 40 instead")
    assert entry.data["restored_step"] == 40 and entry.data["refused"][0]["step"] == 60
    # AND it comes before the resume it explains, which still says where it resumed
    kinds = [e.kind for e in job.timeline]
    assert kinds.index("checkpoint-refused") == kinds.index("resumed") - 1
    assert job.attempts[1].restored_step == 40
    # AND Slack posts it as a reply of its own, with both steps
    post = reply_for(entry, job)
    assert post is not None
    assert "Checkpoint refused as corrupt" in str(post.blocks)
    assert "step 60" in post.text and "resumed from step 40 instead" in post.text


def test_no_usable_checkpoint_says_the_job_started_over() -> None:
    job = resumed_with(AgentStarted(restored_step=None, refused_checkpoints=[REFUSED]))
    (entry,) = [e for e in job.timeline if e.kind == "checkpoint-refused"]
    assert "no older checkpoint was usable: started from the beginning" in entry.text


def test_a_clean_restore_adds_no_refusal() -> None:
    job = resumed_with(AgentStarted(restored_step=40))
    assert not [e for e in job.timeline if e.kind == "checkpoint-refused"]
    assert '"refused_checkpoints"' not in AgentStarted(restored_step=40).model_dump_json(
        exclude_none=True
    )
