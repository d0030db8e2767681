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
# What they may do in their researcher's wheelhouse (the job role allows no more there).
WHEELHOUSE_ACTIONS = ("s3:GetObject", "s3:PutObject")
# A satellite region's checkpoint bucket as the home stack can name it: its fixed prefix (a
# bucket name's characters) and `?` for each of the 8 characters of the satellite stack's id
# (infra.regions): `?` matches one character, so no other bucket's key can match, as `*` could.
SATELLITE_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{2,54}-\?{8}")
# STS's limit on an inline session policy (packed; its binary form is checked by STS too).
MAX_SESSION_POLICY_CHARS = 2048
_SESSION_NAME = re.compile(r"[^\w+=,.@-]")


def session_policy(
    bucket: str,
    job_id: str,
    partition: str = "aws",
    reads: Sequence[str] = (),
    secrets: Sequence[str] = (),
    submitted_by: str | None = None,
    satellite_bucket: str | None = None,
) -> dict[str, Any]:
    """The session policy of `job_id`'s credentials: its own prefix, its researcher's
    wheelhouse, and listing the bucket.

    `submitted_by`: the job's submitter as STS verified it (the job record's); its jobs share
    `wheelhouse/<scope>/` (`layout.wheelhouse_scope`), read and write, and no other
    researcher's: a wheel a job stores is installed only by its own researcher's jobs.
    `satellite_bucket`: the checkpoint bucket of the satellite region the instance runs in,
    as a name whose last 8 characters are `?` (`SATELLITE_BUCKET`: the home stack cannot know
    the satellite stack's suffix); the job's prefix and its researcher's wheelhouse there too.

    `reads`: keys under `jobs/` the job's spec names as data (an earlier job's outputs,
    `respot.spec.reach`), each readable as an object or as a prefix; never a submission.
    `secrets`: the Secrets Manager ARNs the job's spec names (`secrets:`): those alone.
    Listing stays bucket-wide: S3 answers HeadObject on a missing key with 404 only to a
    caller allowed s3:ListBucket on the bucket (a prefix condition makes it 403), and the
    agent asks "is it there yet?" often. A job can therefore list other jobs' key names,
    never read, write or delete their objects (docs/security.md).
    """
    prefix = layout.job_prefix(job_id)  # checks the id: no wildcard or slash can slip in
    wheelhouse = layout.wheelhouse_prefix(layout.wheelhouse_scope(submitted_by, job_id))
    bucket_arn = f"arn:{partition}:s3:::{bucket}"
    buckets = [bucket_arn]
    if satellite_bucket is not None:
        if not SATELLITE_BUCKET.fullmatch(satellite_bucket):
            raise ValueError(f"satellite bucket {satellite_bucket!r} is not <prefix>????????")
        buckets.append(f"arn:{partition}:s3:::{satellite_bucket}")

    def one(resources: list[str]) -> str | list[str]:
        return resources[0] if len(resources) == 1 else resources

    statements: list[dict[str, Any]] = [
        {
            "Sid": "ThisJobsObjects",
            "Effect": "Allow",
            "Action": list(JOB_OBJECT_ACTIONS),
            "Resource": one([f"{b}/{prefix}*" for b in buckets]),
        },
        {"Sid": "ListJobsBucket", "Effect": "Allow", "Action": "s3:ListBucket",
         "Resource": one(buckets)},
        {"Sid": "ResearchersWheelhouse", "Effect": "Allow", "Action": list(WHEELHOUSE_ACTIONS),
         "Resource": one([f"{b}/{wheelhouse}*" for b in buckets])},
    ]  # fmt: skip
    secret_arns = sorted({_secret_resource(arn) for arn in secrets if _SECRET_ARN.fullmatch(arn)})
    if secret_arns:
        statements.append(
            {"Sid": "ThisJobsSecrets", "Effect": "Allow",
             "Action": "secretsmanager:GetSecretValue", "Resource": secret_arns}
        )  # fmt: skip
    wanted = [key for key in reads if _grantable(key)]
    if not wanted:
        return {"Version": "2012-10-17", "Statement": statements}
    no_submissions = {
        "Sid": "NoSubmissions", "Effect": "Deny", "Action": "s3:GetObject",
        "Resource": f"{bucket_arn}/{layout.JOBS_PREFIX}*/submission.json",
    }  # fmt: skip
    # Each named key as an object and as a prefix; if that is too long for STS, each earlier
    # job's whole prefix; if still too long, every job's objects (reads only, never a
    # submission: what the job's owner may read anyway). The spec allows 20 data sources.
    for data in (
        sorted({f"{bucket_arn}/{r}" for key in wanted for r in _key_resources(key)}),
        sorted({f"{bucket_arn}/{layout.JOBS_PREFIX}{key.split('/')[1]}/*" for key in wanted}),
        [f"{bucket_arn}/{layout.JOBS_PREFIX}*"],
    ):
        read = {"Sid": "DataFromEarlierJobs", "Effect": "Allow", "Action": "s3:GetObject",
                "Resource": data}  # fmt: skip
        policy = {"Version": "2012-10-17", "Statement": [*statements, read, no_submissions]}
        if packed_size(policy) <= MAX_SESSION_POLICY_CHARS:
            break
    return policy


