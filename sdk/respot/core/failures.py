"""Bounded failures: when a failure that repeats stops being retried, and what the job says.

Three kinds of failure used to loop forever (docs/lifecycle.md, "Bounded failures"):
- instances that never start training (a broken boot, an instance that vanishes before its
  agent reports): `max_boot_failures` of them in a row fail the job with the last reason;
- launches EC2 refuses for a reason no retry fixes (`launch_error_kind` says which): the
  job fails at once with AWS's error text;
- quota errors: see `respot.core.quotas` and `lifecycle.launches._unavailable`.
"""

from __future__ import annotations

from respot.core.job import AttemptEnd, JobRecord
from respot.core.quotas import QUOTA_ERRORS

# RunInstances errors worth trying in another pool (or later): no capacity here and now.
CAPACITY_ERRORS = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientCapacity",
        "InsufficientHostCapacity",
        "SpotMaxPriceTooLow",
        "Unsupported",  # the instance type is not offered in this zone
        "UnfulfillableCapacity",
        "RequestLimitExceeded",  # throttled even after botocore's own retries
    }
)
# Errors of AWS itself: the call is retried (the handler fails, the event comes back).
TRANSIENT_ERRORS = frozenset(
    {"InternalError", "InternalFailure", "ServiceUnavailable", "Unavailable", "Throttling"}
)


def launch_error_kind(code: str) -> str:
    """'capacity', 'quota', 'transient' or 'refused' (anything else: fail the job at once).

    'refused' covers InvalidParameterValue (a mistyped instance type such as g5.xlarg),
    UnauthorizedOperation, KMS key errors, a missing AMI...: the same request fails again.
    """
    if code in QUOTA_ERRORS:
        return "quota"
    if code in CAPACITY_ERRORS:
        return "capacity"
    if code in TRANSIENT_ERRORS:
        return "transient"
    return "refused"


def boot_failures_in_a_row(job: JobRecord) -> int:
    """How many of the newest ended attempts in a row had an instance that never trained.

    An attempt counts if its instance existed, it ended without an interruption notice and
    its agent never reported training (boot failed, vanished, silent past boot_timeout).
    Attempts with no instance (capacity misses) are skipped; any attempt that started
    training, or that was interrupted by a notice, ends the run.
    """
    count = 0
    for att in reversed(job.attempts):
        if att.end is None or att.instance_id is None:
            continue
        if (
            att.end in (AttemptEnd.BOOT_FAILED, AttemptEnd.LOST)
            and att.never_started
            and att.notice_at is None
        ):
            count += 1
            continue
        break
    return count
