"""What one job's credentials allow: the session policy, and the names of the parts (pure).

AWS grants an assumed role's session what both the role's policies and the session policy
allow. The job role's own policy (`infra/constructs/credentials.py`) is the agent's work on
any job's objects; the session policy narrows it to one job's prefix, so two jobs never hold
credentials for each other's objects. Role chaining (a Lambda's role assuming another role)
caps a session at one hour: the agent refreshes before that (`respot.credentials.vending`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from respot.storage import layout

# The command name bound into the agent's identity proof (header x-respot-command).
COMMAND = "job-credentials"
# Role chaining caps the session at an hour; the agent refreshes it 15 minutes before its end.
DURATION_SECONDS = 3600
# What a job's credentials may do on its own objects (the job role allows no more anywhere).
JOB_OBJECT_ACTIONS = (
    "s3:GetObject",
    "s3:PutObject",
    "s3:AbortMultipartUpload",
    "s3:DeleteObject",
)
# STS's limit on an inline session policy (packed; its binary form is checked by STS too).
MAX_SESSION_POLICY_CHARS = 2048
_SESSION_NAME = re.compile(r"[^\w+=,.@-]")


def session_policy(
    bucket: str, job_id: str, partition: str = "aws", reads: Sequence[str] = ()
) -> dict[str, Any]:
    """The session policy of `job_id`'s credentials: its own prefix, and listing the bucket.

    `reads`: keys under `jobs/` the job's spec names as data (an earlier job's outputs,
    `respot.spec.reach`), each readable as an object or as a prefix; never a submission.
    Listing stays bucket-wide: S3 answers HeadObject on a missing key with 404 only to a
    caller allowed s3:ListBucket on the bucket (a prefix condition makes it 403), and the
    agent asks "is it there yet?" often. A job can therefore list other jobs' key names,
    never read, write or delete their objects (docs/security.md).
    """
    prefix = layout.job_prefix(job_id)  # checks the id: no wildcard or slash can slip in
    bucket_arn = f"arn:{partition}:s3:::{bucket}"
    statements: list[dict[str, Any]] = [
        {
            "Sid": "ThisJobsObjects",
            "Effect": "Allow",
            "Action": list(JOB_OBJECT_ACTIONS),
            "Resource": f"{bucket_arn}/{prefix}*",
        },
        {"Sid": "ListJobsBucket", "Effect": "Allow", "Action": "s3:ListBucket",
         "Resource": bucket_arn},
    ]  # fmt: skip
    data = sorted({r for key in reads for r in _read_resources(bucket_arn, key)})
    if data:
        statements.append(
            {"Sid": "DataFromEarlierJobs", "Effect": "Allow", "Action": "s3:GetObject",
             "Resource": data}
        )  # fmt: skip
        statements.append(
            {"Sid": "NoSubmissions", "Effect": "Deny", "Action": "s3:GetObject",
             "Resource": f"{bucket_arn}/{layout.JOBS_PREFIX}*/submission.json"}
        )  # fmt: skip
    return {"Version": "2012-10-17", "Statement": statements}


def _read_resources(bucket_arn: str, key: str) -> list[str]:
    """`key` as an object and as a prefix (what `respot.agent.workspace.fetch_data` reads)."""
    if not key.startswith(layout.JOBS_PREFIX) or any(c in key for c in "*?"):
        return []  # not under jobs/, or a wildcard IAM would widen: nothing granted
    if key.endswith("/"):
        return [f"{bucket_arn}/{key}*"]
    return [f"{bucket_arn}/{key}", f"{bucket_arn}/{key}/*"]


def packed_size(policy: dict[str, Any]) -> int:
    """The policy's length as JSON without spaces (STS refuses a session policy over 2,048)."""
    return len(json.dumps(policy, separators=(",", ":")))


def session_name(job_id: str, instance_id: str) -> str:
    """The role session's name (CloudTrail shows it): `<instance>@<job>`, at most 64 chars."""
    return _SESSION_NAME.sub("-", f"{instance_id}@{job_id}")[:64]


def instance_of(caller_arn: str, instance_role_names: frozenset[str]) -> str | None:
    """The instance id of an instance role's session ARN, or None for any other caller.

    An instance profile's session is `arn:<partition>:sts::<account>:assumed-role/<role>/<i-...>`.
    """
    match = re.fullmatch(
        r"arn:[a-z-]+:sts::\d{12}:assumed-role/(?P<role>[\w+=,.@-]+)/(?P<session>i-[0-9a-f]{8,17})",
        caller_arn,
    )
    if match is None or match.group("role") not in instance_role_names:
        return None
    return match.group("session")


# The credentials function's environment (set by infra/constructs/credentials.py) ...
ENV_JOB_ROLE_ARN = "RESPOT_JOB_ROLE_ARN"
ENV_INSTANCE_ROLE_NAMES = "RESPOT_INSTANCE_ROLE_NAMES"  # comma-separated role names
# ... and the agent's (the launch template's user data): the function it asks.
ENV_CREDENTIALS_FUNCTION = "RESPOT_CREDENTIALS_FUNCTION"
