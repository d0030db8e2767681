"""The GPU instances' side: launch template, instance role, security group and bootstrap.

Every instance respot launches comes from this launch template (the control plane's IAM
allows no other): IMDSv2 only, instance tags readable through IMDS (the agent reads its job
id and attempt there), no key pair, no inbound port, an encrypted gp3 root volume, and a
fixed bootstrap script that installs the agent package and runs `python3 -m respot.agent`.
"""

from __future__ import annotations

from collections.abc import Sequence

import jsii
from aws_cdk import ArnFormat, Aws, RemovalPolicy, Stack, Tags
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_assets as s3_assets
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.bundling import LocalAsset, agent_package_asset
from infra.grants import job_objects, list_job_objects
from infra.nag import suppress
from infra.settings import DEFAULT_FRAMEWORK_PYTHON
from infra.userdata import agent_environment, user_data_lines
from respot.core.lifecycle import MANAGED_TAG
from respot.spec.names import JOB_SECRET_PREFIX
from respot.storage import layout

# Containers on the instance need a second hop to reach IMDS; nothing further away may.
IMDS_HOP_LIMIT = 2
LOG_RETENTION = logs.RetentionDays.ONE_MONTH
# What the agent writes under a job's prefix (see respot.storage.layout); it only reads the rest.
AGENT_WRITES = ("checkpoints", "handoff", "outputs", "logs", "tensorboard")
# Single objects the agent writes beside those prefixes: the outputs' manifest (layout.py).
AGENT_WRITES_OBJECTS = ("outputs.json",)


def agent_job_statements(bucket: s3.IBucket) -> list[iam.PolicyStatement]:
    """What the agent does on jobs' objects: read, write its sub-prefixes, prune checkpoints.

    With job credentials (the home region) these are the job role's, narrowed per job by the
    session policy (`respot.credentials.policy`); a satellite region's instance role still
    holds them itself, for every job (docs/security.md).
    """
    jobs = layout.JOBS_PREFIX
    return [
        job_objects(bucket, "ReadJobObjects", "s3:GetObject"),
        iam.PolicyStatement(
            sid="WriteJobResults",
            actions=["s3:PutObject", "s3:AbortMultipartUpload"],
            resources=[
                *(bucket.arn_for_objects(f"{jobs}*/{kind}/*") for kind in AGENT_WRITES),
                *(bucket.arn_for_objects(f"{jobs}*/{name}") for name in AGENT_WRITES_OBJECTS),
            ],
        ),
        iam.PolicyStatement(
            # Pruning: blobs and manifests of checkpoints no longer kept (storage.checkpoints).
            sid="PruneCheckpoints",
            actions=["s3:DeleteObject"],
            resources=[bucket.arn_for_objects(f"{jobs}*/checkpoints/*")],
        ),
    ]


def wheelhouse_statement(bucket: s3.IBucket) -> iam.PolicyStatement:
    """Job environments' cached wheels (docs/environments.md), under `wheelhouse/`.

    With job credentials (the home region) this is the job role's, narrowed by the session
    policy to the job's researcher's `wheelhouse/<scope>/` (`respot.credentials.policy`); the
    instance role has none. A satellite region's instance role still holds it for all.
    """
    return iam.PolicyStatement(
        sid="JobWheelhouse",
        actions=["s3:GetObject", "s3:PutObject"],
        resources=[bucket.arn_for_objects(f"{layout.WHEELHOUSE_PREFIX}*")],
    )


def job_secrets_statement(home_region: str) -> iam.PolicyStatement:
    """`secrets: {NAME: ARN}` of a job spec, read by the agent (respot.agent.secrets): only
    secrets named respot/jobs/... in the home region (a session policy narrows it per job)."""
    return iam.PolicyStatement(
        sid="ReadJobSecrets",
        actions=["secretsmanager:GetSecretValue"],
        resources=[
            f"arn:{Aws.PARTITION}:secretsmanager:{home_region}:{Aws.ACCOUNT_ID}:secret:"
            f"{JOB_SECRET_PREFIX}*"
        ],
    )


def _data_bucket_resources(bucket: str) -> tuple[str, str, str | None]:
    """(bucket ARN, object ARN pattern, key prefix or None) of a data bucket ARN or name."""
    if not bucket.startswith("arn:"):
        bucket = f"arn:{Aws.PARTITION}:s3:::{bucket}"
    bucket_arn, _, prefix = bucket.partition("/")
    prefix = prefix.strip("/")
    objects = f"{bucket_arn}/{prefix}/*" if prefix else f"{bucket_arn}/*"
    return bucket_arn, objects, prefix or None


@jsii.implements(ec2.IMachineImage)
class FixedImage:
    """One AMI id given by the platform team (the same id in whichever region is deployed)."""

    def __init__(self, ami_id: str) -> None:
        self.ami_id = ami_id

    def get_image(self, scope: Construct) -> ec2.MachineImageConfig:
        return ec2.MachineImageConfig(
            image_id=self.ami_id,
            os_type=ec2.OperatingSystemType.LINUX,
            user_data=ec2.UserData.for_linux(),
        )


