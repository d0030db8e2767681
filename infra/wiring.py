"""The one source of truth for what reaches which handler.

Both the CDK stack (`infra/stack.py`) and the local runtime (`infra/local/`) build from this
module, and `tests/infra/test_wiring_agrees.py` checks that the synthesized template and the
local runtime's resources say the same thing. It is plain data: importing it costs nothing.

    laptop --SNS jobs topic--> [filter command=submit|cancel|sweep|sweep-stop|queue-settings]
                           --> SQS commands --> lambdas.commands (one path per command)
    agent  --------------------------------------------> SQS agent-events --> lambdas.agent_events
    EventBridge (default bus, source aws.ec2):
        EC2 Spot Instance Request Fulfillment           --> lambdas.spot_fulfillment
        EC2 Spot Instance Interruption Warning,
        EC2 Instance Rebalance Recommendation            --> lambdas.spot_interruption
        EC2 Instance State-change Notification           --> lambdas.instance_state
    schedule every minute                                --> lambdas.reconcile
    agent  --Lambda Invoke (instance role, this function only)--> lambdas.credentials
        (a job's credentials, scoped to jobs/<job>/, for that job's live instances only)
    control plane (every function, after each commit) --> SQS FIFO notifications --> lambdas.notify
        (message group = job id: one job's news is posted in order, never concurrently)
    control plane (a paced launch, DelaySeconds = when its launch token is due)
        --> SQS launch-retries --> lambdas.launch_retries (that job's tick: it launches again)
    commands (sweep: record and kick; sweep-stop: stop), control plane (a trial job's metric
    values and its end)
        --> SQS FIFO sweep-events --> lambdas.sweep (message group = sweep id)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class Grant(enum.StrEnum):
    """What a function may do; the stack turns each into least-privilege IAM statements."""

    JOBS_TABLE_READ_WRITE = "jobs-table-read-write"
    BUCKET_JOBS_READ_WRITE = "bucket-jobs-read-write"  # objects under jobs/ only
    EC2_LAUNCH = "ec2-launch"  # RunInstances from respot's launch template, tags, PassRole
    EC2_TERMINATE = "ec2-terminate"  # only instances tagged respot:managed=<this stack>
    EC2_DESCRIBE = "ec2-describe"  # DescribeInstances, DescribeSpotPriceHistory
    NOTIFY_SEND = "notify-send"  # SendMessage to the notifications queue
    DLQ_SEND = "dlq-send"  # SendMessage to the dead-letter queue (poison with its reason)
    # ssm:GetParameter on the Slack token parameter, kms:Decrypt through SSM for it only
    SLACK_TOKEN_READ = "slack-token-read"  # noqa: S105 - a grant name, not a secret
    SWEEP_SEND = "sweep-send"  # SendMessage to the sweep-events queue
    LAUNCH_RETRY_SEND = "launch-retry-send"  # SendMessage to the launch-retries queue
    # iam:ListRoleTags / iam:ListUserTags in this account: a submitter's `respot:team` tag
    # (respot.aws.teamtags, the team's queue); read-only
    PRINCIPAL_TAGS_READ = "principal-tags-read"


CONTROL_GRANTS = frozenset(
    {
        Grant.JOBS_TABLE_READ_WRITE,
        Grant.BUCKET_JOBS_READ_WRITE,
        Grant.EC2_LAUNCH,
        Grant.EC2_TERMINATE,
        Grant.EC2_DESCRIBE,
        Grant.NOTIFY_SEND,
        Grant.SWEEP_SEND,
        Grant.LAUNCH_RETRY_SEND,
    }
)


@dataclass(frozen=True)
class Function:
    """One Lambda function: its handler module and its limits."""

    name: str  # logical name, also the local runtime's name for it
    module: str  # "lambdas.commands" -> handler is lambdas.commands.handler
    grants: frozenset[Grant]
    memory_mb: int = 256
    timeout_seconds: int = 60
    description: str = ""
    # Invoked directly by the agents (no queue, rule or schedule): it gets a fixed name,
    # `agent_function_name`, which the launch template's user data carries.
    agent_invoked: bool = False

    @property
    def handler(self) -> str:
        """The Lambda handler string."""
        return f"{self.module}.handler"


def agent_function_name(stack_name: str, function: str) -> str:
    """The physical name of a function the agents invoke (Lambda: at most 64 characters)."""
    return f"{stack_name}-{function}"[-64:].lstrip("-")


@dataclass(frozen=True)
class Queue:
    """An SQS queue feeding a function in batches, with a dead-letter queue behind it."""

    name: str
    function: str
    topic_filter: dict[str, list[str]] | None = None  # SNS subscription filter, if fed by the topic
    batch_size: int = 10
    max_batching_window_seconds: int = 0
    max_receive_count: int = 5  # deliveries before a message moves to the dead-letter queue
    # Visibility must exceed the function timeout (AWS recommends 6x for event source mappings).
    visibility_timeout_seconds: int = 360
    retention_days: int = 14
    fed_by_agents: bool = False  # instances may send to it
    # FIFO (name ends in .fifo, its dead-letter queue too): senders give a message group and a
    # deduplication id; a group's messages are handled one at a time, in order.
    fifo: bool = False
    # Polled only while a job is live: the mapping is created disabled and the activity
    # switch (respot/control/activity.py) turns it on and off. The intake stays always on.
    idle_off: bool = False


@dataclass(frozen=True)
class Rule:
    """An EventBridge rule on the default bus with one function as its target."""

    name: str
    function: str
    pattern: dict[str, Any]
    description: str = ""


@dataclass(frozen=True)
class Schedule:
    """A function run on a fixed rate."""

    name: str
    function: str
    every_seconds: int
    idle_off: bool = False  # created disabled; the activity switch turns it on and off


@dataclass(frozen=True)
class Wiring:
    """The whole event topology of respot."""

    functions: tuple[Function, ...]
    queues: tuple[Queue, ...]
    rules: tuple[Rule, ...]
    schedules: tuple[Schedule, ...]
    topic_name: str = "jobs"
    table_partition_key: str = "pk"
    table_sort_key: str = "sk"
    table_indexes: tuple[str, ...] = field(default=("live",))

    def function(self, name: str) -> Function:
        """The function called `name`."""
        for f in self.functions:
            if f.name == name:
                return f
        raise KeyError(name)

    def queue(self, name: str) -> Queue:
        """The queue called `name`."""
        for q in self.queues:
            if q.name == name:
                return q
        raise KeyError(name)


def ec2_pattern(*detail_types: str, **detail: list[str]) -> dict[str, Any]:
    """An EventBridge pattern for EC2 service events of these detail-types."""
    pattern: dict[str, Any] = {"source": ["aws.ec2"], "detail-type": list(detail_types)}
    if detail:
        pattern["detail"] = {k.replace("_", "-"): v for k, v in detail.items()}
    return pattern


SPOT_FULFILLMENT = "EC2 Spot Instance Request Fulfillment"
SPOT_INTERRUPTION = "EC2 Spot Instance Interruption Warning"
REBALANCE = "EC2 Instance Rebalance Recommendation"
STATE_CHANGE = "EC2 Instance State-change Notification"

WIRING = Wiring(
    functions=(
        Function(
            "commands",
            "lambdas.commands",
            CONTROL_GRANTS | {Grant.DLQ_SEND, Grant.PRINCIPAL_TAGS_READ},
            description="Researchers' commands: submits and cancels jobs, starts and stops sweeps",
        ),
        Function(
            "agent_events",
            "lambdas.agent_events",
            CONTROL_GRANTS | {Grant.DLQ_SEND},
            description="Applies agent heartbeats, checkpoints and completions",
        ),
        Function(
            "spot_fulfillment",
            "lambdas.spot_fulfillment",
            CONTROL_GRANTS,
            description="Binds a fulfilled spot instance to its job",
        ),
        Function(
            "spot_interruption",
            "lambdas.spot_interruption",
            CONTROL_GRANTS,
            description="Marks interrupted jobs and requests replacement capacity at once",
        ),
        Function(
            "instance_state",
            "lambdas.instance_state",
            CONTROL_GRANTS,
            description="Resumes jobs whose instance went away without finishing",
        ),
        Function(
            "reconcile",
            "lambdas.reconcile",
            CONTROL_GRANTS,
            timeout_seconds=300,
            description="Per-minute look at every live job: policy, stuck requests, orphans",
        ),
        Function(
            "launch_retries",
            "lambdas.launch_retries",
            CONTROL_GRANTS,
            description="Looks at a job again when the lifecycle asked: a paced launch's token",
        ),
        Function(
            "notify",
            "lambdas.notify",
            frozenset({Grant.JOBS_TABLE_READ_WRITE, Grant.SLACK_TOKEN_READ, Grant.DLQ_SEND}),
            timeout_seconds=30,
            description="Posts each job's news to its Slack thread",
        ),
        Function(
            "credentials",
            "lambdas.credentials",
            # The table: the instance's attempt, and the proof ledger. sts:AssumeRole on the
            # job role is granted by infra/constructs/credentials.py, which makes that role.
            frozenset({Grant.JOBS_TABLE_READ_WRITE}),
            timeout_seconds=30,
            description="Vends each job's instances credentials for that job's objects alone",
            agent_invoked=True,
        ),
        Function(
            "sweep",
            "lambdas.sweep",
            CONTROL_GRANTS | {Grant.DLQ_SEND, Grant.SLACK_TOKEN_READ},
            memory_mb=512,  # Optuna and NumPy
            timeout_seconds=120,
            description="Runs Optuna sweeps: tells each study its trials' values, submits the next",
        ),
    ),
    queues=(
        # The intake, polled all the time: one queue for every command (lambdas/commands.py),
        # so at rest one mapping's pollers wait on it, not one set per command kind.
        Queue(
            "commands",
            "commands",
            topic_filter={"command": ["submit", "cancel", "sweep", "sweep-stop", "queue-settings"]},
        ),
        Queue(
            "agent-events",
            "agent_events",
            fed_by_agents=True,
            max_batching_window_seconds=1,
            idle_off=True,
        ),
        # One message per invocation: a Slack failure retries only that message, after the
        # visibility timeout (6x the function's), up to 20 times: about an hour of Slack outage
        # is absorbed before a message reaches the dead-letter queue. (See docs/slack.md.)
        Queue(
            "notifications",
            "notify",
            batch_size=1,
            max_receive_count=20,
            visibility_timeout_seconds=180,
            fifo=True,
            idle_off=True,
        ),
        # One sweep's messages one at a time, in order (message group = sweep id). Off at
        # rest like the job pollers: a sweep has live trial jobs, or a message waiting here
        # (which keeps the reconcile tick from switching off), or it has ended.
        Queue(
            "sweep-events",
            "sweep",
            batch_size=1,
            visibility_timeout_seconds=720,
            fifo=True,
            idle_off=True,
        ),
        # Delayed work of the lifecycle: a paced launch's look again when its reserved launch
        # token is due (DelaySeconds, at most the launch timeout; respot.aws.pacing), read by
        # its own function, which applies that job's tick (not `reconcile`: the activity
        # switch's rights on this mapping are in reconcile's policy, and a mapping onto
        # reconcile itself would make the template circular). Standard (FIFO queues have no
        # per-message delay); a lost or late message costs at most a tick's wait.
        Queue("launch-retries", "launch_retries", idle_off=True),
    ),
    rules=(
        Rule(
            "spot-fulfillment",
            "spot_fulfillment",
            ec2_pattern(SPOT_FULFILLMENT),
            "A spot request was fulfilled",
        ),
        Rule(
            "spot-interruption",
            "spot_interruption",
            ec2_pattern(SPOT_INTERRUPTION, REBALANCE),
            "Two-minute interruption warnings and rebalance recommendations",
        ),
        Rule(
            "instance-state",
            "instance_state",
            ec2_pattern(
                STATE_CHANGE,
                state=["running", "shutting-down", "terminated", "stopping", "stopped"],
            ),
            "Instances that start or go away",
        ),
    ),
    schedules=(Schedule("reconcile", "reconcile", every_seconds=60, idle_off=True),),
)
