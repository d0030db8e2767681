"""Where respot keeps state: the jobs table, the jobs bucket and the bucket of access logs."""

from __future__ import annotations

from typing import Any

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.wiring import WIRING, Wiring

# Key attributes of each secondary index the wiring names. `live` is sparse: the table
# adapter writes live="1" only on jobs that are not terminal, so the index lists live jobs.
INDEX_KEYS: dict[str, tuple[str, str]] = {"live": ("live", "updated_at")}
NONCURRENT_VERSION_DAYS = 30
ACCESS_LOG_DAYS = 365
INCOMPLETE_UPLOAD_DAYS = 7


def checkpoint_lifecycle_rules() -> list[s3.LifecycleRule]:
    """A jobs or checkpoint bucket's: old versions expire, unfinished uploads are aborted."""
    return [
        s3.LifecycleRule(
            id="expire-noncurrent-versions",
            noncurrent_version_expiration=Duration.days(NONCURRENT_VERSION_DAYS),
            abort_incomplete_multipart_upload_after=Duration.days(INCOMPLETE_UPLOAD_DAYS),
        )
    ]


SERVER_ACCESS_LOGS_USE_BUCKET_POLICY = "@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy"


def _private_bucket(scope: Construct, construct_id: str, **props: Any) -> s3.Bucket:
    """SSE-S3, no public access, no ACLs, TLS 1.2+ only, kept when the stack goes."""
    return s3.Bucket(
        scope,
        construct_id,
        encryption=s3.BucketEncryption.S3_MANAGED,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
        enforce_ssl=True,
        minimum_tls_version=1.2,
        removal_policy=RemovalPolicy.RETAIN,
        **props,
    )


def access_log_bucket(scope: Construct) -> s3.Bucket:
    """The private bucket for S3 server access logs and VPC flow logs, expired after a while."""
    return _private_bucket(
        scope,
        "LogBucket",
        lifecycle_rules=[
            s3.LifecycleRule(
                id="expire-logs",
                expiration=Duration.days(ACCESS_LOG_DAYS),
                abort_incomplete_multipart_upload_after=Duration.days(INCOMPLETE_UPLOAD_DAYS),
            )
        ],
    )


class JobStore(Construct):
    """The DynamoDB table of job records and the S3 bucket of job objects (`jobs/...`)."""

    def __init__(self, scope: Construct, construct_id: str, *, wiring: Wiring = WIRING) -> None:
        super().__init__(scope, construct_id)
        # Access logs are delivered under a bucket policy, not a LogDeliveryWrite ACL (set here,
        # not in cdk.json, so `python app.py`, `cdk synth` and a bare test stack agree).
        self.node.set_context(SERVER_ACCESS_LOGS_USE_BUCKET_POLICY, True)
        unknown = set(wiring.table_indexes) - INDEX_KEYS.keys()
        if unknown:
            raise ValueError(f"no key attributes known for table indexes {sorted(unknown)}")

        self.table = dynamodb.Table(
            self,
            "Table",
            partition_key=dynamodb.Attribute(
                name=wiring.table_partition_key, type=dynamodb.AttributeType.STRING
            ),
            sort_key=dynamodb.Attribute(
                name=wiring.table_sort_key, type=dynamodb.AttributeType.STRING
            ),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            deletion_protection=True,
            removal_policy=RemovalPolicy.RETAIN,
            # Used identity proofs (respot.identity.verify.DynamoProofLedger) expire by themselves.
            time_to_live_attribute="ttl",
        )
        for index in wiring.table_indexes:
            partition, sort = INDEX_KEYS[index]
            self.table.add_global_secondary_index(
                index_name=index,
                partition_key=dynamodb.Attribute(
                    name=partition, type=dynamodb.AttributeType.STRING
                ),
                sort_key=dynamodb.Attribute(name=sort, type=dynamodb.AttributeType.STRING),
                # Keys only: its one reader (respot.aws.jobs, live_job_ids) asks for `pk` and
                # reads each record from the table; ALL would store every live record twice.
                projection_type=dynamodb.ProjectionType.KEYS_ONLY,
            )
        self.index_names = tuple(wiring.table_indexes)

        # Server access logs of the jobs bucket, and VPC flow logs when the stack makes the VPC.
        self.log_bucket = access_log_bucket(self)

        self.bucket = _private_bucket(
            self,
            "Bucket",
            versioned=True,
            server_access_logs_bucket=self.log_bucket,
            server_access_logs_prefix="s3-access/jobs-bucket/",
            lifecycle_rules=checkpoint_lifecycle_rules(),
        )
