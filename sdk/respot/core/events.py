"""Domain events: everything that can happen to a job, as the core sees it (no AWS shapes here).

Handlers turn SQS messages and EventBridge events into these; `lifecycle.decide` applies them.
Every event may arrive twice or out of order.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from respot.core.quotas import QuotaReading
from respot.wire.messages import AgentMessage, CancelCommand, JobSubmission


@dataclass(frozen=True)
class Submitted:
    """A researcher's submission arrived (possibly again).

    `refused`: problem lines (field and fix) the commands function found that no launch can
    get past, e.g. a secret the instances may not read (`respot.spec.reach`); the job is recorded
    FAILED with them, nothing launched."""

    submission: JobSubmission
    refused: tuple[str, ...] = ()
    # Held in the team's queue until admitted (respot.queue): the control plane's effective
    # setting (an admin's change included); None: the deployment's `ControlSettings.admission`.
    hold: bool | None = None
    # The submitter's IAM principal tag `respot:team` (respot.aws.teamtags), read by the
    # commands function; kept on the record (the platform team's mapping still wins).
    team: str | None = None


@dataclass(frozen=True)
class PlaceNow:
    """Ask for capacity now if the job is waiting for it (after submit, on a tick, after a loss)."""

    reason: str


@dataclass(frozen=True)
class CapacityLaunched:
    """The capacity request for an attempt returned an instance."""

    attempt: int
    client_token: str
    instance_id: str
    spot_request_id: str | None = None
    availability_zone: str | None = None
    price_per_hour: float | None = None


@dataclass(frozen=True)
class CapacityUnavailable:
    """The capacity request for an attempt was refused (no capacity, price, limits, throttling)."""

    attempt: int
    client_token: str
    error_code: str
    message: str = ""
    quota: QuotaReading | None = None  # set for quota errors (VcpuLimitExceeded, ...)
    # A paced launch whose token is reserved: seconds until it is due (launch again then).
    retry_after: float | None = None


@dataclass(frozen=True)
class LaunchRefused:
    """EC2 refused the launch for a reason no retry can fix (a mistyped instance type,
    UnauthorizedOperation, a KMS key the launch cannot use...): the job fails with AWS's text."""

    attempt: int
    client_token: str
    error_code: str
    message: str = ""


@dataclass(frozen=True)
class InstanceUp:
    """EC2 says the instance exists and runs: spot fulfilment, or state `running`."""

    instance_id: str
    attempt: int | None
    source: str  # "fulfillment" or "running"
    spot_request_id: str | None = None
    at: datetime | None = None  # the EventBridge event's time (None: unknown)


@dataclass(frozen=True)
class InterruptionNotice:
    """EC2 will reclaim the instance (interruption warning), or recommends moving (rebalance)."""

    instance_id: str
    attempt: int | None
    kind: str  # "interruption" or "rebalance"
    action: str | None = None  # terminate / stop / hibernate for interruptions
    at: datetime | None = None  # the EventBridge event's time (None: unknown)


@dataclass(frozen=True)
class InstanceDown:
    """EC2 says the instance is stopping or gone.

    `reason` and `reason_message` are the instance's `StateReason` (code and message, as
    DescribeInstances gives them: "Client.VolumeLimitExceeded", "Client.InternalError: Client
    error on launch"), which the state-change event does not carry; the control plane reads
    them (None: not read, or EC2 gave none). `core.failures.state_reason_kind` classifies them.
    """

    instance_id: str
    attempt: int | None
    state: str  # shutting-down, terminated, stopping, stopped
    at: datetime | None = None  # the EventBridge event's time (None: unknown)
    reason: str | None = None
    reason_message: str | None = None


@dataclass(frozen=True)
class AgentReport:
    """A message from the agent on an instance."""

    message: AgentMessage


@dataclass(frozen=True)
class CancelRequested:
    """A researcher asked to cancel."""

    command: CancelCommand


@dataclass(frozen=True)
class Admitted:
    """The team's queue admitted a HELD job (its lease is in the queue ledger first)."""

    reason: str = "admitted"


@dataclass(frozen=True)
class AdmissionRefused:
    """The team's queue can never admit a HELD job (a job its `after:` names failed, it needs
    more GPUs than a limit allows): it fails with the reason."""

    reason: str


@dataclass(frozen=True)
class QueueWaitNoted:
    """The team's queue says why a HELD job waits: `kind` (after, queue, limit, quota, turn,
    budget), the words `respot queue` shows, its position and estimated start (None: not a
    candidate / unknown). It changes the record only if it says something new."""

    kind: str
    reason: str
    position: int | None = None
    estimate: datetime | None = None


@dataclass(frozen=True)
class PlatformStop:
    """A platform team's rule stops the job: checkpoint and stop, keeping the checkpoint
    (`cause`: "budget" for `budget_action: hard`; `core.lifecycle.stops`)."""

    reason: str
    cause: str


@dataclass(frozen=True)
class ReconcileTick:
    """The scheduled look at every live job."""

    at: datetime


JobEvent = (
    Submitted
    | PlaceNow
    | CapacityLaunched
    | CapacityUnavailable
    | LaunchRefused
    | InstanceUp
    | InterruptionNotice
    | InstanceDown
    | AgentReport
    | CancelRequested
    | ReconcileTick
    | Admitted
    | AdmissionRefused
    | PlatformStop
    | QueueWaitNoted
)
