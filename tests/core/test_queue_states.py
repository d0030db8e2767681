"""HELD and ADMIT in the lifecycle (issue 26): a held job asks for nothing until admitted,
is admitted once, fails with the reason when the queue refuses it, and can be cancelled."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from respot.core import JobState, decide
from respot.core.effects import LaunchInstance
from respot.core.events import (
    AdmissionRefused,
    Admitted,
    CancelRequested,
    PlaceNow,
    ReconcileTick,
    Submitted,
)
from respot.core.job import JobRecord
from respot.wire.messages import CancelCommand
from tests.core.factories import SETTINGS, T0, at, submission

QUEUED_ON = replace(SETTINGS, admission=True)


def _held(**spec: object) -> JobRecord:
    d = decide(None, Submitted(submission(**spec)), now=T0, settings=QUEUED_ON)
    assert d.record is not None
    return d.record


def test_without_a_queue_a_submission_is_admitted_and_placed_at_once() -> None:
    # GIVEN the deployment's queue off (the default) WHEN a job is submitted
    d = decide(None, Submitted(submission()), now=T0, settings=SETTINGS)
    # THEN it is QUEUED, admitted at submission, and placed by the follow-up, as before
    assert d.record is not None and d.record.state is JobState.QUEUED
    assert d.record.admitted_at == T0
    assert isinstance(d.follow_up, PlaceNow)


def test_a_held_job_asks_for_no_capacity_until_admitted() -> None:
    # GIVEN the queue on WHEN a job is submitted
    job = _held()
    # THEN it is HELD with no follow-up, and neither a placement nor a tick launches anything
    assert job.state is JobState.HELD and job.admitted_at is None
    for event in (PlaceNow("tick"), ReconcileTick(at(3600))):
        d = decide(job, event, now=at(3600), settings=QUEUED_ON)
        assert d.record is None and not d.effects and d.follow_up is None, event
    # WHEN it is admitted THEN it is QUEUED and its placement follows, launching one attempt
    d = decide(job, Admitted("fits"), now=at(60), settings=QUEUED_ON)
    assert d.record is not None and d.record.state is JobState.QUEUED
    assert d.record.admitted_at == at(60) and d.record.waiting_since == at(60)
    assert isinstance(d.follow_up, PlaceNow)
    placed = decide(d.record, d.follow_up, now=at(60), settings=QUEUED_ON)
    assert placed.record is not None and placed.record.state is JobState.REQUESTED
    assert [type(e) for e in placed.effects] == [LaunchInstance]
    # THEN a repeated or late admission, on the admitted or the placed record, changes nothing
    for record in (d.record, placed.record):
        again = decide(record, Admitted("again"), now=at(61), settings=QUEUED_ON)
        assert again.record is None and again.follow_up is None and not again.effects


def test_after_or_queue_holds_a_job_even_when_the_queue_is_off() -> None:
    for spec in ({"after": ["job-0"]}, {"queue": "serial"}):
        d = decide(None, Submitted(submission(**spec)), now=T0, settings=SETTINGS)
        assert d.record is not None and d.record.state is JobState.HELD, spec
        assert d.follow_up is None


def test_a_refused_admission_fails_the_job_with_the_reason() -> None:
    job = _held(after=["job-0"])
    d = decide(job, AdmissionRefused("after: job job-0 ended FAILED"), now=at(5), settings=SETTINGS)
    assert d.record is not None and d.record.state is JobState.FAILED
    assert d.record.reason == "after: job job-0 ended FAILED"
    # a refusal that comes after an admission changes nothing
    admitted = decide(job, Admitted(), now=at(1), settings=SETTINGS).record
    assert admitted is not None
    late = decide(admitted, AdmissionRefused("late"), now=at(5), settings=SETTINGS)
    assert late.record is None


def test_a_held_job_can_be_cancelled_and_its_max_runtime_counts_from_admission() -> None:
    job = _held(max_runtime=timedelta(hours=1))
    cancel = CancelCommand(job_id=job.job_id, requested_at=at(1))
    d = decide(job, CancelRequested(cancel), now=at(1), settings=QUEUED_ON)
    assert d.record is not None and d.record.state is JobState.CANCELLED
    # admitted after two hours in the queue: the tick does not fail it for max_runtime
    admitted = decide(job, Admitted(), now=at(7200), settings=QUEUED_ON).record
    assert admitted is not None
    tick = decide(admitted, ReconcileTick(at(7300)), now=at(7300), settings=QUEUED_ON)
    assert tick.record is None or tick.record.state is not JobState.FAILED


def test_the_control_plane_s_effective_switch_wins_over_the_stack_s() -> None:
    # an admin turned the queue on (stack off) / off (stack on): the event says which
    on = decide(None, Submitted(submission(), hold=True), now=T0, settings=SETTINGS)
    off = decide(None, Submitted(submission(), hold=False), now=T0, settings=QUEUED_ON)
    assert on.record is not None and on.record.state is JobState.HELD
    assert off.record is not None and off.record.state is JobState.QUEUED
    assert isinstance(off.follow_up, PlaceNow)


def test_a_held_jobs_details_are_rewritten_at_most_every_refresh_but_news_at_once() -> None:
    from respot.core.events import QueueWaitNoted
    from respot.core.job import QUEUE_REFRESH_SECONDS, QUEUE_TOP

    far = QUEUE_TOP + 5
    free = "quota spot/G and VT: 0 of 64 vCPUs free"

    def said(
        job: JobRecord, now: float, kind: str, reason: str, position: int, start: float | None
    ) -> JobRecord | None:
        estimate = at(start) if start is not None else None
        noted = QueueWaitNoted(kind, reason, position, estimate)
        return decide(job, noted, now=at(now), settings=QUEUED_ON).record

    # GIVEN a held job written as #far, waiting for the quota
    job = said(_held(), 10, "quota", free, far, 7200)
    assert job is not None
    # WHEN, within the refresh, each admission moves it one place, changes the free room in
    # its reason, or moves its estimate by an hour THEN nothing is written (no card edit)
    for step, (reason, position, start) in enumerate(
        [(free, far - 1, 7200), (free.replace("0 of", "4 of"), far, 7200), (free, far, 10800)]
    ):
        assert said(job, 20 + step, "quota", reason, position, start) is None, step
    # ... but news is written at once: what it waits for, a move within the first QUEUE_TOP
    # places, an estimate becoming unknown
    assert said(job, 30, "turn", "behind alice's job j-1, which waits", far, 7200) is not None
    top = said(job, 30, "quota", free, QUEUE_TOP, 7200)
    assert top is not None
    assert said(top, 40, "quota", free, QUEUE_TOP - 1, 7200) is not None
    assert said(top, 40, "quota", free, QUEUE_TOP, None) is not None
    # WHEN the refresh has passed THEN the changed details are written
    moved = said(job, 10 + QUEUE_REFRESH_SECONDS, "quota", "4 of 64 free", far - 1, 7200)
    assert moved is not None and moved.queue_wait is not None
    assert (moved.queue_wait.reason, moved.queue_wait.position) == ("4 of 64 free", far - 1)


def test_a_held_job_records_why_it_waits_once_per_change_and_forgets_it_when_admitted() -> None:
    from respot.core.events import QueueWaitNoted

    # GIVEN a held job WHEN the queue says it is #2, waiting for the quota
    job = _held()
    said = QueueWaitNoted("quota", "quota spot/G and VT: 0 of 8 vCPUs free", 2, at(3600))
    d = decide(job, said, now=at(10), settings=QUEUED_ON)
    # THEN the record carries it, with one card-only timeline note, and nothing is launched
    assert d.record is not None and not d.effects and d.follow_up is None
    wait = d.record.queue_wait
    assert wait is not None and (wait.kind, wait.position, wait.estimate) == (
        "quota",
        2,
        at(3600),
    )
    assert d.record.timeline[-1].kind == "queue-wait"
    assert d.record.timeline[-1].text.startswith("#2 in the team's queue: quota spot/G")
    job = d.record
    # WHEN the next pass says the same (its estimate drifted a minute) THEN nothing is written
    again = QueueWaitNoted("quota", said.reason, 2, at(3660))
    assert decide(job, again, now=at(70), settings=QUEUED_ON).record is None
    # WHEN its position moves THEN it is written, the new note replacing the last one
    moved = decide(job, QueueWaitNoted("quota", said.reason, 1, at(3600)), now=at(80),
                   settings=QUEUED_ON)  # fmt: skip
    assert moved.record is not None and moved.record.queue_wait is not None
    assert moved.record.queue_wait.position == 1
    assert [e.kind for e in moved.record.timeline].count("queue-wait") == 1
    # WHEN it is admitted THEN the wait is gone, and a late note changes nothing
    admitted = decide(moved.record, Admitted("fits"), now=at(90), settings=QUEUED_ON)
    assert admitted.record is not None and admitted.record.queue_wait is None
    late = decide(admitted.record, said, now=at(91), settings=QUEUED_ON)
    assert late.record is None
