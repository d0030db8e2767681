"""What a deployment's instances can read of what a job names: its secrets and its image.

The instance role (home and satellite regions alike, infra/constructs/fleet.py) reads only
Secrets Manager secrets named `respot/jobs/...` in this account's home region, and pulls
only from this account's ECR registry there. A job naming anything else would be launched,
paid for, and fail at setup on the instance, so `run()` refuses it first, naming the field
and the fix, and the commands function refuses it again for submissions that never went
through `run()` (another client, an older SDK, a hand-written message): one rule,
`refused_reads`, which each side calls with the home region and account it knows (the SDK
from the deployment it found, the function from its own ARN). (Other registries than ECR
are not checked: public images need no grant.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from respot.agent.regional import ECR_IMAGE
from respot.agent.secrets import JOB_SECRET_PREFIX

if TYPE_CHECKING:
    from respot.deployment import Deployment
    from respot.spec import TrainingEnvVar


def _account(deployment: Deployment) -> str | None:
    parts = deployment.topic_arn.split(":")
    return parts[4] if len(parts) > 5 and parts[4].isdigit() else None


def unreachable(spec: TrainingEnvVar, deployment: Deployment, *, field: str = "") -> list[str]:
    """A problem line for each secret or image the deployment's instances may not read."""
    return refused_reads(spec, region=deployment.region, account=_account(deployment), field=field)


def refused_reads(
    spec: TrainingEnvVar, *, region: str | None, account: str | None, field: str = ""
) -> list[str]:
    """A problem line for each secret or image that instances of a deployment whose home is
    `region` in `account` may not read (None: that part is not checked). `field` prefixes
    each field name (a sweep's job: "job.")."""
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
    return problems
