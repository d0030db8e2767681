"""The doctor's EBS checks: the gp3 storage quota against instances x root volume, and the
account's default EBS encryption key. EC2 volumes and KMS keys on the moto server; Service
Quotas (which moto implements for `vpc` only) and the EBS encryption defaults by Stubber."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from respot.doctor import Status
from respot.doctor.ebs import GP3_QUOTA, check_default_ebs_key, check_gp3_storage
from respot.doctor.quotas import quotas_for

REGION = "us-east-1"


@pytest.fixture
def aws(moto_endpoint: str, aws_credentials: None) -> Any:
    def client(service: str) -> Any:
        return boto3.client(service, region_name=REGION, endpoint_url=moto_endpoint)

    return client


def _quotas(gp3_tib: float, spot_vcpus: float, on_demand_vcpus: float) -> tuple[Any, Stubber]:
    quotas = boto3.client("service-quotas", region_name=REGION)
    stub = Stubber(quotas)
    family = quotas_for("g5.xlarge")
    assert family is not None and family.spot_code and family.on_demand_code
    for service, code, value in (
        ("ebs", GP3_QUOTA, gp3_tib),
        ("ec2", family.spot_code, spot_vcpus),
        ("ec2", family.on_demand_code, on_demand_vcpus),
    ):
        stub.add_response(
            "get_service_quota",
            {"Quota": {"ServiceCode": service, "QuotaCode": code, "Value": value}},
            {"ServiceCode": service, "QuotaCode": code},
        )
    return quotas, stub


def _gp3_volume(ec2: Any, gib: int) -> str:
    return str(
        ec2.create_volume(AvailabilityZone="us-east-1a", Size=gib, VolumeType="gp3")["VolumeId"]
    )


def test_the_gp3_quota_is_compared_with_instances_times_the_root_volume(aws: Any) -> None:
    ec2 = aws("ec2")
    volume = _gp3_volume(ec2, 500)
    try:
        # 1 TiB, 500 GiB used: two 200-GiB roots fit; the vCPU quotas allow 16 g5.xlarge (4 vCPU)
        quotas, stub = _quotas(1, 32, 32)
        with stub:
            finding = check_gp3_storage(
                quotas, ec2, instance_types=("g5.xlarge",), root_volume_gb=200, region=REGION
            )
        assert finding.status is Status.WARN
        assert "room for 2 root volumes of 200 GiB" in finding.summary
        assert "16 instances at once (the vCPU quotas allow)" in finding.summary
        assert f"--quota-code {GP3_QUOTA}" in finding.fix and "--desired-value 4 " in finding.fix
        assert "Client.VolumeLimitExceeded" in finding.fix
        # too little for one root volume: every launch would end during launch
        quotas, stub = _quotas(0.5, 32, 32)
        with stub:
            finding = check_gp3_storage(
                quotas, ec2, instance_types=("g5.xlarge",), root_volume_gb=200, region=REGION
            )
        assert finding.status is Status.BLOCKER and "room for 0 root volumes" in finding.summary
        quotas, stub = _quotas(50, 32, 32)
        with stub:
            finding = check_gp3_storage(
                quotas, ec2, instance_types=("g5.xlarge",), root_volume_gb=200, region=REGION
            )
        assert finding.status is Status.OK
    finally:
        ec2.delete_volume(VolumeId=volume)


def _ebs_defaults(key_id: str, by_default: bool = True) -> tuple[Any, Stubber]:
    ec2 = boto3.client("ec2", region_name=REGION)
    stub = Stubber(ec2)
    stub.add_response("get_ebs_encryption_by_default", {"EbsEncryptionByDefault": by_default})
    stub.add_response("get_ebs_default_kms_key_id", {"KmsKeyId": key_id})
    return ec2, stub


def test_a_customer_managed_default_key_is_flagged_with_the_key_policy_fix(aws: Any) -> None:
    kms = aws("kms")
    key = kms.create_key(Description="team key")["KeyMetadata"]
    ec2, stub = _ebs_defaults(key["Arn"])
    with stub:
        finding = check_default_ebs_key(ec2, kms, region=REGION)
    assert finding.status is Status.WARN
    assert key["Arn"] in finding.summary and "Client.InternalError" in finding.summary
    assert "kms:CreateGrant" in finding.fix and f"ec2.{REGION}.amazonaws.com" in finding.fix
    kms.disable_key(KeyId=key["KeyId"])
    ec2, stub = _ebs_defaults(key["Arn"])
    with stub:
        finding = check_default_ebs_key(ec2, kms, region=REGION)
    assert finding.status is Status.BLOCKER and "Disabled" in finding.summary


def test_the_aws_managed_default_key_passes() -> None:
    kms = boto3.client("kms", region_name=REGION)
    arn = "arn:aws:kms:us-east-1:123456789012:key/0a1b2c3d-0000-0000-0000-000000000000"
    ec2, stub = _ebs_defaults("alias/aws/ebs")
    with stub, Stubber(kms) as keys:
        keys.add_response(
            "describe_key",
            {
                "KeyMetadata": {
                    "KeyId": "0a1b",
                    "Arn": arn,
                    "KeyState": "Enabled",
                    "KeyManager": "AWS",
                }
            },
            {"KeyId": "alias/aws/ebs"},
        )
        finding = check_default_ebs_key(ec2, kms, region=REGION)
    assert finding.status is Status.OK and "AWS-managed" in finding.summary
