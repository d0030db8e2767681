"""Loans of reserved room (issue 26, admission rule 6): a job that fits the free room but
would still run when the room's reservation is due is admitted on loan, and the loan is
taken back for the reservation's holder as soon as the holder could start without it.

A quota of 16 vCPUs (four g5.xlarge). bo runs two one-GPU jobs, ending in 2 and 3 hours;
ann's 3-GPU job (12 vCPUs) is the fairest pick and does not fit the 8 free vCPUs, so the
quota is reserved for it from bo's first end; cy's one-GPU jobs run 5 hours."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from respot.queue import (
    Lease,
    Plan,
    Preemptions,
    QueueLimits,
    QuotaRoom,
    Usage,
    WaitingJob,
    plan,
    settle_loans,
)
from respot.queue.estimate import estimate_starts

T0 = datetime(2026, 1, 5, 12, tzinfo=UTC)
KEY = "spot/G and VT"
ROOM = {KEY: QuotaRoom(limit=16)}


def _lease(job_id: str, who: str, ends_in_h: float, loan_for: str | None = None) -> Lease:
    return Lease(
        job_id=job_id,
        researcher=who,
        team="t",
        quota_key=KEY,
        vcpus=4,
        gpus=1,
        admitted_at=T0 - timedelta(minutes=30),
        ends_at=T0 + timedelta(hours=ends_in_h),
        loan_for=loan_for,
    )


def _job(job_id: str, who: str, size: int = 1, hours: float = 5.0, ago: int = 1) -> WaitingJob:
    return WaitingJob(
        job_id=job_id,
        researcher=who,
        team="t",
        submitted_at=T0 - timedelta(minutes=ago),
        quota_key=KEY,
        vcpus=4 * size,
        gpus=size,
        hours=hours,
    )


# bo has used much more lately than ann or cy, so neither of ann's nor cy's jobs is
# behind bo in the order; bo holds 2 GPUs, below ann's 3 after: no strategy preempts him
# while the room gathers (his jobs are not training: `running` is empty).
USAGE = {"bo": Usage(0.0, T0), "ann": Usage(30.0, T0), "cy": Usage(40.0, T0)}


def _plan(
    waiting: list[WaitingJob],
    leases: list[Lease],
    known: Preemptions | None = None,
    limits: QueueLimits | None = None,
) -> Plan:
    """One pass; by default nothing is training (`running` empty), so only loans are taken
    back."""
    known = known if known is not None else Preemptions(running=frozenset())
    return plan(waiting, leases, ROOM, limits or QueueLimits(), USAGE, {}, T0, None, known)


def _bo() -> list[Lease]:
    return [_lease("bo0", "bo", 2.0), _lease("bo1", "bo", 3.0)]


def test_a_job_that_would_outlast_the_reservation_is_admitted_on_loan() -> None:
    p = _plan([_job("a3", "ann", size=3, ago=5), _job("c1", "cy")], _bo())
    assert [j.job_id for j in p.admit] == ["c1"]
    assert p.loans == {"c1": "a3"}
    assert p.waits["a3"].kind == "quota" and p.preempt == []


def test_no_loan_when_the_reservation_is_due_within_a_changeover_or_preemption_is_off() -> None:
    soon = [_lease("bo0", "bo", 0.05), _lease("bo1", "bo", 3.0)]  # room due in 3 minutes
    p = _plan([_job("a3", "ann", size=3, ago=5), _job("c1", "cy")], soon)
    assert p.admit == [] and p.loans == {}
    assert "reserved for job a3" in p.waits["c1"].reason
    off = _plan(
        [_job("a3", "ann", size=3, ago=5), _job("c1", "cy")],
        _bo(),
        limits=QueueLimits(preemption=False),
    )
    assert off.admit == [] and off.loans == {}


def test_a_job_that_ends_before_the_reservation_is_admitted_plainly() -> None:
    p = _plan([_job("a3", "ann", size=3, ago=5), _job("c1", "cy", hours=1.0)], _bo())
    assert [j.job_id for j in p.admit] == ["c1"] and p.loans == {}


def test_the_loan_is_taken_back_as_soon_as_the_holder_could_start_without_it() -> None:
    # ann's 2-GPU job: 4 free + cy's loan of 4 = 8. cy's loan was preempted 10 minutes ago
    # (protected from a second preemption within its length): a loan is taken back anyway,
    # and cy's plain lease c2 is not touched.
    leases = [_lease("bo1", "bo", 3.0), _lease("c1", "cy", 4.5, loan_for="a2")]
    leases += [_lease("c2", "cy", 4.5)]
    known = Preemptions(last={"c1": T0 - timedelta(minutes=10)})
    p = _plan([_job("a2", "ann", size=2, ago=60)], leases, known=known)
    assert [j for j, _ in p.preempt] == ["c1"]
    assert "taken back" in p.preempt[0][1] and "a2" in p.preempt[0][1]
    assert p.admit == [] and "room is being freed" in p.waits["a2"].reason
    # a loan lent for another job is not taken back for this one (only c1 may stop now,
    # and as a plain lease it is protected)
    other = [leases[0], _lease("c1", "cy", 4.5, loan_for="x9"), leases[2]]
    only_c1 = Preemptions(last=known.last, running=frozenset({"c1"}))
    assert _plan([_job("a2", "ann", size=2, ago=60)], other, known=only_c1).preempt == []


def test_the_loan_is_kept_while_the_holder_could_not_start_even_with_it() -> None:
    # bo's two still run: 4 free + the loan's 4 = 8 < 12
    leases = [*_bo(), _lease("c1", "cy", 4.5, loan_for="a3")]
    p = _plan([_job("a3", "ann", size=3, ago=60)], leases)
    assert p.preempt == [] and p.admit == []


def test_a_loan_whose_holder_no_longer_waits_becomes_a_plain_lease() -> None:
    leases = {"c1": _lease("c1", "cy", 4.5, loan_for="a3"), "bo1": _lease("bo1", "bo", 3.0)}
    kept = settle_loans(leases, ["a3"])
    assert kept["c1"].loan_for == "a3"
    settled = settle_loans(leases, ["x9"])
    assert settled["c1"].loan_for is None and settled["bo1"] == leases["bo1"]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from([0.5, 2.0, 3.0, 6.0]), max_size=3),
    st.lists(
        st.tuples(st.sampled_from(["ann", "cy", "dee"]), st.sampled_from([1, 2, 3])), max_size=5
    ),
    st.lists(st.integers(0, 2), max_size=2),
)
def test_loans_never_exceed_the_quota_and_are_taken_back_only_for_their_holder(
    bo_ends: list[float], waiting: list[tuple[str, int]], loaned: list[int]
) -> None:
    leases = [_lease(f"bo{i}", "bo", h) for i, h in enumerate(bo_ends)]
    jobs = [_job(f"w{i}", who, size=s, ago=10 - i) for i, (who, s) in enumerate(waiting)]
    for i in loaned:  # some room already lent to w0's reservation
        if jobs and sum(le.vcpus for le in leases) + 4 <= 16:
            leases.append(_lease(f"loan{i}-{len(leases)}", "cy", 4.0, loan_for=jobs[0].job_id))
    used = sum(le.vcpus for le in leases)
    p = _plan(jobs, leases, known=Preemptions())
    assert used + sum(j.vcpus for j in p.admit) <= 16  # what stops still holds its room
    holders = {le.job_id: le.loan_for for le in leases}
    for job_id, reason in p.preempt:
        if "taken back" in reason:
            assert holders[job_id] is not None and holders[job_id] in reason
    for lent, holder in p.loans.items():
        assert holder in {j.job_id for j in jobs} and lent in {j.job_id for j in p.admit}


def test_a_holder_s_estimated_start_does_not_wait_for_its_own_loans() -> None:
    # ann's 3-GPU job needs 12: 8 are free once the loan is taken back, and bo0's end at 2 h
    # frees the rest (counting cy's loan as held, it would be bo1's end at 3 h)
    leases = [*_bo(), _lease("c1", "cy", 4.5, loan_for="a3")]
    job = _job("a3", "ann", size=3, ago=60)
    p = _plan([job], leases)
    starts = estimate_starts([job], p.waits, leases, ROOM, T0)
    assert starts["a3"] == T0 + timedelta(hours=2.0)
