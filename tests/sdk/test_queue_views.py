"""The researcher's view of a held job (issue 26): `respot ls`, `respot status` and the Slack
card say its position, what it waits for and its estimated start in `respot queue`'s words."""

from __future__ import annotations

import io
from dataclasses import replace

from rich.console import Console

from respot.cli.jobs import held_lines, queue_wait_json, render_status, status_json
from respot.core import decide
from respot.core.events import Admitted, QueueWaitNoted, Submitted
from respot.core.job import JobRecord
from respot.notify.cards import status_card
from respot.queue.words import NOT_PLANNED, wait_line
from tests.core.factories import SETTINGS, T0, at, submission

QUEUED_ON = replace(SETTINGS, admission=True)
REASON = "limit researcher_gpus: ann has 2 of 2 GPUs running, this job needs 1"


def _held(job_id: str = "job-1", said: QueueWaitNoted | None = None) -> JobRecord:
    d = decide(None, Submitted(submission(job_id)), now=T0, settings=QUEUED_ON)
    assert d.record is not None
    if said is not None:
        d = decide(d.record, said, now=at(5), settings=QUEUED_ON)
        assert d.record is not None
    return d.record


def _status_text(record: JobRecord) -> str:
    buf = io.StringIO()
    render_status(record, Console(file=buf, width=300), at(10))
    return buf.getvalue()


def test_status_ls_and_the_card_say_position_wait_and_estimate_in_the_same_words() -> None:
    # GIVEN a held job the queue placed #3, waiting for a GPU limit, starting at 10:00 UTC
    record = _held(said=QueueWaitNoted("limit", REASON, 3, at(3600)))
    line = wait_line(3, REASON, at(3600))
    assert line == f"#3 · {REASON} · estimated start 2026-11-21 10:00 UTC"
    # THEN `respot status` prints that line
    assert f"queue       {line}" in _status_text(record)
    # AND `respot ls` lists it under the table, and its JSON (and status --json) has the fields
    assert held_lines([record]) == [f"job-1  {line}"]
    said = queue_wait_json(record)
    assert said is not None
    assert (said["position"], said["waits_for"], said["reason"]) == (3, "limit", REASON)
    assert said["estimated_start"] == at(3600).isoformat()
    assert status_json(record, at(10))["queue"] == said
    # AND the Slack card has a field with the same line, in its plain text too
    card = status_card(record, at(10))
    fields = [f["text"] for b in card.payload()["blocks"] for f in b.get("fields", [])]
    assert f"*In the team's queue*\n{line}" in fields
    assert line in card.text


def test_a_held_job_not_planned_yet_and_an_unknown_estimate_say_so() -> None:
    # GIVEN a held job no pass has planned yet THEN each view says so, not a made-up place
    record = _held()
    assert record.queue_wait is None
    assert held_lines([record]) == [f"job-1  - · {NOT_PLANNED} · estimated start unknown"]
    assert NOT_PLANNED in _status_text(record)
    # GIVEN one waiting for `after:` (not a candidate: no position) and no estimate
    after = _held(said=QueueWaitNoted("after", "waits for job a (RUNNING) to complete"))
    assert held_lines([after]) == [
        "job-1  - · waits for job a (RUNNING) to complete · estimated start unknown"
    ]


def test_only_held_jobs_show_a_place_in_the_queue() -> None:
    # GIVEN the job admitted THEN no view shows a queue line for it
    record = _held(said=QueueWaitNoted("quota", "quota spot/G and VT: 0 of 8 vCPUs free", 1))
    d = decide(record, Admitted("fits"), now=at(20), settings=QUEUED_ON)
    assert d.record is not None
    assert queue_wait_json(d.record) is None and held_lines([d.record]) == []
    assert "queue       " not in _status_text(d.record)
    assert "In the team's queue" not in status_card(d.record, at(30)).text
