"""An instance in a satellite region runs a job whose secret and image are in the home region.

The real agent process (`python -m respot.agent`) in us-west-2 with the home region's queue
(`RESPOT_AGENT_QUEUE_REGION`, as the satellite's user data sets it), a Secrets Manager secret
and an ECR image in us-east-1. The moto server keeps each region's secrets and registry
apart, as AWS does, so a client of the instance's region would find neither. The container
engine is the local runtime's fake (`infra/local/fakes.py`: it records each call).
What the satellite instance role may read there is checked on the synthesized policy in
`tests/infra/test_satellite_reads_home.py`.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import boto3

from infra.local.sandbox import FAKES
from respot.storage import layout
from respot.wire.messages import AgentFailed

from .agent_harness import Mailbox, start_agent, submit_job

HOME, SATELLITE = "us-east-1", "us-west-2"
IMAGE = f"123456789012.dkr.ecr.{HOME}.amazonaws.com/team/train:1.4"


def _fake_docker(tmp_path: Path) -> tuple[Path, Path]:
    """A `docker` on PATH: the local runtime's fake, recording under its own root."""
    bin_dir, root = tmp_path / "bin", tmp_path / "engine"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text(
        f'#!/bin/sh\nRESPOT_ROOT="{root}" RESPOT_FAKE_IMAGE_PYTHON="{sys.executable}" '
        f'exec "{sys.executable}" "{FAKES}" docker "$@"\n'
    )
    docker.chmod(0o755)
    return bin_dir, root / "var/log/docker.jsonl"


def _run(
    moto_url: str, s3: Any, bucket: str, queue: str, tmp_path: Path, **spec: Any
) -> tuple[int, str, str]:
    bin_dir, _ = _fake_docker(tmp_path)
    sub = submit_job(
        s3,
        bucket,
        hyperparameters={"steps": 3, "checkpoint_every": 10, "echo_env": ["API_TOKEN"]},
        **spec,
    )
    agent = start_agent(
        moto_url=moto_url,
        bucket=bucket,
        queue_url=queue,
        job_id=sub.job_id,
        attempt=1,
        work_dir=tmp_path / "instance",
        AWS_REGION=SATELLITE,
        AWS_DEFAULT_REGION=SATELLITE,
        RESPOT_AGENT_QUEUE_REGION=HOME,
        PATH=f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin",
    )
    try:
        code = agent.wait(90)
    finally:
        agent.stop()
    return code, sub.job_id, agent.log()


def test_a_satellite_instance_reads_the_home_secret_and_pulls_the_home_image(
    moto_url: str, s3: Any, sqs: Any, bucket: str, agent_queue: str, tmp_path: Path
) -> None:
    # GIVEN a secret in the home region (none of that name in the satellite region)
    home_secrets = boto3.client("secretsmanager", endpoint_url=moto_url, region_name=HOME)
    arn = home_secrets.create_secret(
        Name=f"respot/jobs/token-{time.time_ns()}", SecretString="s3cr3t; $(id)"
    )["ARN"]
    # WHEN an agent in the satellite region runs a job naming it and a home-registry image
    code, job_id, log = _run(
        moto_url,
        s3,
        bucket,
        agent_queue,
        tmp_path,
        secrets={"API_TOKEN": arn},
        image=IMAGE,
    )
    # THEN the session ran in the image and saw the value
    assert code == 0, log
    body = s3.get_object(Bucket=bucket, Key=layout.outputs_prefix(job_id) + "env.json")["Body"]
    assert json.loads(body.read())["API_TOKEN"] == "s3cr3t; $(id)"
    assert "s3cr3t" not in log
    # AND the engine logged in to the home registry (a token ECR issued in the home region:
    # the agent refuses a token of another region) before pulling from it
    calls = [
        json.loads(line)
        for line in (tmp_path / "engine/var/log/docker.jsonl").read_text().splitlines()
    ]
    registry = IMAGE.split("/", maxsplit=1)[0]
    assert calls[0] == ["login", "--username", "AWS", "--password-stdin", registry], calls
    assert calls[1] == ["pull", IMAGE]
    assert calls[2][0] == "run" and IMAGE in calls[2]
    Mailbox(sqs, agent_queue).wait_for(lambda m: m.body.kind == "completed", timeout=10)


def test_a_secret_that_is_not_there_fails_the_attempt_naming_it(
    moto_url: str, s3: Any, sqs: Any, bucket: str, agent_queue: str, tmp_path: Path
) -> None:
    # a secret in the satellite region only: the home region (where the ARN points) has none
    there = boto3.client("secretsmanager", endpoint_url=moto_url, region_name=SATELLITE)
    name = f"respot/jobs/elsewhere-{time.time_ns()}"
    arn = there.create_secret(Name=name, SecretString="x")["ARN"].replace(SATELLITE, HOME)
    code, _, log = _run(moto_url, s3, bucket, agent_queue, tmp_path, secrets={"API_TOKEN": arn})
    assert code != 0, log
    failed = Mailbox(sqs, agent_queue).wait_for(lambda m: m.body.kind == "failed", timeout=10)
    assert isinstance(failed.body, AgentFailed)
    assert f"secrets.API_TOKEN: cannot read {arn}" in failed.body.reason
