"""The team's queue: which waiting job is admitted next, and why the others wait.

Pure code (no boto3, no clock): the control plane (`respot.control.admission`) reads the jobs,
the account's quotas and the instances, hands them to `plan`, and writes what it decides
with conditional writes; `bench.queue` runs the same `plan` over simulated time.

- `model`: what the planner reads (waiting jobs, leases of admitted ones, quotas, limits);
- `shapes`: vCPUs and GPUs of the instance types respot knows without asking EC2;
- `usage`: recent use in GPU-hours, decayed with a half-life (the fair-share memory);
- `admission`: the planner (`plan`): order, fair share, aging, limits, quotas, `after`;
- `preemption`: which running jobs to checkpoint and requeue for a job below its share;
- `loans`: room reserved for a job that cannot start yet, lent and taken back for it.

docs/queue.md describes the rules for the platform team and the researcher.
"""

from respot.queue.admission import Plan, Waits, plan
from respot.queue.loans import settle_loans
from respot.queue.model import (
    Lease,
    NamedQueue,
    Priority,
    QueueLimits,
    QuotaRoom,
    WaitingJob,
)
from respot.queue.preemption import Preemptions
from respot.queue.usage import Usage, decayed, settle

__all__ = [
    "Lease",
    "NamedQueue",
    "Plan",
    "Preemptions",
    "Priority",
    "QueueLimits",
    "QuotaRoom",
    "Usage",
    "WaitingJob",
    "Waits",
    "decayed",
    "plan",
    "settle",
    "settle_loans",
]
