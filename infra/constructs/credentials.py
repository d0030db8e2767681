"""Per-job credentials: the job role, and who may assume it (the credentials function only).

The agent's work on jobs' objects (read, write its sub-prefixes, prune checkpoints) and on
the wheelhouse is the job role's policy, no longer the instance role's. The `credentials`
function (wiring, `lambdas/credentials.py`) alone may assume the job role, and always does so
with a session policy naming one job's prefix and its researcher's wheelhouse
(`respot.credentials.policy`), after checking that the
instance asking belongs to a live attempt of that job. What one session can do is what both
the role's policy and its session policy allow: one job's objects.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Aws, Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.constructs.fleet import (
    AGENT_WRITES,
    AGENT_WRITES_OBJECTS,
    agent_job_statements,
    job_secrets_statement,
    wheelhouse_statement,
)
from infra.grants import list_job_objects
from infra.nag import suppress
from infra.regions import STACK_SUFFIX_LEN, checkpoint_bucket_prefix, instance_role_name
from respot.credentials.policy import (
    ENV_INSTANCE_ROLE_NAMES,
    ENV_JOB_ROLE_ARN,
    ENV_SATELLITE_BUCKETS,
)
from respot.storage import layout


def satellite_bucket_name(home_stack: str, region: str) -> str:
    """A satellite's checkpoint bucket as the home stack can name it: its prefix, then one `?`
    per character of the satellite stack's id (`respot.credentials.policy.SATELLITE_BUCKET`)."""
    return checkpoint_bucket_prefix(home_stack, Aws.ACCOUNT_ID, region) + "?" * STACK_SUFFIX_LEN


def satellite_buckets_arn(home_stack: str, regions: Sequence[str]) -> str:
    """Every satellite region's checkpoint bucket, in one ARN whatever the number of regions
    (IAM's size quotas): the name part the regions' buckets share (`<home>-<account>-`), then
    `*`. It may match other buckets too; no session reaches them: the credentials function's
    session policy names the one bucket of the attempt's region (`satellite_bucket_name`)."""
    longest = "x" * max(len(r) for r in (*regions, "ap-southeast-1x"))  # never a region
    names = [checkpoint_bucket_prefix(home_stack, Aws.ACCOUNT_ID, r) for r in (*regions, longest)]
    shared = names[0]
    for name in names[1:]:
        while not name.startswith(shared):
            shared = shared[:-1]
    return f"arn:{Aws.PARTITION}:s3:::{shared}*"


def satellite_job_statements(bucket_arns: Sequence[str]) -> list[iam.PolicyStatement]:
    """The agent's statements (`agent_job_statements`, `wheelhouse_statement`, listing) on the
    satellite regions' checkpoint buckets."""
    jobs = layout.JOBS_PREFIX
    return [
        iam.PolicyStatement(
            sid="ReadRegionalJobObjects",
            actions=["s3:GetObject"],
            resources=[f"{arn}/{jobs}*" for arn in bucket_arns],
        ),
        iam.PolicyStatement(
            sid="WriteRegionalJobResults",
            actions=["s3:PutObject", "s3:AbortMultipartUpload"],
            resources=[
                *(f"{arn}/{jobs}*/{kind}/*" for arn in bucket_arns for kind in AGENT_WRITES),
                *(f"{arn}/{jobs}*/{name}" for arn in bucket_arns for name in AGENT_WRITES_OBJECTS),
            ],
        ),
        iam.PolicyStatement(
            sid="PruneRegionalCheckpoints",
            actions=["s3:DeleteObject"],
            resources=[f"{arn}/{jobs}*/checkpoints/*" for arn in bucket_arns],
        ),
        iam.PolicyStatement(
            sid="RegionalWheelhouse",
            actions=["s3:GetObject", "s3:PutObject"],
            resources=[f"{arn}/{layout.WHEELHOUSE_PREFIX}*" for arn in bucket_arns],
        ),
        iam.PolicyStatement(
            sid="ListRegionalBuckets", actions=["s3:ListBucket"], resources=list(bucket_arns)
        ),
    ]


class JobCredentials(Construct):
    """The job role; the credentials function may assume it and knows whom to vend to."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        bucket: s3.IBucket,
        function: lambda_.Function,
        function_role: iam.Role,
        instance_roles: Sequence[iam.IRole],
        satellite_regions: Sequence[str] = (),
    ) -> None:
        """`satellite_regions` (extra_regions): their instances get their job's credentials
        here too, covering their region's checkpoint bucket (`satellite_bucket_name`)."""
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        satellites = {r: satellite_bucket_name(stack.stack_name, r) for r in satellite_regions}
        self.role = iam.Role(
            self,
            "JobRole",
            assumed_by=iam.ArnPrincipal(function_role.role_arn),
            description="respot: one job's objects (assumed by the credentials function with "
            "a session policy naming that job's prefix)",
            # Role chaining caps a session at an hour anyway; the agent refreshes before.
            max_session_duration=Duration.hours(1),
        )
        policy = iam.Policy(
            self,
            "JobPolicy",
            roles=[self.role],
            statements=[
                *agent_job_statements(bucket),
                wheelhouse_statement(bucket),
                list_job_objects(bucket),
                job_secrets_statement(Aws.REGION),
                *(
                    satellite_job_statements(
                        [satellite_buckets_arn(stack.stack_name, list(satellite_regions))]
                    )
                    if satellites
                    else []
                ),
            ],
        )
        suppress(
            policy,
            "IAM5",
            "Any job's objects, because the role serves every job; each session is narrowed "
            "to one job's prefix by the session policy the credentials function passes to "
            "AssumeRole (respot.credentials.policy). Write only the agent's sub-prefixes "
            "(checkpoints, handoff, outputs, logs, tensorboard, outputs.json), delete only "
            "under checkpoints/ (pruning). wheelhouse/: the session policy names the job's "
            "researcher's wheelhouse/<scope>/ alone. Job secrets: those named respot/jobs/... "
            "in the home region; the session policy names the job's own.",
            applies_to=[
                r"^Resource::<.*Bucket.*\.Arn>/jobs/\*$",
                r"^Resource::<.*Bucket.*\.Arn>/wheelhouse/\*$",
                r"^Resource::<.*Bucket.*\.Arn>/jobs/\*/(checkpoints|handoff|outputs|logs|"
                r"tensorboard)/\*$",
                r"^Resource::<.*Bucket.*\.Arn>/jobs/\*/outputs\.json$",
                r"^Resource::arn:<AWS::Partition>:secretsmanager:<AWS::Region>:"
                r"<AWS::AccountId>:secret:respot/jobs/\*$",
                # the satellite regions' checkpoint buckets (by the prefix they share)
                r"^Resource::arn:<AWS::Partition>:s3:::.*-<AWS::AccountId>-\*"
                r"(/(jobs/\*(/(checkpoints|handoff|outputs|logs|tensorboard)/\*|/outputs\.json)?"
                r"|wheelhouse/\*))?$",
            ],
        )
        function_role.add_to_policy(
            iam.PolicyStatement(
                sid="AssumeJobRole", actions=["sts:AssumeRole"], resources=[self.role.role_arn]
            )
        )
        function.add_environment(ENV_JOB_ROLE_ARN, self.role.role_arn)
        names = [role.role_name for role in instance_roles]
        names += [instance_role_name(stack.stack_name, r) for r in satellite_regions]
        function.add_environment(ENV_INSTANCE_ROLE_NAMES, ",".join(names))
        if satellites:
            function.add_environment(ENV_SATELLITE_BUCKETS, stack.to_json_string(satellites))
