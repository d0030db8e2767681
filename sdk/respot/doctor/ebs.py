"""EBS checks: will EC2 let respot's instances keep their root volumes past `pending`?

Two ways an instance RunInstances accepted is ended during launch (pending -> terminated), that
only the account shows (docs/deploy.md, first-deploy checklist):
- the gp3 storage quota ("Storage for General Purpose SSD (gp3) volumes, in TiB", Service
  Quotas `ebs` `L-7A658B76`) is spent: StateReason `Client.VolumeLimitExceeded`;
- the account encrypts new volumes by default with a customer-managed KMS key the launch may
  not use: StateReason `Client.InternalError` ("Client error on launch").
The control plane reads those reasons when they happen (`respot.core.failures`); these checks
say it before the first job.
"""

from __future__ import annotations

import math
from typing import Any

from botocore.exceptions import ClientError

from respot.doctor.checks import describe_vcpus, error_code, error_text
from respot.doctor.findings import Finding, blocker, ok, warn
from respot.doctor.quotas import quotas_for

GP3_CHECK = "gp3 storage quota"
KEY_CHECK = "EBS default encryption key"
EBS_SERVICE = "ebs"
GP3_QUOTA = "L-7A658B76"  # Storage for General Purpose SSD (gp3) volumes, in TiB
# The instances assumed at once when the vCPU quotas cannot be read.
ASSUMED_INSTANCES = 10


def _quota(quotas: Any, service: str, code: str) -> float:
    try:
        answer = quotas.get_service_quota(ServiceCode=service, QuotaCode=code)
    except ClientError as exc:
        if error_code(exc) != "NoSuchResourceException":
            raise
        answer = quotas.get_aws_default_service_quota(ServiceCode=service, QuotaCode=code)
    return float(answer["Quota"]["Value"])


def instances_at_once(quotas: Any, ec2: Any, instance_types: tuple[str, ...]) -> int | None:
    """The most instances of the configured types the account's vCPU quotas (spot plus
    on-demand, per family, the smallest type) allow at once; None if unreadable."""
    smallest: dict[Any, int] = {}
    for instance_type, vcpus in describe_vcpus(ec2, instance_types).items():
        family = quotas_for(instance_type)
        if vcpus and family is not None:
            smallest[family] = min(vcpus, smallest.get(family, vcpus))
    if not smallest:
        return None
    total = 0
    for family, vcpus in smallest.items():
        for code in (family.spot_code, family.on_demand_code):
            if code is None:
                return None
            total += int(_quota(quotas, "ec2", code) // vcpus)
    return total


def gp3_used_gib(ec2: Any) -> int:
    """GiB of the region's gp3 volumes now (what counts against the quota already)."""
    used = 0
    paginator = ec2.get_paginator("describe_volumes")
    for page in paginator.paginate(Filters=[{"Name": "volume-type", "Values": ["gp3"]}]):
        used += sum(int(v.get("Size", 0)) for v in page.get("Volumes", []))
    return used


def check_gp3_storage(
    quotas: Any, ec2: Any, *, instance_types: tuple[str, ...], root_volume_gb: int, region: str
) -> Finding:
    """The gp3 storage quota against (instances at once) x `root_volume_gb`."""
    quota_tib = _quota(quotas, EBS_SERVICE, GP3_QUOTA)
    used = gp3_used_gib(ec2)
    free_gib = quota_tib * 1024 - used
    fits = max(0, math.floor(free_gib / root_volume_gb))
    try:
        want = instances_at_once(quotas, ec2, instance_types)
    except ClientError:
        want = None
    basis = "the vCPU quotas allow" if want is not None else "assumed"
    want = want if want is not None else ASSUMED_INSTANCES
    need_tib = math.ceil((used + want * root_volume_gb) / 1024)
    found = (
        f"{quota_tib:g} TiB of gp3 in {region}, {used} GiB used: room for {fits} root volumes "
        f"of {root_volume_gb} GiB; {want} instances at once ({basis}) need "
        f"{want * root_volume_gb} GiB"
    )
    fix = (
        f"raise it to at least {need_tib} TiB: aws service-quotas request-service-quota-increase "
        f"--service-code {EBS_SERVICE} --quota-code {GP3_QUOTA} --desired-value {need_tib} "
        f"--region {region} (or lower root_volume_gb in cdk.json); without room EC2 ends each "
        "launch with Client.VolumeLimitExceeded"
    )
    if fits < 1:
        return blocker(GP3_CHECK, found, fix)
    if fits < want:
        return warn(GP3_CHECK, found, fix)
    return ok(GP3_CHECK, found)


def check_default_ebs_key(ec2: Any, kms: Any, *, region: str) -> Finding:
    """Whether the key EC2 encrypts new volumes with by default is one a launch may use.

    The AWS-managed key (`alias/aws/ebs`) is usable by any principal of the account through
    EC2. A customer-managed key must be enabled and its key policy must let the principal
    that calls RunInstances (the control plane's functions' roles) use it through EC2: else
    each instance ends during launch with `Client.InternalError: Client error on launch`.
    """
    by_default = bool(ec2.get_ebs_encryption_by_default().get("EbsEncryptionByDefault"))
    key_id = str(ec2.get_ebs_default_kms_key_id().get("KmsKeyId") or "alias/aws/ebs")
    where = "by default" if by_default else "when a volume asks for encryption (respot's do)"
    try:
        meta = kms.describe_key(KeyId=key_id)["KeyMetadata"]
    except ClientError as exc:
        return warn(
            KEY_CHECK,
            f"EC2 encrypts new volumes {where} with {key_id}, which could not be read "
            f"({error_text(exc)})",
            "make sure the control plane's roles may use this key through EC2 (its key policy), "
            "or set the AWS-managed key: aws ec2 reset-ebs-default-kms-key-id "
            f"--region {region}",
        )
    arn = str(meta.get("Arn") or key_id)
    state = str(meta.get("KeyState") or "")
    if state and state != "Enabled":
        return blocker(
            KEY_CHECK,
            f"EC2 encrypts new volumes {where} with {arn}, which is {state}: every launch ends "
            "with Client.InternalError",
            f"enable the key, or go back to the AWS-managed key: aws ec2 "
            f"reset-ebs-default-kms-key-id --region {region}",
        )
    if meta.get("KeyManager") == "AWS":
        return ok(KEY_CHECK, f"EC2 encrypts new volumes {where} with the AWS-managed key {arn}")
    return warn(
        KEY_CHECK,
        f"EC2 encrypts new volumes {where} with the customer-managed key {arn}: a launch whose "
        "caller may not use it ends with Client.InternalError: Client error on launch",
        "grant the control plane's function roles (they call RunInstances) kms:CreateGrant, "
        "kms:Decrypt, kms:DescribeKey, kms:GenerateDataKeyWithoutPlaintext and kms:ReEncrypt* "
        f"on this key with the condition kms:ViaService = ec2.{region}.amazonaws.com, in the "
        "key's policy (and, if the policy delegates to IAM, in the roles' policies); or use "
        f"the AWS-managed key: aws ec2 reset-ebs-default-kms-key-id --region {region}",
    )
