"""Fair-share preemption: which running jobs to checkpoint and requeue so that a waiting job of
a researcher below their share gets room (docs/queue.md, "Preemption").

Without it, a job too large for the free room reserves its quota until enough leases end
(`admission._reserve`), and while the room gathers no one gets new GPUs: the researchers
running already keep them. With it, when the fairest pick does not fit its quota, the planner
may stop running jobs of researchers above their share instead. Pure: `plan` calls
`victims`; the control plane checkpoints and stops each victim (`PlatformStop`, cause
`preempt`, `core.lifecycle.stops`), the job waits HELD again, and its lease is released once
it has stopped, so the room is counted as held until the instance is gone.

Loans first (`loans.taken_back`): jobs admitted into room reserved for the pick
(`Lease.loan_for`, admission rule 6) are taken back, newest first, as soon as the free room
plus the pick's loans fit the pick; none of the rules below applies to a loan taken back for
its own holder (it was admitted on that condition, and a protection from a second preemption
would otherwise turn the loan into a longer wait for the holder).

The rules, each a bound:
- only the fairest pick that does not fit its quota may preempt (one per quota per pass),
  and not while jobs already stopping for it would free enough room;
- a victim's researcher stays at or above the preemptor's share after it (Kueue's
  "LessThanOrEqualToFinalShare"): `(gpus(V) - victim) / share(V) >= (gpus(R) + job) /
  share(R)`, so no one is preempted to make someone else more over their share than they
  were, and a researcher at or below share is never preempted by one above;
- only when those victims do not make room enough, Kueue's second strategy
  ("LessThanInitialShare", used after the first as Kueue's fair sharing configures it):
  more jobs of researchers whose share before this pass is strictly above the preemptor's
  final share, `gpus(V) / share(V) > (gpus(R) + job) / share(R)`. This is what lets a job
  larger than its researcher's share (a 4-GPU job where a share is 3.2 GPUs) take room from
  the researcher holding the most, instead of draining the quota while it gathers
  (docs/queue.md, "Preemption"); a researcher at or below the preemptor's final share is
  still never preempted, but a victim's researcher may end below the preemptor;
- only when neither makes room enough, and only to keep the quota from idling: jobs of
  researchers whose load in the fair-share order (recent GPU-hours per share, the order's
  `load`) is above the preemptor's, i.e. those the order itself ranks behind it, may be
  preempted too, if the room idle now times the drain (vCPU-hours that would sit unused
  until enough leases end) exceeds those victims' vCPUs times the changeover. Kueue's two
  strategies compare GPUs held now; the issue's fair share is recent use, and a large job
  of a light user otherwise gathers room for hours while the heavy user, at or below share
  by GPUs held, keeps it (docs/queue.md, "Preemption");
- a victim is never larger (in vCPUs of the quota) than the job it makes room for: its own
  readmission would otherwise need a longer drain than the one avoided;
- a job preempted once is not preempted again within its own length (its estimated
  runtime; without one, never again);
- the researcher's own jobs are never victims;
- only when waiting costs more GPU time than preempting: the drain (until enough leases end
  by their estimates; unknown: forever) times the job's GPUs exceeds the victims' GPUs times
  the changeover (launch, boot, restore: the 6 minutes `respot run --check` counts);
- among those allowed: the researcher most over share first, then the newest admitted, until
  the job fits; if all of them would not make it fit, no one is preempted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple

from respot.queue.loans import taken_back
from respot.queue.model import Lease, QuotaRoom, WaitingJob

# Launch, boot and restore of a preempted job's next attempt (the changeover `respot run
# --check` counts, core.cost_estimate).
CHANGEOVER_HOURS = 0.1


@dataclass(frozen=True)
class Preemptions:
    """What the planner needs to preempt: `last`, each job's last preemption (from its
    record); `stopping`, leased jobs being stopped for a preemption now (their room counts
    as freeing); `running`, leased jobs that may be preempted now (training; None: all)."""

    last: Mapping[str, datetime] = field(default_factory=dict)
    stopping: frozenset[str] = frozenset()
    running: frozenset[str] | None = None
    changeover_hours: float = CHANGEOVER_HOURS


class Victims(NamedTuple):
    """The leases to preempt, the vCPUs left over once they stop, which of them only the
    third strategy (recent use, to keep idle room busy) allowed, and which are loans taken
    back."""

    chosen: list[Lease]
    spare: float
    by_use: frozenset[str]
    reclaimed: frozenset[str] = frozenset()


def _protected(lease: Lease, last: Mapping[str, datetime], now: datetime) -> bool:
    """True if the job was preempted within its own length (without one: ever)."""
    at = last.get(lease.job_id)
    if at is None:
        return False
    if lease.ends_at is None:
        return True
    return (now - at) < (lease.ends_at - lease.admitted_at)


def victims(
    job: WaitingJob,
    leases: list[Lease],
    room: QuotaRoom,
    gpus_of: Mapping[str, int],
    vcpus_admitted: int,
    share: Mapping[str, float],
    fits_at: datetime | None,
    known: Preemptions,
    now: datetime,
    load: Mapping[str, float] | None = None,
) -> Victims | None:
    """The leases to preempt so that `job` fits its quota now, and the vCPUs left over; None
    if it should wait instead (the rules above).

    `gpus_of`: GPUs each researcher has admitted now (stopping leases included);
    `vcpus_admitted`: vCPUs the quota's leases hold now; `fits_at`: when `job` fits without
    preemption (None: not known to); `load`: each researcher's load in the fair-share order
    (None: the third strategy is off)."""
    assert room.limit is not None
    stopping = [le for le in leases if le.job_id in known.stopping]
    free = room.limit - room.others - vcpus_admitted + sum(le.vcpus for le in stopping)
    if free >= job.vcpus:
        return None  # the jobs already stopping make room enough
    back = taken_back(job, leases, free, known.stopping, known.running)
    if back is not None:
        return Victims(back[0], back[1], frozenset(), frozenset(le.job_id for le in back[0]))
    gpus = dict(gpus_of)
    for le in stopping:
        gpus[le.researcher] = gpus.get(le.researcher, 0) - le.gpus
    mine = (gpus.get(job.researcher, 0) + job.gpus) / share[job.researcher]
    initial = dict(gpus)  # each researcher's GPUs before this pass preempts anyone
    pool = [
        le
        for le in leases
        if le.quota_key == job.quota_key
        and le.job_id not in known.stopping
        and (known.running is None or le.job_id in known.running)
        and le.researcher != job.researcher
        and le.researcher in share
        and le.vcpus <= job.vcpus
        and not _protected(le, known.last, now)
    ]
    idle = max(free, 0)  # vCPUs no one uses now (and none stopping for the job)
    chosen: list[Lease] = []
    by_use: list[Lease] = []  # victims only the third strategy allows
    while free < job.vcpus:
        allowed = [
            le for le in pool if (gpus[le.researcher] - le.gpus) / share[le.researcher] >= mine
        ]
        if not allowed:  # Kueue's second strategy, once the first is spent
            allowed = [le for le in pool if initial[le.researcher] / share[le.researcher] > mine]
        third = not allowed
        if third and load is not None:  # behind the job in the order, to keep room busy
            allowed = [le for le in pool if load[le.researcher] > load[job.researcher]]
        if not allowed:
            return None  # not room enough from researchers the strategies allow
        pick = max(
            allowed,
            key=lambda le: (gpus[le.researcher] / share[le.researcher], le.admitted_at, le.job_id),
        )
        pool.remove(pick)
        chosen.append(pick)
        if third:
            by_use.append(pick)
        gpus[pick.researcher] -= pick.gpus
        free += pick.vcpus
    drain = (
        max((fits_at - now).total_seconds(), 0.0) / 3600.0 if fits_at is not None else None
    )  # None: no known end frees room enough, so the wait is unbounded
    if drain is not None:
        if drain * job.gpus <= sum(le.gpus for le in chosen) * known.changeover_hours:
            return None  # waiting for the drain costs less GPU time than the changeover
        if by_use and idle * drain <= sum(le.vcpus for le in by_use) * known.changeover_hours:
            return None  # the room idle until the drain is worth less than their changeover
    elif by_use and idle == 0:
        return None  # nothing idles while the job waits: the third strategy has no cause
    return Victims(chosen, free - job.vcpus, frozenset(le.job_id for le in by_use))
