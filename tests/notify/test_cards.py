"""Block Kit cards: every kind of news, Slack's limits enforced, numbers that add up."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from slack_sdk.models.blocks import SectionBlock

from respot.core.job import TimelineEntry
from respot.core.states import JobState
from respot.notify import REPLY_KINDS, reply_for, status_card
from respot.notify.cards import clip, code_tail, duration, escape, eta_seconds, usd
from tests.core.factories import at
from tests.notify.story import Story, every_second, interrupted_story

PRICES = {"g5.xlarge": 1.0}  # round numbers: on-demand $1/h


def section_texts(payload: dict[str, object]) -> list[str]:
    texts = []
    for block in payload["blocks"]:  # type: ignore[attr-defined]
        if block.get("text"):
            texts.append(block["text"]["text"])
        texts.extend(f["text"] for f in block.get("fields") or [])
        texts.extend(e["text"] for e in block.get("elements") or [])
    return texts


def test_every_reply_kind_of_an_interrupted_job_builds_within_slack_limits() -> None:
    # GIVEN every notification of a job interrupted once and resumed to completion
    story = interrupted_story()
    entries = [e for n in story.notifications for e in n.entries]
    # WHEN each entry is turned into its reply against the final record
    replies = {e.kind: reply_for(e, story.record, prices=PRICES) for e in entries}
    # THEN the news kinds have replies whose blocks pass slack_sdk's checks, the rest none
    expected = {"queued", "placed", "started", "progress", "interrupted", "preempted", "resumed"}
    expected |= {"completed"}
    assert {k for k, r in replies.items() if r is not None} == expected
    assert replies["requested"] is None and replies["checkpoint"] is None
    for kind, reply in replies.items():
        if reply is None:
            continue
        payload = reply.payload()
        assert payload["text"] and payload["blocks"], kind
        assert payload["metadata"]["event_payload"]["kind"] == kind
        json.dumps(payload)  # what goes over the wire


def test_reply_texts_carry_the_numbers_the_team_asks_about() -> None:
    story = interrupted_story()
    by_kind = {}
    for note in story.notifications:
        for entry in note.entries:
            reply = reply_for(entry, story.record, prices=PRICES)
            if reply is not None:
                by_kind.setdefault(entry.kind, []).append(reply.text)
    # placed: type, AZ, market, price and the on-demand price beside it
    assert by_kind["placed"][0].startswith(":round_pushpin: Placed on spot g5.xlarge in us-east-1a")
    assert "$0.3000/h (on-demand $1.0000/h)" in by_kind["placed"][0]
    # interruption: the step at the notice, the newest checkpoint; then the checkpoint saved
    assert "at step 100" in by_kind["interrupted"][0]
    assert "Checkpoint saved at step 104 on the notice" in by_kind["preempted"][0]
    assert "0 step(s) of work lost" in by_kind["preempted"][0]
    # resumed: new instance, restored step; the downtime is in the context line
    assert "Resumed on i-2 (spot g5.xlarge in us-east-1a) from step 104" in by_kind["resumed"][0]
    # progress: step, percent, ETA from the rate since the previous note
    assert by_kind["progress"][0].startswith(":chart_with_upwards_trend: step 50 of 300 (17%)")
    assert "ETA 5m 00s" in by_kind["progress"][0]  # 50 steps in 60 s: 250 more take 300 s
    # completed: wall time, cost, on-demand cost, savings
    done = by_kind["completed"][0]
    assert "Completed at step 300 in 8m 20s" in done
    # paid: attempt 1 from launch (5 s) to its stop (176 s) at $0.30/h, attempt 2 from 200 s
    # to 500 s at $0.35/h; on-demand: the 136 + 260 s trained plus the first 35 s boot at $1/h
    paid, on_demand = 171 / 3600 * 0.3 + 300 / 3600 * 0.35, 431 / 3600 * 1.0
    saved = 100 * (1 - paid / on_demand)
    assert f"cost {usd(paid)}; on-demand would have cost {usd(on_demand)}, {saved:.0f}% saved" in (
        done
    )
    assert (usd(paid), usd(on_demand), f"{saved:.0f}") == ("$0.043", "$0.120", "64")


def test_resumed_reply_says_the_downtime_since_the_notice() -> None:
    story = interrupted_story()
    entry = next(e for n in story.notifications for e in n.entries if e.kind == "resumed")
    reply = reply_for(entry, story.record)
    assert reply is not None
    assert any("downtime 1m 10s" in t for t in section_texts(reply.payload()))


def test_failed_job_with_a_10000_character_log_is_cut_with_a_note_not_refused() -> None:
    # GIVEN a failure whose log tail is one 10,000-character line after 500 short ones
    story = Story().submit(0).place("i-1", 5).start("i-1", 1, 10)
    log = [f"line {n} <tag> & more" for n in range(500)] + ["E" * 10_000]
    story.fail("i-1", 1, 60, log)
    entry = story.record.timeline[-1]
    # WHEN the reply is built
    reply = reply_for(entry, story.record)
    assert reply is not None
    payload = reply.payload()  # to_dict() raises on any broken limit
    code = payload["blocks"][1]["text"]["text"]
    # THEN the log block fits in a section, ends with the end of the log, and says what was cut
    assert len(code) <= SectionBlock.text_max_length
    assert code.startswith("```\n") and code.endswith("E" * 100 + "\n```")
    assert "earlier line(s) not shown" in code
    # (the agent's message already cut the long line to its end, saying so: respot.wire.limits)
    assert "characters cut by respot" in code
    assert payload["text"] == "Failed: RuntimeError: the loss is NaN"


def test_log_lines_are_escaped_and_cannot_close_the_code_block() -> None:
    text = code_tail(["a < b && c > d", "```rm -rf /```"])
    assert "a &lt; b &amp;&amp; c &gt; d" in text
    assert text.count("```") == 2


@pytest.mark.parametrize("size", [0, 1, 149, 150, 151, 10_000])
def test_a_job_name_or_reason_of_any_length_keeps_the_card_valid(size: int) -> None:
    story = Story(name=("n" * min(max(size, 1), 64))).submit(0)
    story.cancel(3, by="x" * size)
    card = status_card(story.record, at(4))
    payload = card.payload()
    header = payload["blocks"][0]["text"]["text"]
    assert len(header) <= 150
    assert all(len(t) <= 3000 for t in section_texts(payload))


def test_the_card_follows_the_job_from_queued_to_completed() -> None:
    story = interrupted_story()
    seen = {}
    for record in story.records:
        card = status_card(record, record.updated_at, prices=PRICES)
        seen[record.state] = card
        card.payload()
    assert set(seen) == {
        JobState.QUEUED,
        JobState.REQUESTED,
        JobState.STARTING,
        JobState.RUNNING,
        JobState.INTERRUPTED,
        JobState.COMPLETED,
    }
    queued = seen[JobState.QUEUED].text
    assert "is QUEUED: not placed yet; not started; cost so far $0.0000" in queued
    running = seen[JobState.RUNNING].payload()
    fields = " ".join(section_texts(running))
    assert "*Owner*\nana" in fields and "*Instance*\nspot g5.xlarge in us-east-1a (`i-2`)" in fields
    done = seen[JobState.COMPLETED]
    assert done.payload()["blocks"][0]["text"]["text"] == ":white_check_mark: demo: COMPLETED"
    assert "*Wall time*\n8m 20s" in " ".join(section_texts(done.payload()))
    assert done.metadata == {
        "event_type": "respot_job_card",
        "event_payload": {"job_id": "job-1", "state": "COMPLETED", "version": 21},
    }


def test_a_running_card_shows_the_eta_left_from_the_last_progress_note() -> None:
    story = Story(settings=every_second(60)).submit(0).place("i-1", 5).start("i-1", 1, 0)
    story.progress("i-1", 1, 100, 100, total=1000)
    assert "ETA" not in status_card(story.record, at(101)).text  # one point: no rate yet
    story.progress("i-1", 1, 300, 300, total=1000)  # 1 step/s
    card = status_card(story.record, at(400))  # 100 s after that point: 600 s left of 700
    assert "step 300 of 1,000 (30%), ETA 10m 00s" in card.text


def test_eta_is_unknown_without_a_rate_or_a_total() -> None:
    assert eta_seconds({"step": 10}, at(10)) is None
    no_rate = {"step": 10, "total_steps": 100, "since_step": 10, "since_at": at(0).isoformat()}
    assert eta_seconds(no_rate, at(10)) is None
    entry = TimelineEntry(at=at(10), kind="progress", text="", data={"step": 5})
    story = Story().submit(0)
    reply = reply_for(entry, story.record)
    assert reply is not None and "ETA unknown" in reply.text


def test_every_kind_the_core_notes_is_either_a_reply_or_card_only() -> None:
    card_only = {
        "requested",
        "capacity",
        "waiting",
        "checkpoint",
        "rebalance",
        "instance-gone",
        "queue-wait",
    }
    assert REPLY_KINDS.isdisjoint(card_only)
    for kind in card_only:
        entry = TimelineEntry(at=at(0), kind=kind, text="x")
        assert reply_for(entry, Story().submit(0).record) is None


def test_fallback_and_cancel_replies_say_why() -> None:
    story = Story(max_spot_wait="1m").submit(0).refuse_all(1)
    story.place_now(120, "tick")
    kinds = {e.kind: e for e in story.record.timeline}
    assert "fallback" in kinds
    reply = reply_for(kinds["fallback"], story.record)
    assert reply is not None and "Falling back to on-demand: no spot capacity" in reply.text
    story.cancel(130, by="ana")
    reply = reply_for(story.record.timeline[-1], story.record)
    assert reply is not None and reply.text == ":no_entry_sign: Cancelled: cancelled by ana"


def test_text_helpers() -> None:
    assert clip("abc", 3) == "abc"
    cut = clip("x" * 5000, 3000)
    assert len(cut) == 3000 and cut.endswith("(cut: 5,000 characters in all)")
    assert escape("<@U1> & co") == "&lt;@U1&gt; &amp; co"
    assert [usd(2.5), usd(0.25), usd(0.0012)] == ["$2.50", "$0.250", "$0.0012"]
    assert [duration(s) for s in (3.25, 125, 7380, 90000)] == ["3.2s", "2m 05s", "2h 03m", "1d 1h"]
    assert duration(timedelta(minutes=1).total_seconds()) == "1m 00s"


def test_an_interruption_before_any_step_or_checkpoint_says_so() -> None:
    story = Story().submit(0).place("i-1", 5).start("i-1", 1, 10).notice("i-1", 1, 12)
    entry = next(e for e in story.record.timeline if e.kind == "interrupted")
    reply = reply_for(entry, story.record)
    assert reply is not None
    assert "for i-1 before step 1 (interruption 1)" in reply.text
    assert (
        "newest checkpoint before the notice: no checkpoint yet"
        in section_texts(reply.payload())[1]
    )


def test_the_queued_reply_says_the_market_asked_for() -> None:
    from respot.core.job import JobRecord
    from tests.core.factories import submission

    def queued(**spec: Any) -> str:
        sub = submission(**spec)
        record = JobRecord(
            job_id=sub.job_id,
            state=JobState.QUEUED,
            created_at=at(0),
            updated_at=at(0),
            submission=sub,
        )
        entry = TimelineEntry(at=at(0), kind="queued", text="queued")
        reply = reply_for(entry, record)
        assert reply is not None
        return json.dumps(reply.payload())

    assert "on-demand only (market: on-demand)" in queued(market="on-demand")
    spot = queued()
    assert "spot first, on-demand fallback on" in spot and "on-demand only" not in spot