class Fleet(Construct):
    """Launch template, instance role and profile, security group and agent package."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        bucket: s3.IBucket,
        agent_queue: sqs.IQueue,
        machine_image: ec2.IMachineImage,
        data_buckets: Sequence[str] = (),
        root_volume_gb: int = 200,
        root_device_name: str = "/dev/sda1",
        log_group_name: str | None = None,
        agent_asset: LocalAsset | None = None,
        framework_python: str = DEFAULT_FRAMEWORK_PYTHON,
        managed_by: str | None = None,
        role_name: str | None = None,
        queue_region: str | None = None,
        credentials_function: str | None = None,
    ) -> None:
        """`managed_by`: the deployment whose control plane launches and terminates these
        instances (default: this stack; a satellite stack names its home stack). `role_name`:
        a fixed name for the instance role (a satellite's, which the home stack may pass).
        `queue_region`: the home region when it is not this stack's (a satellite's): the agent
        queue is there, and so are the job secrets and ECR images the instances read, which
        a satellite's instances read there, under the home instance role's statements.
        `credentials_function`: the name of the function that vends each job's credentials
        (`lambdas/credentials.py`, in the home region, a satellite's too): the instance role
        then may invoke it and has no access to any job's objects or the wheelhouse itself;
        None: the role holds them."""
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.credentials_function = credentials_function
        managed_by = managed_by or stack.stack_name
        # Where job secrets and ECR images are: the home region (this one, or a satellite's home).
        home_region = queue_region or Aws.REGION

        self.log_group = logs.LogGroup(
            self,
            "JobLogs",
            log_group_name=log_group_name,
            retention=LOG_RETENTION,
            removal_policy=RemovalPolicy.RETAIN,
        )

        asset = agent_asset or agent_package_asset()
        self.agent_package = s3_assets.Asset(self, "AgentPackage", **asset.asset_options())

        # ---- instance role: the job's own objects, its data, the agent queue, its logs
        self.role = iam.Role(
            self,
            "InstanceRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            role_name=role_name,
            description="respot GPU instances: their job's credentials, data, agent queue, logs",
        )
        self.instance_profile = iam.InstanceProfile(self, "InstanceProfile", role=self.role)
        policy = iam.Policy(self, "InstancePolicy", roles=[self.role])
        if credentials_function is None:
            policy.add_statements(*agent_job_statements(bucket), wheelhouse_statement(bucket))
        else:
            policy.add_statements(
                iam.PolicyStatement(
                    # The only way to a job's objects: that job's credentials, vended to the
                    # job's live instances (respot.credentials).
                    sid="GetJobCredentials",
                    actions=["lambda:InvokeFunction"],
                    resources=[
                        stack.format_arn(
                            service="lambda",
                            resource="function",
                            resource_name=credentials_function,
                            region=queue_region,  # the home region (None: this stack's)
                            arn_format=ArnFormat.COLON_RESOURCE_NAME,
                        )
                    ],
                )
            )
        policy.add_statements(
            # Listing the bucket (names, no contents): S3 answers a missing object with 404
            # only to a caller allowed s3:ListBucket (respot.agent.environment, the store).
            list_job_objects(bucket),
            iam.PolicyStatement(
                sid="ReadAgentPackage",
                actions=["s3:GetObject"],
                resources=[
                    f"arn:{Aws.PARTITION}:s3:::{self.agent_package.s3_bucket_name}/"
                    f"{self.agent_package.s3_object_key}"
                ],
            ),
            iam.PolicyStatement(
                sid="SendAgentEvents",
                actions=["sqs:SendMessage"],
                resources=[agent_queue.queue_arn],
            ),
            iam.PolicyStatement(
                sid="WriteJobLogs",
                actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                resources=[self.log_group.log_group_arn],
            ),
        )
        if credentials_function is None:  # else the job role's, per job (credentials.py)
            policy.add_statements(job_secrets_statement(home_region))
        # Jobs with `image:` (docs/environments.md): log in to ECR and pull, this account only.
        policy.add_statements(
            iam.PolicyStatement(
                sid="EcrLogin", actions=["ecr:GetAuthorizationToken"], resources=["*"]
            ),
            iam.PolicyStatement(
                sid="PullJobImages",
                actions=[
                    "ecr:BatchGetImage",
                    "ecr:GetDownloadUrlForLayer",
                    "ecr:BatchCheckLayerAvailability",
                ],
                resources=[
                    stack.format_arn(
                        service="ecr", region=home_region, resource="repository", resource_name="*"
                    )
                ],
            ),
        )
        suppress(
            policy,
            "IAM5",
            "ecr:GetAuthorizationToken has no resource type (AWS: it must be '*'); image pulls "
            "are limited to this account's repositories in the home region: a job names its image "
            "at submit time, so no one repository can be listed at deploy time.",
            applies_to=[r"^Resource::\*$", r"^Resource::arn:.*:ecr:.*:repository/\*$"],
        )
        for bucket_ref in data_buckets:
            bucket_arn, objects, prefix = _data_bucket_resources(bucket_ref)
            policy.add_statements(
                iam.PolicyStatement(actions=["s3:GetObject"], resources=[objects]),
                iam.PolicyStatement(
                    actions=["s3:ListBucket"],
                    resources=[bucket_arn],
                    conditions={"StringLike": {"s3:prefix": [f"{prefix}/*"]}} if prefix else None,
                ),
            )
        suppress(
            policy,
            "IAM5",
            "The instance role (home and satellite regions) reaches no job's objects: the "
            "agent gets its job's own credentials from the home credentials function "
            "(docs/security.md). Only a wiring without that function covers every job's prefix: "
            "read under jobs/, write only the agent's sub-prefixes (checkpoints, "
            "handoff, outputs, logs, tensorboard; the outputs.json manifest; deletes under "
            "checkpoints/ for pruning). Both list the bucket, which holds only jobs/ and "
            "wheelhouse/ (names, no contents). "
            "That role also reads and writes wheelhouse/ (wheels keyed by researcher and "
            "requirements hash; otherwise the job's credentials name its researcher's "
            "prefix). Job secrets: only "
            "those named respot/jobs/... in the home region, the names job specs reference "
            "by ARN.",
            applies_to=[
                r"^Resource::<.*Bucket.*\.Arn>/jobs/\*$",
                r"^Resource::<.*Bucket.*\.Arn>/wheelhouse/\*$",
                r"^Resource::<.*Bucket.*\.Arn>/jobs/\*/(checkpoints|handoff|outputs|logs|"
                r"tensorboard)/\*$",
                r"^Resource::<.*Bucket.*\.Arn>/jobs/\*/outputs\.json$",
                r"^Resource::arn:<AWS::Partition>:secretsmanager:(<AWS::Region>|[a-z]+(-[a-z]+)+-\d):"
                r"<AWS::AccountId>:secret:respot/jobs/\*$",
            ],
        )
        if data_buckets:
            suppress(
                policy,
                "IAM5",
                "Training data: the platform team named these buckets (data_bucket_arns); "
                "instances only read objects under them.",
                applies_to=[r"^Resource::arn:.*:s3:::[^<>]*/\*$"],
            )

        # ---- no inbound at all; out only to HTTPS (AWS APIs, S3, package indexes) and HTTP
        self.security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=vpc,
            description="respot GPU instances: no inbound; outbound HTTPS and HTTP only",
            allow_all_outbound=False,
        )
        self.security_group.add_egress_rule(
            ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "HTTPS: AWS APIs, S3, package indexes"
        )
        self.security_group.add_egress_rule(
            ec2.Peer.any_ipv4(), ec2.Port.tcp(80), "HTTP: Ubuntu package mirrors"
        )

        # ---- the bootstrap: deployment values in a file, then a fixed script
        self.agent_environment: dict[str, str] = agent_environment(
            bucket=bucket.bucket_name,
            agent_queue_url=agent_queue.queue_url,
            region=Aws.REGION,
            log_group=self.log_group.log_group_name,
            asset_bucket=self.agent_package.s3_bucket_name,
            asset_key=self.agent_package.s3_object_key,
            framework_python=framework_python,
            queue_region=queue_region,
            credentials_function=credentials_function,
        )
        user_data = ec2.UserData.for_linux()
        # The same function renders what the local runtime boots (infra/local/sandbox.py).
        user_data.add_commands(*user_data_lines(self.agent_environment))
        self.user_data = user_data

        self.image_id = machine_image.get_image(self).image_id
        self.launch_template = ec2.LaunchTemplate(
            self,
            "LaunchTemplate",
            machine_image=machine_image,
            user_data=user_data,
            instance_profile=self.instance_profile,
            security_group=self.security_group,
            require_imdsv2=True,
            http_tokens=ec2.LaunchTemplateHttpTokens.REQUIRED,
            http_endpoint=True,
            http_put_response_hop_limit=IMDS_HOP_LIMIT,
            instance_metadata_tags=True,
            instance_initiated_shutdown_behavior=ec2.InstanceInitiatedShutdownBehavior.TERMINATE,
            detailed_monitoring=False,
            block_devices=[
                ec2.BlockDevice(
                    device_name=root_device_name,
                    volume=ec2.BlockDeviceVolume.ebs(
                        root_volume_gb,
                        volume_type=ec2.EbsDeviceVolumeType.GP3,
                        encrypted=True,
                        delete_on_termination=True,
                    ),
                )
            ],
            version_description="respot GPU worker",
        )
        # Instances (and volumes) carry the tag the control plane may terminate by.
        Tags.of(self.launch_template).add(MANAGED_TAG, managed_by)
        template_id = self.launch_template.launch_template_id
        if template_id is None:  # only imported templates lack one
            raise RuntimeError("the launch template has no id")
        self.launch_template_id: str = template_id
        self.launch_template_arn = stack.format_arn(
            service="ec2",
            resource="launch-template",
            resource_name=template_id,
            arn_format=ArnFormat.SLASH_RESOURCE_NAME,
        )
