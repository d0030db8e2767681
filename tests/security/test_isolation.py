"""Isolation between researchers and between jobs (issue 24): what holds without IAM.

The IAM side (a researcher's write without `If-None-Match: *`, another job's credentials) is
proven under enforced IAM in `tests/e2e/test_iam_e2e.py` and on the synthesized documents in
`tests/infra/test_iam_policies.py`.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import boto3
import pytest

from respot.client.handle import _put_code
from respot.exceptions import DuplicateJobError
from respot.storage import layout


@pytest.fixture
def s3(moto_endpoint: str, aws_credentials: None) -> Any:
    return boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")


def test_code_planted_under_a_job_id_before_its_owner_is_refused_before_publishing(s3: Any) -> None:
    # GIVEN someone who uploaded other bytes under the key the owner's code will have
    bucket = f"iso-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    code = b"PK the owner's code"
    sha = hashlib.sha256(code).hexdigest()
    key = layout.code_key("planted-job", sha)
    s3.put_object(Bucket=bucket, Key=key, Body=b"PK planted", IfNoneMatch="*")
    # WHEN the owner uploads THEN run() stops with the job id and the fix, before publishing
    with pytest.raises(DuplicateJobError, match=r"already holds other bytes.*choose another"):
        _put_code(s3, bucket, "planted-job", sha, code)
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == b"PK planted"
    # AND the owner's own earlier upload of the same bytes is fine (a retried run())
    again = layout.code_key("retried-job", sha)
    _put_code(s3, bucket, "retried-job", sha, code)
    _put_code(s3, bucket, "retried-job", sha, code)
    assert s3.get_object(Bucket=bucket, Key=again)["Body"].read() == code
