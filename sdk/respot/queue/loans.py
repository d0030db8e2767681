"""Loans of reserved room (docs/queue.md, admission rule 6 and "Preemption").

When the fairest pick does not fit its quota, the room is reserved for it until enough
leases end, and a job behind it may take the free room only if it ends before then. A job
that fits the free room but would still run then is **lent** the room instead, when by the
estimates it runs longer than a changeover before the reservation is due: the room would
otherwise sit idle. Its lease names the holder (`Lease.loan_for`), and the holder takes its
loans back first, as soon as it could start without them (`taken_back`, called by
`preemption.victims`), whatever protects the borrower from a second preemption: it was
admitted on that condition. As Kueue lends a queue's unused quota and reclaims it by
preemption. Pure; `admission.plan` lends, `preemption.victims` takes back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime

from respot.queue.model import Lease, WaitingJob


def lendable(
    job: WaitingJob, free: float, due: datetime | None, now: datetime, changeover_hours: float
) -> bool:
    """True if `job` fits the `free` vCPUs and would run longer before the reservation is
    `due` than the changeover taking it back costs (`due` None: the holder's wait has no
    known end, so a loan delays it by nothing it could have had)."""
    if job.vcpus > free:
        return False
    if due is None:
        return True
    return (due - now).total_seconds() / 3600.0 > changeover_hours


def taken_back(
    job: WaitingJob,
    leases: Iterable[Lease],
    free: float,
    stopping: frozenset[str],
    running: frozenset[str] | None,
) -> tuple[list[Lease], float] | None:
    """The loans of `job`'s room to take back now, newest first, and the vCPUs left over;
    None if even all of them (with the `free` vCPUs) would not make it fit, so they stay.
    Only loans that may stop now: not `stopping` already, and training (`running`; None:
    all)."""
    loans = sorted(
        (
            le
            for le in leases
            if le.loan_for == job.job_id
            and le.quota_key == job.quota_key
            and le.job_id not in stopping
            and (running is None or le.job_id in running)
        ),
        key=lambda le: (le.admitted_at, le.job_id),
        reverse=True,
    )
    if not loans or free + sum(le.vcpus for le in loans) < job.vcpus:
        return None
    back: list[Lease] = []
    for le in loans:
        back.append(le)
        free += le.vcpus
        if free >= job.vcpus:
            break
    return back, free - job.vcpus


def settle_loans(leases: Mapping[str, Lease], waiting: Iterable[str]) -> dict[str, Lease]:
    """`leases` with every loan whose holder no longer waits turned into a plain lease (the
    holder started, ended or was cancelled: nothing will take the room back for it)."""
    still = set(waiting)
    return {
        job_id: lease
        if lease.loan_for is None or lease.loan_for in still
        else replace(lease, loan_for=None)
        for job_id, lease in leases.items()
    }
