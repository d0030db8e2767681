"""Progress history on the record, the live progress display, and the timeline picture."""

from __future__ import annotations

import io
import itertools
from datetime import timedelta
from pathlib import Path

import matplotlib.image
from rich.console import Console

from respot.client.plot import draw_timeline, picture_data
from respot.client.progress import ProgressDisplay, RateMeter, format_duration
from respot.client.status import JobStatus
from respot.core.job import JobRecord
from respot.core.states import JobState
from tests.core.factories import at
from tests.sdk.story import TOTAL, interrupted_story


def status_of(record: JobRecord) -> JobStatus:
    return JobStatus(
        record.job_id,
        record.state.value,
        record.progress.step,
        record.progress.total_steps,
        record.interruptions,
        len(record.attempts),
        record.reason,
        record,
    )


def test_progress_history_is_sparse_per_attempt_and_not_notified() -> None:
    # GIVEN a job reporting every 10 steps of 1,000, interrupted once at step 450
    driver, record = interrupted_story()
    history = [e for e in record.timeline if e.kind == "progress"]
    # THEN the record keeps one progress entry per 2% of the total (not one per report)
    steps = [e.data["step"] for e in history]
    assert steps == sorted(steps) and steps[0] == 10 and steps[-1] >= 0.98 * TOTAL
    assert 40 <= len(history) <= 51
    for a, b in itertools.pairwise(history):
        if a.data["attempt"] == b.data["attempt"]:
            assert b.data["step"] - a.data["step"] >= 0.02 * TOTAL
        else:  # the first report of the next attempt is always kept: training resumed then
            assert (a.data["attempt"], b.data["attempt"], b.data["step"]) == (1, 2, 460)
    assert history[-1].data["metrics"] == {"loss": 1.0 / steps[-1]}
    # AND none of them is sent to the notifier (only the job's story is)
    from respot.core.events import AgentReport
    from respot.wire.messages import AgentProgress
    from tests.core.factories import agent

    fresh = driver.apply(
        AgentReport(agent(record, 2, "i-2", AgentProgress(step=TOTAL, total_steps=TOTAL), seq=999))
    )
    assert all(n.kind != "progress" for n in fresh.notes)


def test_picture_data_follows_each_attempt_and_marks_the_interruption() -> None:
    _, record = interrupted_story()
    pic = picture_data(record, now=at(500))
    first, second = pic.attempts
    assert (first.market, first.end_reason) == ("spot", "interrupted")
    assert second.end_reason == "completed"
    assert first.points[0][1] == 0 and first.points[-1][1] == 450
    assert second.restored_step == 450 and second.points[0][1] == 450
    assert second.points[-1][1] == TOTAL
    assert all(s1 <= s2 for a in pic.attempts for (_, s1), (_, s2) in itertools.pairwise(a.points))
    assert len(pic.notices) == 1 and first.start < pic.notices[0] < first.end
    assert [s for _, s in pic.checkpoints] == [200, 400, 450]
    assert pic.interruptions == 1 and pic.paid_usd > 0


def test_the_picture_is_a_png_of_the_expected_size(tmp_path: Path) -> None:
    _, record = interrupted_story()
    deadline = record.created_at + timedelta(seconds=150)
    record = record.model_copy(
        update={"submission": record.submission.model_copy(
            update={"spec": record.spec.model_copy(update={"deadline": deadline})}
        )}
    )  # fmt: skip
    out = draw_timeline(record, tmp_path / "t.png", now=at(500))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert matplotlib.image.imread(out).shape[:2] == (930, 1800)


def test_off_a_terminal_progress_is_plain_lines_without_control_characters() -> None:
    # GIVEN the statuses and events a wait() would see over the job's life
    _, record = interrupted_story()
    out = io.StringIO()
    display = ProgressDisplay(record.job_id, live=False, stream=out)
    step = None
    with display:
        for entry in record.timeline:
            display.on_event(entry)
            step = entry.data.get("step", step)
            snapshot = record.model_copy(deep=True)
            snapshot.progress.step = step
            snapshot.progress.at = entry.at
            if entry.kind != "completed":
                snapshot.state = JobState.RUNNING
            display.on_status(status_of(snapshot))
    text = out.getvalue()
    # THEN the story and progress are there as plain lines, with a measured ETA
    assert "\x1b" not in text and "\r" not in text
    kinds = [line.split()[1] for line in text.splitlines()]
    assert kinds.count("interrupted") == 1 and kinds.count("resumed") == 1
    assert "completed" in kinds and "checkpoint" in kinds
    progress = [line for line in text.splitlines() if " progress " in line]
    assert 5 <= len(progress) <= 25  # every tenth of the way, not every poll
    assert any("ETA" in line for line in progress)


def test_on_a_terminal_the_story_prints_above_a_progress_bar() -> None:
    _, record = interrupted_story()
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=120)
    with ProgressDisplay(record.job_id, console=console, live=True, stream=buffer) as display:
        for entry in record.timeline:
            display.on_event(entry)
        display.on_status(status_of(record))
    text = buffer.getvalue()
    assert "resumed from step 450" in text
    assert f"{TOTAL}/{TOTAL}" in text


def test_rate_meter_measures_the_current_attempt_only() -> None:
    meter = RateMeter(window_seconds=60)
    for t in range(10):
        meter.add(1, 100 + 10 * t, float(t))  # 10 steps/s
    assert meter.eta(190, 290) == 10.0
    meter.add(2, 190, 100.0)  # a new attempt after a long changeover: no rate yet
    assert meter.rate() is None
    assert format_duration(3725) == "1h02m" and format_duration(65) == "1m05s"
