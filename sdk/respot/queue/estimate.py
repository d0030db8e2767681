"""When a waiting job may start: from the estimated ends of the leases in its quota.

A rough, honest estimate: the jobs waiting in one quota start, in their positions' order, as
leases end (each end frees its own vCPUs; a waiting job starts once the freed vCPUs cover
it). A lease without an estimated runtime (no `estimated_runtime` in its spec) has no known
end, so a job behind it gets no estimate ("unknown"), never a made-up one. `after:` jobs and
jobs waiting for a limit or their named queue get none either. A loan of room reserved for a
waiting job (`Lease.loan_for`) is taken back for it, so its vCPUs count as free here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from respot.queue.admission import Waits
from respot.queue.model import Lease, QuotaRoom, WaitingJob


def estimate_starts(
    waiting: Iterable[WaitingJob],
    waits: Mapping[str, Waits],
    leases: Iterable[Lease],
    quotas: Mapping[str, QuotaRoom],
    now: datetime,
) -> dict[str, datetime | None]:
    """job id -> the estimated start of each job that waits for room or its turn."""
    by_key: dict[str, list[WaitingJob]] = {}
    for job in waiting:
        w = waits.get(job.job_id)
        if w is None or w.kind not in ("quota", "turn") or w.position is None:
            continue
        by_key.setdefault(job.quota_key, []).append(job)
    holders = {job.job_id for jobs in by_key.values() for job in jobs}
    leases = [lease for lease in leases if lease.loan_for not in holders]
    out: dict[str, datetime | None] = {}
    for key, jobs in by_key.items():
        jobs.sort(key=lambda j: waits[j.job_id].position or 0)
        room = quotas.get(key)
        mine = [lease for lease in leases if lease.quota_key == key]
        used = sum(lease.vcpus for lease in mine)
        free = (room.limit - room.others - used) if room and room.limit is not None else None
        ends = sorted((lease.ends_at, lease.vcpus) for lease in mine if lease.ends_at)
        unknown = any(lease.ends_at is None for lease in mine)
        at: datetime | None = now
        for job in jobs:
            if free is None:
                out[job.job_id] = None
                continue
            while free < job.vcpus and ends:
                at, vcpus = ends.pop(0)
                free += vcpus
            if free < job.vcpus:
                at = None if unknown or at is None else at
                out[job.job_id] = None
                continue
            free -= job.vcpus
            out[job.job_id] = max(at, now) if at is not None else None
    return out
