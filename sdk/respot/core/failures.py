"""Bounded failures: when a failure that repeats stops being retried, and what the job says.

Three kinds of failure used to loop forever (docs/lifecycle.md, "Bounded failures"):
- instances that never start training (a broken boot, an instance that vanishes before its
  agent reports): `max_boot_failures` of them in a row fail the job with the last reason;
- launches EC2 refuses for a reason no retry fixes (`launch_error_kind` says which): the
  job fails at once with AWS's error text;
- quota errors: see `respot.core.quotas` and `lifecycle.launches._unavailable`;
- instances EC2 ends during launch (pending -> terminated) for capacity or a quota (their
  `StateReason`, `state_reason_kind`): placed again, not boot failures, at most
  `MAX_LAUNCH_FAILURES` in a row; for a reason no retry fixes (KMS) the job fails at once.
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
    }
)
# EC2 throttled the call (the account's API request rate): says nothing of the pool. The same
# pool is tried again after a backoff, never marked tried (`lifecycle.launches._throttled`).
THROTTLE_ERRORS = frozenset({"RequestLimitExceeded"})
# Launches of one attempt EC2 throttled before the job fails (each after Ec2Capacity's own
# backoff, then one launch timeout: about a quarter of an hour of throttling in all).
MAX_THROTTLED_LAUNCHES = 5
# respot's own launch pacing (`aws.pacing`: a token bucket per account) had no token for the
# launch, so it was not sent: says nothing of the pool, nor of EC2. The same pool is tried
# again at the next tick, never marked tried; at most this many paced launches of one attempt
# (about an hour of ticks), then the job fails saying why.
PACED_ERRORS = frozenset({"RespotLaunchPaced"})
MAX_PACED_LAUNCHES = 60
# IAM refused the launch. During a deploy that picks a new AMI, the functions' role already
# names the new image while they still launch the previous launch template version (the
# previous image): refused until CloudFormation has updated the functions, a few minutes. So
# the same pool is asked again after `launch_timeout`, at most this many launches of one
# attempt (about 9 minutes), then the job fails with AWS's text (docs/decisions.md).
DEPLOY_WINDOW_ERRORS = frozenset({"UnauthorizedOperation"})
MAX_UNAUTHORIZED_LAUNCHES = 4
# Errors of AWS itself: the call is retried (the handler fails, the event comes back).
TRANSIENT_ERRORS = frozenset(
    {"InternalError", "InternalFailure", "ServiceUnavailable", "Unavailable", "Throttling"}
)


def launch_error_kind(code: str) -> str:
    """'capacity', 'quota', 'throttle', 'paced', 'unauthorized', 'transient' or 'refused'
    (anything else: fail the job at once).

    'refused' covers InvalidParameterValue (a mistyped instance type such as g5.xlarg),
    UnauthorizedOperation, KMS key errors, a missing AMI...: the same request fails again.
    """
    if code in QUOTA_ERRORS:
        return "quota"
    if code in CAPACITY_ERRORS:
        return "capacity"
    if code in THROTTLE_ERRORS:
        return "throttle"
    if code in PACED_ERRORS:
        return "paced"
    if code in DEPLOY_WINDOW_ERRORS:
        return "unauthorized"
    if code in TRANSIENT_ERRORS:
        return "transient"
    return "refused"


# An instance's StateReason codes (EC2 API Reference, "StateReason"), by what they mean for an
# attempt whose instance went down: capacity or a quota ended it during launch (not its boot:
# placed again, as a launch refused for capacity), the launch can never work (KMS, a missing
# snapshot: the job fails with AWS's text), or its own operating system shut it down.
STATE_REASON_KINDS = {
    "Server.InsufficientInstanceCapacity": "capacity",
    "Server.InternalError": "capacity",  # AWS's own error during launch: try again
    "Server.SpotInstanceTermination": "capacity",
    "Server.SpotInstanceShutdown": "capacity",
    "Client.VolumeLimitExceeded": "quota",  # EBS volumes or storage (gp3 TiB) of the account
    "Client.InternalError": "refused",  # "Client error on launch": most often a KMS key
    "Client.InvalidSnapshot.NotFound": "refused",
    "Client.InstanceInitiatedShutdown": "os-shutdown",  # shutdown from the instance itself
    "Client.UserInitiatedShutdown": "api",  # TerminateInstances: respot or a person
}
# What a refused launch's text adds to AWS's, so the reader knows where to look.
STATE_REASON_HINTS = {
    "Client.InternalError": (
        "EC2 gives this when the instance's EBS volumes are encrypted with a KMS key the launch "
        "may not use (the account's default EBS key, or the AMI snapshot's key): grant it in "
        "the key's policy (`respot doctor` checks the default key)"
    ),
    "Client.VolumeLimitExceeded": (
        "the account's EBS quota (gp3 storage in TiB, or volumes) is spent: raise it in "
        "Service Quotas (`respot doctor` compares it with instances x root volume size)"
    ),
    "Client.InvalidSnapshot.NotFound": "the AMI's snapshot is gone: use another AMI",
}
# Launches in a row that EC2 ended during launch for capacity or a quota before the job fails
# (each cost seconds of an instance; a quota does not rise by waiting).
MAX_LAUNCH_FAILURES = 6


def state_reason_kind(code: str | None) -> str:
    """'capacity', 'quota', 'refused', 'os-shutdown', 'api' or 'unknown' for a StateReason code."""
    if not code:
        return "unknown"
    return STATE_REASON_KINDS.get(code, "unknown")


def describe_state_reason(code: str | None, message: str | None) -> str:
    """AWS's words for a state reason ("Client.InternalError: Client error on launch"), with a
    hint for the codes whose fix is known; '' if EC2 gave none."""
    text = (message or code or "").strip()
    if code and not text.startswith(code):
        text = f"{code}: {text}" if text else code
    hint = STATE_REASON_HINTS.get(code or "")
    return f"{text} ({hint})" if text and hint else text


def launch_failures_in_a_row(job: JobRecord) -> int:
    """How many of the newest ended attempts in a row EC2 ended during launch (capacity,
    quota: `Attempt.launch_failure`); attempts with no instance are skipped."""
    count = 0
    for att in reversed(job.attempts):
        if att.end is None or att.instance_id is None:
            continue
        if att.launch_failure is not None:
            count += 1
            continue
        break
    return count


def boot_failures_in_a_row(job: JobRecord) -> int:
    """How many of the newest ended attempts in a row had an instance that never trained.

    An attempt counts if its instance existed, it ended without an interruption notice and
    its agent never reported training (boot failed, vanished, silent past boot_timeout).
    Attempts with no instance (capacity misses) are skipped; any attempt that started
    training, or that was interrupted by a notice, ends the run.
    """
    count = 0
    for att in reversed(job.attempts):
        if att.end is None or att.instance_id is None or att.launch_failure is not None:
            continue  # a launch EC2 ended for capacity or a quota says nothing of the boot
        if (
            att.end in (AttemptEnd.BOOT_FAILED, AttemptEnd.LOST)
            and att.never_started
            and att.notice_at is None
        ):
            count += 1
            continue
        break
    return count
