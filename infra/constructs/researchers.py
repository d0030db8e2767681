"""How researchers find and use a deployment: the discovery parameter, their policy, outputs.

The SDK reads one SSM parameter (`/respot/deployment` by default) to learn the topic, table,
bucket and agent queue. What a researcher may do is one managed policy the platform team
attaches to researcher roles, and, when it lists them, the topic's own policy refuses
`sns:Publish` to anyone else.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Aws, CfnOutput, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from infra.grants import job_objects, list_job_objects
from infra.nag import suppress
from respot.identity.proofs import CANONICAL_DIGEST
from respot.storage import layout

RESEARCHER_POLICY_NAME = "RespotResearcherPolicy"


class ResearcherAccess(Construct):
    """The deployment parameter, `RespotResearcherPolicy`, the topic policy and the outputs."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        topic: sns.ITopic,
        table: dynamodb.ITable,
        index_names: Sequence[str],
        bucket: s3.IBucket,
        agent_queue: sqs.IQueue,
        parameter_name: str,
        job_logs: logs.ILogGroup | None = None,
        slack_token_parameter: str | None = None,
        instance_types: Sequence[str] = (),
        data_buckets: Sequence[str] | None = None,
        policy_name: str = RESEARCHER_POLICY_NAME,
        publisher_role_arns: Sequence[str] = (),
        fis_template_id: str | None = None,
        workspaces: bool = True,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        jobs = layout.JOBS_PREFIX

        self.deployment = {
            "stack": stack.stack_name,
            "region": Aws.REGION,
            "topic_arn": topic.topic_arn,
            "table_name": table.table_name,
            "bucket": bucket.bucket_name,
            "agent_queue_url": agent_queue.queue_url,
            # The commands function checks proofs' canonical digest: the SDK signs that one.
            "proof_digest": CANONICAL_DIGEST,
            # The stack setting `workspaces`: `respot notebook start` refuses when false.
            "workspaces": "true" if workspaces else "false",
        }
        if fis_template_id is not None:  # what `respot selftest` starts
            self.deployment["fis_template_id"] = fis_template_id
        if job_logs is not None:  # where `respot logs` reads training output
            self.deployment["log_group"] = job_logs.log_group_name
        if slack_token_parameter is not None:  # where the platform team puts the Slack token
            self.deployment["slack_token_parameter"] = slack_token_parameter
        if instance_types:  # the allowed types: the SDK refuses others before uploading
            self.deployment["instance_types"] = ",".join(instance_types)
        if data_buckets is not None:  # what instances read data from (even none): the SDK
            # refuses a data URI outside it before uploading (respot.spec.reach)
            self.deployment["data_buckets"] = ",".join(data_buckets)
        self.parameter = ssm.StringParameter(
            self,
            "Deployment",
            parameter_name=parameter_name,
            description="respot deployment: where the SDK publishes jobs and reads their state",
            string_value=stack.to_json_string(self.deployment),
            tier=ssm.ParameterTier.STANDARD,
        )

        self.policy = iam.ManagedPolicy(
            self,
            "ResearcherPolicy",
            managed_policy_name=policy_name,
            description="respot: submit and follow jobs (attach to researcher roles)",
            statements=[
                iam.PolicyStatement(
                    sid="PublishJobCommands", actions=["sns:Publish"], resources=[topic.topic_arn]
                ),
                iam.PolicyStatement(
                    sid="FindDeployment",
                    actions=["ssm:GetParameter"],
                    resources=[self.parameter.parameter_arn],
                ),
                iam.PolicyStatement(
                    sid="ReadJobRecords",
                    # Scan: `respot ls` and `respot cost` list a team's recent jobs.
                    actions=["dynamodb:GetItem", "dynamodb:Query", "dynamodb:Scan"],
                    resources=[
                        table.table_arn,
                        *(f"{table.table_arn}/index/{name}" for name in index_names),
                    ],
                ),
                iam.PolicyStatement(
                    sid="UploadJobCode",
                    actions=["s3:PutObject"],
                    resources=[bucket.arn_for_objects(f"{jobs}*/code/*")],
                ),
                # Code is content-addressed and create-only: a PutObject without
                # `If-None-Match: *` (which would replace an existing zip, another
                # researcher's included) is refused. The SDK uploads code in one PutObject
                # with that header; a multipart upload (whose parts carry no header) is
                # refused too, which no respot client makes.
                iam.PolicyStatement(
                    sid="CodeIsCreateOnly",
                    effect=iam.Effect.DENY,
                    actions=["s3:PutObject"],
                    resources=[bucket.arn_for_objects(f"{jobs}*/code/*")],
                    conditions={"Null": {"s3:if-none-match": "true"}},
                ),
                job_objects(bucket, "ReadJobObjects", "s3:GetObject"),
                list_job_objects(bucket),
                # `respot run --check`: the spot prices its cost estimate is made with, read
                # as the control plane reads them. Read-only; EC2 takes only Resource * here.
                iam.PolicyStatement(
                    sid="ReadSpotPrices",
                    actions=["ec2:DescribeSpotPriceHistory"],
                    resources=["*"],
                ),
                # The stored submission holds the environment values (the job record keeps
                # only their names): no researcher reads another's, nor their own, from S3.
                iam.PolicyStatement(
                    sid="NoSubmissions",
                    effect=iam.Effect.DENY,
                    actions=["s3:GetObject"],
                    resources=[bucket.arn_for_objects(f"{jobs}*/submission.json")],
                ),
                # A workspace's Jupyter token (docs/notebooks.md): only the job's credentials
                # read it; its owner keeps a copy on the laptop.
                iam.PolicyStatement(
                    sid="NoWorkspaceTokens",
                    effect=iam.Effect.DENY,
                    actions=["s3:GetObject"],
                    resources=[bucket.arn_for_objects(f"{jobs}*/code/{layout.WORKSPACE_TOKEN}")],
                ),
            ],
        )
        if job_logs is not None:
            # `respot logs`: list a job's streams and read them (the ARN covers its streams).
            self.policy.add_statements(
                iam.PolicyStatement(
                    sid="ReadJobLogs",
                    actions=["logs:DescribeLogStreams", "logs:GetLogEvents"],
                    resources=[job_logs.log_group_arn],
                )
            )
        suppress(
            self.policy,
            "IAM5",
            "Researchers submit and follow many jobs: they upload code only under "
            "jobs/<job>/code/ and read objects under jobs/ (checkpoints, outputs, logs). "
            "Nothing outside jobs/ and no write elsewhere. ec2:DescribeSpotPriceHistory (`respot "
            "run --check`'s spot prices) supports no resource-level permissions: AWS accepts "
            "only Resource *; it is read-only.",
            applies_to=[
                r"^Resource::<.*Bucket.*\.Arn>/jobs/\*$",
                r"^Resource::<.*Bucket.*\.Arn>/jobs/\*/code/\*$",
                r"^Resource::\*$",
            ],
        )

        if publisher_role_arns:
            topic.add_to_resource_policy(
                iam.PolicyStatement(
                    sid="ResearchersPublish",
                    principals=[iam.ArnPrincipal(arn) for arn in publisher_role_arns],
                    actions=["sns:Publish"],
                    resources=[topic.topic_arn],
                )
            )
            topic.add_to_resource_policy(
                iam.PolicyStatement(
                    sid="OnlyResearchersPublish",
                    effect=iam.Effect.DENY,
                    principals=[iam.AnyPrincipal()],
                    actions=["sns:Publish"],
                    resources=[topic.topic_arn],
                    conditions={"ArnNotLike": {"aws:PrincipalArn": list(publisher_role_arns)}},
                )
            )

        outputs = {
            **self.deployment,
            "deployment_parameter": self.parameter.parameter_name,
            "researcher_policy_arn": self.policy.managed_policy_arn,
        }
        for key, value in outputs.items():
            output_id = key.title().replace("_", "")  # "topic_arn" -> "TopicArn"
            CfnOutput(self, output_id, key=output_id, value=value)
