"""Progress notes: throttled at the source, so that heartbeats cost the notifier nothing."""

from __future__ import annotations

from datetime import timedelta

from tests.core.factories import at
from tests.notify.story import Story, every_second


def progress_notes(story: Story) -> list[dict[str, object]]:
    """The progress notes the notifier was sent (the timeline keeps its own history)."""
    return [e.data for n in story.notifications for e in n.entries if e.kind == "progress"]


def test_heartbeats_every_30s_for_half_an_hour_make_three_notes_ten_minutes_apart() -> None:
    # GIVEN a job started at t=10s and a 10-minute interval
    story = Story(settings=every_second(600)).submit(0).place("i-1", 5).start("i-1", 1, 10)
    # WHEN the agent reports progress every 30 s for 30 minutes
    for n in range(1, 61):
        story.progress("i-1", 1, n * 10, 10 + 30 * n, total=600, loss=1.0 / n)
    # THEN exactly three notes exist, each carrying the step and time of the one before
    notes = progress_notes(story)
    assert [n["step"] for n in notes] == [200, 400, 600]
    assert [n["since_step"] for n in notes] == [10, 200, 400]
    assert notes[0]["since_at"] == at(40).isoformat()  # the first counts from the first report
    assert notes[1]["since_at"] == at(610).isoformat()
    assert notes[2]["metrics"] == {"loss": 1.0 / 60}
    assert story.record.progress.noted_step == 600
    assert story.record.progress.noted_at == at(1810)
    # AND no other heartbeat was sent; the timeline has its own, denser, history
    assert len(story.notifications) == 4 + 3  # queued, requested, placed, started + notes
    history = [e for e in story.record.timeline if e.kind == "progress"]
    assert len(history) > 3 and all("since_at" not in e.data for e in history)


def test_no_note_while_the_step_stands_still() -> None:
    story = Story(settings=every_second(60)).submit(0).place("i-1", 5).start("i-1", 1, 10)
    story.progress("i-1", 1, 20, 50)
    story.progress("i-1", 1, 50, 100)
    for t in range(200, 1000, 100):
        story.progress("i-1", 1, 50, t)  # stuck: heartbeats without progress
    assert [n["step"] for n in progress_notes(story)] == [50]


def test_a_zero_interval_turns_progress_notes_off() -> None:
    story = Story(settings=every_second(0)).submit(0).place("i-1", 5).start("i-1", 1, 10)
    for n in range(1, 20):
        story.progress("i-1", 1, n, 10 + 600 * n)
    assert progress_notes(story) == []


def test_the_interval_comes_from_the_environment() -> None:
    from respot.control.config import ENV_NOTIFY_PROGRESS_SECONDS, ControlPlaneConfig

    env = {
        "RESPOT_TABLE": "t",
        "RESPOT_BUCKET": "b",
        "RESPOT_LAUNCH_TEMPLATE_ID": "lt-1",
        "RESPOT_SUBNETS": '[{"subnet_id": "s-1", "availability_zone": "us-east-1a"}]',
        "RESPOT_INSTANCE_TYPES": "g5.xlarge",
        "RESPOT_AGENT_QUEUE_URL": "https://sqs/agent",
    }
    assert ControlPlaneConfig.from_env(env).settings().progress_note_interval == timedelta(
        minutes=10
    )
    env[ENV_NOTIFY_PROGRESS_SECONDS] = "20"
    assert ControlPlaneConfig.from_env(env).settings().progress_note_interval == timedelta(
        seconds=20
    )


def test_after_a_resume_the_rate_counts_from_the_first_report_not_across_the_downtime() -> None:
    # GIVEN a note at step 100, then an interruption, 10 minutes down, a resume from step 100
    story = Story(settings=every_second(60)).submit(0).place("i-1", 5).start("i-1", 1, 10)
    story.progress("i-1", 1, 20, 50, total=1000)
    story.progress("i-1", 1, 100, 100, total=1000)
    story.notice("i-1", 1, 110).preempted("i-1", 1, 100, 112)
    story.place("i-2", 700).start("i-2", 2, 720, restored=100)
    # WHEN the new session reports, after 80 s of its own start-up, then 30 s later
    story.progress("i-2", 2, 101, 800, total=1000)
    story.progress("i-2", 2, 150, 830, total=1000)
    # THEN no note is sent before there is a rate, and then it measures from the first report
    notes = progress_notes(story)
    assert [(n["attempt"], n["step"], n["since_step"], n["since_at"]) for n in notes] == [
        (1, 100, 20, at(50).isoformat()),
        (2, 150, 101, at(800).isoformat()),
    ]
