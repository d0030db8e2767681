"""The doctor's FIS service-linked role and AMI support checks (`respot.doctor.support`)."""

from __future__ import annotations

import contextlib
import datetime as dt
from typing import Any

import boto3
import pytest

from infra.settings import DEFAULT_AMI_PARAMETER
from respot.doctor import Status, Target, run_checks
from respot.doctor.support import (
    AMI_SUPPORT_CHECK,
    FIS_ROLE_CHECK,
    FIS_SERVICE_LINKED_ROLE,
    PYTORCH_END_OF_PATCH,
    check_ami_support,
    check_fis_role,
    pytorch_version,
)

REGION = "us-east-1"
TODAY = dt.date(2026, 11, 26)
OLD_DEFAULT = (
    "/aws/service/deeplearning/ami/x86_64/"
    "oss-nvidia-driver-gpu-pytorch-2.9-ubuntu-24.04/latest/ami-id"
)


@pytest.fixture
def aws(moto_endpoint: str, aws_credentials: None) -> Any:
    def client(service: str) -> Any:
        return boto3.client(service, region_name=REGION, endpoint_url=moto_endpoint)

    return client


def test_the_fis_service_linked_role_is_checked_with_the_one_time_fix(aws: Any) -> None:
    iam = aws("iam")
    with contextlib.suppress(iam.exceptions.NoSuchEntityException):
        iam.delete_role(RoleName=FIS_SERVICE_LINKED_ROLE)
    missing = check_fis_role(iam)
    assert missing.status is Status.WARN
    assert missing.fix == "aws iam create-service-linked-role --aws-service-name fis.amazonaws.com"
    iam.create_role(
        RoleName=FIS_SERVICE_LINKED_ROLE,
        Path="/aws-service-role/fis.amazonaws.com/",
        AssumeRolePolicyDocument="{}",
    )
    try:
        assert check_fis_role(iam).status is Status.OK
    finally:
        iam.delete_role(RoleName=FIS_SERVICE_LINKED_ROLE)


def test_an_ami_out_of_patch_is_warned_about_with_the_fix() -> None:
    old = check_ami_support(OLD_DEFAULT, today=TODAY)
    assert old.status is Status.WARN
    assert "2.9" in old.summary and "2026-10-15" in old.summary
    assert "ami_parameter" in old.fix
    name = "Deep Learning OSS Nvidia Driver AMI GPU PyTorch 2.8 (Ubuntu 24.04) 20260801"
    assert check_ami_support(name, today=TODAY).status is Status.WARN
    # near the end of patch: warned ahead; long before it: fine
    assert check_ami_support("pytorch-2.10", today=dt.date(2027, 1, 1)).status is Status.WARN
    assert check_ami_support("pytorch-2.10", today=dt.date(2026, 6, 1)).status is Status.OK
    # older than the table: warned; newer: said so, not guessed
    assert check_ami_support("PyTorch 2.1", today=TODAY).status is Status.WARN
    newer = check_ami_support("pytorch-2.11", today=TODAY)
    assert newer.status is Status.OK and "newer than" in newer.summary
    assert pytorch_version("my-own-image") is None


def test_the_default_ami_is_a_supported_pytorch_dlami() -> None:
    version = pytorch_version(DEFAULT_AMI_PARAMETER)
    assert version is not None
    assert check_ami_support(DEFAULT_AMI_PARAMETER, today=TODAY).status is Status.OK
    past = [v for v, end in PYTORCH_END_OF_PATCH.items() if end < TODAY]
    assert version not in past


def test_the_doctor_runs_both_checks(aws: Any) -> None:
    target = Target(
        region=REGION, instance_types=("g5.xlarge",), ami_parameter=OLD_DEFAULT, local=True
    )
    findings = {f.check: f for f in run_checks(target, aws)}
    assert findings[AMI_SUPPORT_CHECK].status is Status.WARN
    assert FIS_ROLE_CHECK in findings
