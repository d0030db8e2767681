"""Safety properties that had no test that fails when the code breaks them.

- Upload order: a reader running during a checkpoint upload never sees a manifest before
  every blob it names is in S3 (checked after every single S3 write of the upload).
- Launch idempotency: a launch retried after a crash between RunInstances and the record
  write yields one instance, because both calls carry the same ClientToken.
- The IMDS notice and rebalance polls fail independently.
"""

from __future__ import annotations

import os
import secrets
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

from infra.local import cloud
from respot.agent.imds import SpotInstanceAction
from respot.agent.notices import NoticePoller
from respot.control.config import ControlPlaneConfig
from respot.control.service import ControlPlane
from respot.core.states import JobState
from respot.storage import layout
from respot.storage.checkpoints import CheckpointStore
from tests.handlers.test_handlers import submission


@pytest.fixture
def s3_pair(moto_endpoint: str, aws_credentials: None) -> tuple[Any, Any, str]:
    """A writer's client, an independent reader's client, and a fresh bucket."""
    writer = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    reader = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    bucket = f"order-{secrets.token_hex(4)}"
    writer.create_bucket(Bucket=bucket)
    return writer, reader, bucket


def test_a_reader_never_sees_a_manifest_before_its_blobs(
    s3_pair: tuple[Any, Any, str], tmp_path: Path
) -> None:
    writer, reader_client, bucket = s3_pair
    job = f"order-{secrets.token_hex(3)}"
    reader = CheckpointStore(bucket=bucket, job_id=job, client=reader_client)
    seen: list[str] = []
    violations: list[str] = []

    def look(**_: Any) -> None:
        # A reader's view right after this write: every manifest it lists must be whole.
        for key in reader.manifest_keys():
            seen.append(key)
            manifest = reader.read_manifest(key)
            for f in manifest.files:
                try:
                    reader_client.head_object(Bucket=bucket, Key=layout.blob_key(job, f.sha256))
                except reader_client.exceptions.ClientError:
                    violations.append(f"{key} names {f.path}, whose blob is not there yet")

    writer.meta.events.register("after-call.s3.PutObject", look)
    writer.meta.events.register("after-call.s3.CompleteMultipartUpload", look)
    src = tmp_path / "ckpt"
    src.mkdir()
    for i in range(6):
        (src / f"shard-{i}.bin").write_bytes(os.urandom(2048 + i))
    store = CheckpointStore(bucket=bucket, job_id=job, client=writer)
    store.upload(src, step=10, attempt=1, reason="periodic")
    (src / "shard-0.bin").write_bytes(os.urandom(4096))  # an incremental one too
    store.upload(src, step=20, attempt=1, reason="periodic")
    assert seen, "the reader never saw a manifest: the check did not run"
    assert violations == []


def test_a_launch_retried_after_a_crash_before_the_record_write_makes_one_instance(
    moto_endpoint: str, aws_credentials: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the handlers' control plane on the emulator, with a clock we move
    local = cloud.provision(moto_endpoint, prefix=f"t{secrets.token_hex(4)}")
    clients = {n: local.client(n) for n in ("dynamodb", "ec2", "s3", "sqs")}
    now = [datetime.now(UTC)]
    control = ControlPlane.from_config(
        ControlPlaneConfig.from_env(local.function_env("commands")),
        session=cloud.session(),
        clients=clients,
        clock=lambda: now[0],
    )
    tokens: list[str] = []
    real_run = clients["ec2"].run_instances

    def run_instances(**kwargs: Any) -> Any:
        tokens.append(kwargs.get("ClientToken", ""))
        return real_run(**kwargs)

    monkeypatch.setattr(clients["ec2"], "run_instances", run_instances)
    real_launch = control.capacity.launch
    crashed: list[bool] = []

    def launch_then_crash(effect: Any) -> Any:
        result = real_launch(effect)  # RunInstances went through...
        if not crashed:
            crashed.append(True)
            raise TimeoutError("Lambda timed out before the record write")  # ...then the crash
        return result

    monkeypatch.setattr(control.capacity, "launch", launch_then_crash)
    sub = submission()
    with pytest.raises(TimeoutError):
        control.submit(sub)
    record = control.jobs.get(sub.job_id)
    assert record is not None and record.state is JobState.REQUESTED
    assert record.current is not None and record.current.instance_id is None
    # WHEN the reconcile tick finds the launch unrecorded past the timeout and asks again
    now[0] += control.settings.launch_timeout + timedelta(seconds=1)
    control.reconcile()
    # THEN the retry carried the same token and EC2 answered with the same instance
    assert len(tokens) == 2 and tokens[0] == tokens[1] and tokens[0]
    reservations = clients["ec2"].describe_instances(
        Filters=[{"Name": "tag:respot:job-id", "Values": [sub.job_id]}]
    )["Reservations"]
    instances = [i["InstanceId"] for r in reservations for i in r["Instances"]]
    assert len(instances) == 1
    record = control.jobs.get(sub.job_id)
    assert record is not None and record.current is not None
    assert record.current.instance_id == instances[0]


def test_the_emulator_honours_client_tokens_as_aws_does(
    moto_endpoint: str, aws_credentials: None
) -> None:
    local = cloud.provision(moto_endpoint, prefix=f"t{secrets.token_hex(4)}")
    ec2 = local.client("ec2")
    token = f"tok-{secrets.token_hex(6)}"
    kwargs = {"ImageId": cloud.LOCAL_AMI, "MinCount": 1, "MaxCount": 1}
    first = ec2.run_instances(ClientToken=token, **kwargs)["Instances"][0]["InstanceId"]
    again = ec2.run_instances(ClientToken=token, **kwargs)["Instances"][0]["InstanceId"]
    other = ec2.run_instances(ClientToken=token + "x", **kwargs)["Instances"][0]["InstanceId"]
    assert first == again and other != first


class _Imds:
    def __init__(self, action: Any, rebalance: Any) -> None:
        self.action, self.rebalance = action, rebalance

    def instance_action(self) -> SpotInstanceAction | None:
        if isinstance(self.action, Exception):
            raise self.action
        return self.action  # type: ignore[no-any-return]

    def rebalance_notice(self) -> str | None:
        if isinstance(self.rebalance, Exception):
            raise self.rebalance
        return self.rebalance  # type: ignore[no-any-return]


@pytest.mark.parametrize("broken", ["action", "rebalance"])
def test_one_failing_imds_path_does_not_hide_the_other(broken: str) -> None:
    at = datetime.now(UTC)
    action = SpotInstanceAction("terminate", at)
    imds = _Imds(
        OSError("IMDS 500") if broken == "action" else action,
        OSError("IMDS 500") if broken == "rebalance" else at.isoformat(),
    )
    emitted: list[Any] = []
    poller = NoticePoller(imds, every_seconds=60, emit=emitted.append)  # type: ignore[arg-type]
    poller.poll_once()
    kinds = [type(e).__name__ for e in emitted]
    expected = "RebalanceNotice" if broken == "action" else "InterruptionNotice"
    assert kinds == [expected]
