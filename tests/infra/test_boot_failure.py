"""A boot that fails reports `boot_failed` on the agent channel before powering off.

The user data runs for real (bash, under RESPOT_ROOT) against a moto SQS queue and the local
IMDS server; the instance's framework Python is missing, as on a wrong AMI.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from infra.local.cloud import CREDENTIALS, MotoServer
from infra.local.imds import ImdsServer
from infra.userdata import render_user_data
from respot.wire.messages import AgentBootFailed, AgentMessage


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    server = MotoServer()
    url = server.start()
    yield url
    server.stop()


def boot(tmp_path: Path, moto_url: str, env: dict[str, str]) -> tuple[int, Path, str]:
    """Run the user data; (exit code, root, queue url)."""
    sqs = boto3.client("sqs", region_name="us-east-1", endpoint_url=moto_url, **CREDENTIALS)
    queue = sqs.create_queue(QueueName=f"agent-{tmp_path.name[-20:]}")["QueueUrl"]
    root = tmp_path / "root"
    root.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.log"
    (bin_dir / "systemctl").write_text(f'#!/bin/sh\necho "systemctl $*" >> {calls}\n')
    (bin_dir / "systemctl").chmod(0o755)
    (bin_dir / "python3").symlink_to(sys.executable)  # a Python with boto3 on the PATH
    user_data = tmp_path / "user-data"
    user_data.write_text(
        render_user_data(
            {
                "RESPOT_BUCKET": "b",
                "RESPOT_AGENT_QUEUE_URL": queue,
                "AWS_REGION": "us-east-1",
                "RESPOT_AGENT_ASSET_BUCKET": "assets",
                "RESPOT_AGENT_ASSET_KEY": "agent.zip",
                **env,
            }
        )
    )
    tags = {"respot:job-id": "job-7", "respot:attempt": "3"}
    with ImdsServer(
        instance_id="i-0boot", instance_type="g5.xlarge", availability_zone="us-east-1a", tags=tags
    ) as imds:
        result = subprocess.run(
            ["/bin/bash", str(user_data)],
            env={
                "PATH": f"{bin_dir}:/usr/bin:/bin",
                "RESPOT_ROOT": str(root),
                "AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.url,
                "AWS_ENDPOINT_URL": moto_url,
                "AWS_ACCESS_KEY_ID": CREDENTIALS["aws_access_key_id"],
                "AWS_SECRET_ACCESS_KEY": CREDENTIALS["aws_secret_access_key"],
            },
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert "systemctl --no-block poweroff" in calls.read_text()
    return result.returncode, root, queue


def received(moto_url: str, queue: str) -> list[AgentMessage]:
    sqs = boto3.client("sqs", region_name="us-east-1", endpoint_url=moto_url, **CREDENTIALS)
    got = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=1)
    return [AgentMessage.model_validate_json(m["Body"]) for m in got.get("Messages", [])]


def test_a_missing_framework_python_is_reported_then_the_instance_powers_off(
    tmp_path: Path, moto_url: str
) -> None:
    code, root, queue = boot(
        tmp_path, moto_url, {"RESPOT_FRAMEWORK_PYTHON": "/opt/pytorch/bin/python"}
    )
    assert code != 0
    [message] = received(moto_url, queue)
    assert (message.job_id, message.attempt, message.instance_id) == ("job-7", 3, "i-0boot")
    assert isinstance(message.body, AgentBootFailed)
    assert "the AMI has no /opt/pytorch/bin/python" in message.body.reason
    assert any("respot bootstrap: start" in line for line in message.body.log_tail)
    assert (root / "var/log/respot-bootstrap.log").exists()


def test_a_missing_setting_is_reported_with_its_name(tmp_path: Path, moto_url: str) -> None:
    code, _, queue = boot(tmp_path, moto_url, {})  # no RESPOT_FRAMEWORK_PYTHON at all
    assert code != 0
    [message] = received(moto_url, queue)  # once, not once per shell that noticed
    assert isinstance(message.body, AgentBootFailed)
    assert "RESPOT_FRAMEWORK_PYTHON missing" in message.body.reason


def test_a_satellite_instance_reports_to_the_home_queue_in_its_region(
    tmp_path: Path, moto_url: str
) -> None:
    # An instance in us-west-2 (a satellite region) whose agent queue is the home one
    code, _, queue = boot(
        tmp_path,
        moto_url,
        {"AWS_REGION": "us-west-2", "RESPOT_AGENT_QUEUE_REGION": "us-east-1"},
    )
    assert code != 0
    [message] = received(moto_url, queue)
    assert isinstance(message.body, AgentBootFailed)
