"""What a deployment's instances can read of what a job names: its secrets, image and data.

The instance role (home and satellite regions alike, infra/constructs/fleet.py) reads only
Secrets Manager secrets named `respot/jobs/...` in this account's home region, and pulls
only from this account's ECR registry there. A job naming anything else would be launched,
paid for, and fail at setup on the instance, so `run()` refuses it first, naming the field
and the fix, and the commands function refuses it again for submissions that never went
through `run()` (another client, an older SDK, a hand-written message): one rule,
`refused_reads`, which each side calls with the home region and account it knows (the SDK
from the deployment it found, the function from its own ARN). (Other registries than ECR
are not checked: public images need no grant.)

Data (`data[i].s3_uri`) is read with the instance role's S3 grants: the stack's
`data_bucket_arns` (bucket names or ARNs, an ARN's `/prefix` narrowing it to that prefix,
IAM's `*` and `?` wildcards read as IAM reads them) and the deployment bucket's `jobs/` (an
earlier job's outputs). The stack tells both sides the list (the SDK through the deployment
parameter's `data_buckets`, the function through RESPOT_DATA_BUCKETS); a deployment that
does not say (an older stack, the environment-variable deployment, the local runtime, whose
emulator enforces no IAM) is not checked.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from respot.spec.jobid import JOBS_PREFIX
from respot.spec.names import ECR_IMAGE, JOB_SECRET_PREFIX

if TYPE_CHECKING:
    from respot.spec.training import TrainingEnvVar


class Deployment(Protocol):
    """What `unreachable` reads of a deployment (`respot.client.deployment.Deployment`)."""

    @property
    def region(self) -> str | None: ...
    @property
    def topic_arn(self) -> str: ...
    @property
    def data_buckets(self) -> Sequence[str] | None: ...
    @property
    def bucket(self) -> str: ...


def _account(deployment: Deployment) -> str | None:
    parts = deployment.topic_arn.split(":")
    return parts[4] if len(parts) > 5 and parts[4].isdigit() else None


def unreachable(spec: TrainingEnvVar, deployment: Deployment, *, field: str = "") -> list[str]:
    """A problem line for each secret or image the deployment's instances may not read."""
    return refused_reads(
        spec,
        region=deployment.region,
        account=_account(deployment),
        data_buckets=deployment.data_buckets,
        bucket=deployment.bucket,
        field=field,
    )


def refused_reads(
    spec: TrainingEnvVar,
    *,
    region: str | None,
    account: str | None,
    data_buckets: Sequence[str] | None = None,
    bucket: str | None = None,
    field: str = "",
) -> list[str]:
    """A problem line for each secret, image or data URI that instances of a deployment whose
    home is `region` in `account`, granted `data_buckets` (the stack's data_bucket_arns) and
    `jobs/` of its own `bucket`, may not read (None: that part is not checked). `field`
    prefixes each field name (a sweep's job: "job.")."""
    problems: list[str] = []
    for name, arn in sorted(spec.secrets.items()):
        # arn:<partition>:secretsmanager:<region>:<account>:secret:<name>
        _, _, _, there, owner, _, secret = arn.split(":", 6)
        if region is not None and there != region:
            problems.append(
                f"{field}secrets.{name}: {arn} is in {there}; respot's instances (in every region "
                f"they run in) read secrets in {region}: create it there, or replicate it "
                f"(aws secretsmanager replicate-secret-to-regions --secret-id {arn} "
                f"--add-replica-regions Region={region}) and name the replica's ARN"
            )
        elif account is not None and owner != account:
            problems.append(
                f"{field}secrets.{name}: {arn} is in account {owner}; respot's instances read "
                f"secrets of account {account} only: create it there"
            )
        elif not secret.startswith(JOB_SECRET_PREFIX):
            problems.append(
                f"{field}secrets.{name}: respot's instances read only secrets named "
                f"{JOB_SECRET_PREFIX}...; create it under that name"
            )
    match = ECR_IMAGE.match(spec.image or "")
    if match is not None:
        owner = match.group("registry").split(".", 1)[0]
        there = match.group("region")
        if (region is not None and there != region) or (account is not None and owner != account):
            home = f"{account or 'this account'}.dkr.ecr.{region or '<home region>'}"
            problems.append(
                f"{field}image: {spec.image} is in the ECR registry of {owner} in {there}; "
                f"respot's instances pull only from {home}.amazonaws.com: push it there (or "
                f"replicate the repository there with ECR replication)"
            )
    if data_buckets is not None:
        problems += _refused_data(spec, data_buckets, bucket, field)
    return problems


def _glob(pattern: str) -> re.Pattern[str]:
    """An IAM resource pattern (and StringLike value): `*` any run of characters, `?` one."""
    return re.compile(".*".join(".".join(map(re.escape, p.split("?"))) for p in pattern.split("*")))


def data_grant(entry: str) -> tuple[str, str | None]:
    """(bucket pattern, key prefix or None) of a data_bucket_arns entry: a bucket name, or an
    S3 ARN whose `/prefix` narrows it, read as infra/constructs/fleet.py grants it."""
    if entry.startswith("arn:"):
        entry = entry.split(":s3:::", 1)[-1]
    name, _, prefix = entry.partition("/")
    return name, prefix.strip("/") or None


def readable(bucket: str, key: str, grants: Sequence[tuple[str, str | None]]) -> bool:
    """Whether the instance role's grants let it read s3://bucket/key (an object, or every
    object under a prefix): GetObject on `<bucket>/*` or `<bucket>/<prefix>/*`, and ListBucket
    on the bucket with, for a prefix, s3:prefix StringLike `<prefix>/*`."""
    for pattern, prefix in grants:
        if not _glob(pattern).fullmatch(bucket):
            continue
        if prefix is None or _glob(f"{prefix}/*").fullmatch(key):
            return True
    return False


def _refused_data(
    spec: TrainingEnvVar, data_buckets: Sequence[str], bucket: str | None, field: str
) -> list[str]:
    grants = [data_grant(entry) for entry in data_buckets]
    if bucket:
        grants.append((bucket, JOBS_PREFIX.rstrip("/")))  # earlier jobs' outputs
    granted = ", ".join(data_buckets) or "none"
    problems: list[str] = []
    for i, source in enumerate(spec.data):
        name, key = source.bucket, source.key
        if readable(name, key, grants):
            continue
        narrowed = sorted(
            f"s3://{name}/{prefix}/"
            for pattern, prefix in grants
            if prefix is not None and _glob(pattern).fullmatch(name)
        )
        where = (
            f"is outside the prefixes respot's instances may read in bucket {name} "
            f"({', '.join(narrowed)}): name a URI under one of them (a prefix ends in /), or "
            if narrowed
            else f"is in bucket {name}, which respot's instances may not read: "
        )
        problems.append(
            f"{field}data[{i}].s3_uri: {source.s3_uri} {where}add arn:aws:s3:::{name} to the "
            f"stack's data_bucket_arns (now: {granted}; docs/deploy.md) and redeploy, or copy "
            f"the data to a granted bucket"
        )
    return problems