# The longest names a session policy can carry for a job: an S3 bucket name (63 characters)
# at home, and a satellite bucket as the home stack names it (`SATELLITE_BUCKET`).
_LONGEST_BUCKET = "b" * 63
_LONGEST_SATELLITE_BUCKET = "s" * 55 + "-" + "?" * 8


def secrets_problem(job_id: str, secrets: Sequence[str], reads: Sequence[str] = ()) -> str | None:
    """Why `job_id`'s credentials could not be vended, decided before anything is spent: its
    session policy, built for the longest bucket names in a satellite region (the largest it
    can be), over STS's 2,048 characters; None when it fits wherever the job is placed.

    The data it reads falls back to coarser grants when long (`session_policy`), so what can
    overflow is the secrets: each is named in the policy."""
    policy = session_policy(
        _LONGEST_BUCKET,
        job_id,
        "aws-us-gov",
        reads,
        secrets,
        satellite_bucket=_LONGEST_SATELLITE_BUCKET,
    )
    size = packed_size(policy)
    if size <= MAX_SESSION_POLICY_CHARS:
        return None
    return (
        f"secrets: {len(secrets)} secrets do not fit in the job's credentials (its session "
        f"policy would be {size} of STS's {MAX_SESSION_POLICY_CHARS} characters); keep related "
        "values in one JSON secret, or name fewer"
    )


# A secret's ARN as a job spec names it (respot.spec.training checks the form): no wildcard.
_SECRET_ARN = re.compile(r"arn:[a-z-]+:secretsmanager:[a-z0-9-]+:\d{12}:secret:[A-Za-z0-9/_+=.@-]+")


def _secret_resource(arn: str) -> str:
    """The ARN IAM matches: as given when it ends in Secrets Manager's 6-character suffix,
    else the name followed by one (a partial ARN names the secret without it)."""
    return arn if re.search(r"-[A-Za-z0-9]{6}$", arn) else f"{arn}-??????"


def _grantable(key: str) -> bool:
    """A key under some job's prefix, without a character IAM would read as a wildcard."""
    parts = key.split("/")
    return (
        key.startswith(layout.JOBS_PREFIX)
        and len(parts) > 2
        and bool(parts[1])
        and not any(c in key for c in "*?$")
    )


def _key_resources(key: str) -> list[str]:
    """`key` as an object and as a prefix (what `respot.agent.workspace.fetch_data` reads)."""
    return [f"{key}*"] if key.endswith("/") else [key, f"{key}/*"]


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
ENV_SATELLITE_BUCKETS = "RESPOT_SATELLITE_BUCKETS"  # JSON {region: SATELLITE_BUCKET name}
# ... and the agent's (the launch template's user data): the function it asks.
ENV_CREDENTIALS_FUNCTION = "RESPOT_CREDENTIALS_FUNCTION"
