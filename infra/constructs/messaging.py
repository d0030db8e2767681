"""How work reaches the control plane: the jobs topic, one queue per wiring queue, dead letters.

Everything here is built from `WIRING`: a queue added there gets its dead-letter queue, its
topic subscription (if it has a filter), its alarm and, in `ControlFunctions`, its event
source mapping, with nothing to add in this module.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.constructs.naming import pascal_id
from infra.nag import suppress
from infra.wiring import WIRING, Wiring

DEAD_LETTER_RETENTION = Duration.days(14)  # the SQS maximum: time to look before it is gone
ALARM_PERIOD = Duration.minutes(5)
SNS_MANAGED_KEY = "alias/aws/sns"  # AWS-managed: no monthly key cost, same-account use


def _queue(scope: Construct, cid: str, **props: object) -> sqs.Queue:
    return sqs.Queue(
        scope,
        cid,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        **props,  # type: ignore[arg-type]
    )


class Messaging(Construct):
    """The jobs topic, the wiring's queues with their dead-letter queues, and one alarm each."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        wiring: Wiring = WIRING,
        alarm_topic: sns.ITopic | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self._alarm_topic = alarm_topic
        self.alarms: list[cloudwatch.Alarm] = []

        self.topic = sns.Topic(
            self,
            "Topic",
            display_name=f"respot {wiring.topic_name}",
            master_key=kms.Alias.from_alias_name(self, "TopicKey", SNS_MANAGED_KEY),
            enforce_ssl=True,
        )

        self.queues: dict[str, sqs.Queue] = {}
        self.dead_letter_queues: dict[str, sqs.Queue] = {}
        for spec in wiring.queues:
            cid = pascal_id(spec.name)
            # A FIFO queue needs a FIFO dead-letter queue; senders give deduplication ids, so
            # content-based deduplication stays off. CDK names FIFO queues <...>.fifo itself.
            fifo: dict[str, object] = (
                {"fifo": True, "content_based_deduplication": False} if spec.fifo else {}
            )
            if spec.fifo and spec.topic_filter is not None:
                raise ValueError(f"queue {spec.name}: the jobs topic is standard, not FIFO")
            dead_letters = dead_letter_queue(self, f"{cid}DeadLetters", **fifo)
            queue = _queue(
                self,
                f"{cid}Queue",
                visibility_timeout=Duration.seconds(spec.visibility_timeout_seconds),
                retention_period=Duration.days(spec.retention_days),
                dead_letter_queue=sqs.DeadLetterQueue(
                    queue=dead_letters, max_receive_count=spec.max_receive_count
                ),
                **fifo,
            )
            if spec.topic_filter is not None:
                # Only the topic sends here. The handlers trust the SNS envelope (its
                # MessageId, its Timestamp, by which a proof's age is judged), and in one
                # account an identity policy granting sqs:SendMessage would do without the
                # queue policy's Allow: so a Deny for every other sender.
                queue.add_to_resource_policy(
                    iam.PolicyStatement(
                        sid="OnlyTheJobsTopicSends",
                        effect=iam.Effect.DENY,
                        principals=[iam.AnyPrincipal()],
                        actions=["sqs:SendMessage"],
                        resources=[queue.queue_arn],
                        conditions={"ArnNotEquals": {"aws:SourceArn": self.topic.topic_arn}},
                    )
                )
                # Raw delivery stays off: the handlers parse the SNS envelope.
                self.topic.add_subscription(
                    subscriptions.SqsSubscription(
                        queue,
                        raw_message_delivery=False,
                        filter_policy={
                            attribute: sns.SubscriptionFilter.string_filter(allowlist=values)
                            for attribute, values in spec.topic_filter.items()
                        },
                    )
                )
            self.queues[spec.name] = queue
            self.dead_letter_queues[spec.name] = dead_letters
            self._alarm(f"{cid}DeadLettersAlarm", dead_letters, f"respot {spec.name} queue")

        # Where EventBridge puts events it could not deliver to a function, and where async
        # invocations go after their last retry. Not any queue's redrive target, so SQS3 fires.
        self.event_dead_letters = dead_letter_queue(self, "EventDeadLetters")
        suppress(
            self.event_dead_letters,
            "SQS3",
            "This queue is itself a dead-letter queue: EventBridge rule targets and the "
            "functions' async on-failure destination send to it. It has an alarm.",
        )
        self._alarm("EventDeadLettersAlarm", self.event_dead_letters, "respot EventBridge targets")

        agents = [q.name for q in wiring.queues if q.fed_by_agents]
        if len(agents) != 1:
            raise ValueError(f"the wiring must have exactly one queue fed by agents, has {agents}")
        self.agent_queue = self.queues[agents[0]]

    def _alarm(self, cid: str, dead_letters: sqs.Queue, what: str) -> None:
        self.alarms.append(dead_letter_alarm(self, cid, dead_letters, what, self._alarm_topic))


def dead_letter_queue(scope: Construct, cid: str, **props: object) -> sqs.Queue:
    """A dead-letter queue as respot makes them: SSE-SQS, TLS only, kept 14 days."""
    return _queue(scope, cid, retention_period=DEAD_LETTER_RETENTION, **props)


def dead_letter_alarm(
    scope: Construct,
    cid: str,
    dead_letters: sqs.IQueue,
    what: str,
    topic: sns.ITopic | None = None,
) -> cloudwatch.Alarm:
    """An alarm as soon as one message waits in `dead_letters`; it notifies `topic` if given."""
    alarm = cloudwatch.Alarm(
        scope,
        cid,
        alarm_description=f"Messages are waiting in the dead-letter queue of {what}",
        metric=dead_letters.metric_approximate_number_of_messages_visible(
            period=ALARM_PERIOD, statistic="Maximum"
        ),
        threshold=0,
        comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        evaluation_periods=1,
        treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
    )
    if topic is not None:
        alarm.add_alarm_action(cloudwatch_actions.SnsAction(topic))
    return alarm
