"""AWS list prices respot's control plane pays, us-east-1, as the public pricing pages list them.

Checked on 2026-11-21 against the pricing pages below (and secondary summaries of them dated
2025-2026 where a page was only reachable that way). No free tier is applied anywhere: the
figures are what the requests cost at list price. Prices change; edit them here, in one place.
"""

from __future__ import annotations

from dataclasses import dataclass

CHECKED_ON = "2026-11-21"
REGION = "us-east-1"


@dataclass(frozen=True)
class Price:
    """One list price."""

    usd: float
    per: str
    source: str


PRICES: dict[str, Price] = {
    "lambda_request": Price(0.20 / 1e6, "request", "https://aws.amazon.com/lambda/pricing/"),
    # x86; arm64 (Graviton) is 0.0000133334, 20% less.
    "lambda_gb_second": Price(0.0000166667, "GB-second", "https://aws.amazon.com/lambda/pricing/"),
    "lambda_gb_second_arm64": Price(
        0.0000133334, "GB-second (arm64)", "https://aws.amazon.com/lambda/pricing/"
    ),
    # Events EventBridge delivers to a bus in another region (a satellite's forwarded EC2
    # events) are billed as custom events; AWS service events on the default bus are free.
    "eventbridge_cross_region": Price(
        1.00 / 1e6, "event", "https://aws.amazon.com/eventbridge/pricing/"
    ),
    # Standard queue; every 64 KB chunk of a payload is one request.
    "sqs_request": Price(0.40 / 1e6, "request", "https://aws.amazon.com/sqs/pricing/"),
    # Standard topic publish; deliveries to SQS subscriptions are free.
    "sns_publish": Price(0.50 / 1e6, "publish", "https://aws.amazon.com/sns/pricing/"),
    "dynamodb_wru": Price(
        0.625 / 1e6, "write request unit", "https://aws.amazon.com/dynamodb/pricing/on-demand/"
    ),
    "dynamodb_rru": Price(
        0.125 / 1e6, "read request unit", "https://aws.amazon.com/dynamodb/pricing/on-demand/"
    ),
    "dynamodb_storage": Price(
        0.25, "GB-month", "https://aws.amazon.com/dynamodb/pricing/on-demand/"
    ),
    "s3_put_class": Price(
        0.005 / 1000, "PUT/COPY/POST/LIST request", "https://aws.amazon.com/s3/pricing/"
    ),
    "s3_get_class": Price(0.0004 / 1000, "GET/HEAD request", "https://aws.amazon.com/s3/pricing/"),
    "s3_storage": Price(0.023, "GB-month (Standard)", "https://aws.amazon.com/s3/pricing/"),
    "logs_ingest": Price(0.50, "GB ingested", "https://aws.amazon.com/cloudwatch/pricing/"),
    "logs_storage": Price(0.03, "GB-month", "https://aws.amazon.com/cloudwatch/pricing/"),
    # What the Slack token cost in Secrets Manager, before it moved to Parameter Store.
    "secret": Price(0.40, "secret-month", "https://aws.amazon.com/secrets-manager/pricing/"),
    # Parameter Store standard parameters (the Slack token is a standard SecureString): "no
    # additional charge" for storage and standard-throughput API calls.
    "ssm_standard_parameter": Price(
        0.0, "parameter-month", "https://aws.amazon.com/systems-manager/pricing/"
    ),
    # The AWS managed key aws/ssm has no monthly fee; each Decrypt (a GetParameter with
    # decryption) is a KMS request. A customer managed key would add $1.00 a month.
    "kms_request": Price(0.03 / 1e4, "request", "https://aws.amazon.com/kms/pricing/"),
    # Standard-resolution metric alarm; the free tier's 10 alarms do not expire.
    "alarm": Price(0.10, "alarm-month", "https://aws.amazon.com/cloudwatch/pricing/"),
    # Not billed: EC2 API calls (RunInstances, TerminateInstances, Describe*), AWS service
    # events on the default EventBridge bus and scheduled rules, SNS -> SQS deliveries, SSM
    # standard parameters and their standard-throughput API calls, DynamoDB/S3 DELETE requests.
}

S3_PUT_CLASS = frozenset(
    {
        "PutObject",
        "CopyObject",
        "PostObject",
        "ListObjects",
        "ListObjectsV2",
        "CreateMultipartUpload",
        "UploadPart",
        "CompleteMultipartUpload",
        "CreateBucket",
        "PutBucketVersioning",
    }
)
S3_GET_CLASS = frozenset({"GetObject", "HeadObject", "HeadBucket", "GetBucketVersioning"})
S3_FREE = frozenset({"DeleteObject", "DeleteObjects", "AbortMultipartUpload"})

HOURS_PER_MONTH = 730.0


def usd(name: str, quantity: float) -> float:
    """`quantity` units of price `name`, in dollars."""
    return PRICES[name].usd * quantity
