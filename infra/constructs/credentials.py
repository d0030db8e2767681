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

from aws_cdk import Aws, Duration
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.constructs.fleet import (
    agent_job_statements,
    job_secrets_statement,
    wheelhouse_statement,
)
from infra.grants import list_job_objects
from infra.nag import suppress
from respot.credentials.policy import ENV_INSTANCE_ROLE_NAMES, ENV_JOB_ROLE_ARN


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
    ) -> None:
        super().__init__(scope, construct_id)
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
            ],
        )
        function_role.add_to_policy(
            iam.PolicyStatement(
                sid="AssumeJobRole", actions=["sts:AssumeRole"], resources=[self.role.role_arn]
            )
        )
        function.add_environment(ENV_JOB_ROLE_ARN, self.role.role_arn)
        function.add_environment(
            ENV_INSTANCE_ROLE_NAMES, ",".join(role.role_name for role in instance_roles)
        )
