"""A job interrupted at home resumes in a satellite region, its checkpoint copied there first.

On the moto server in two regions: the home deployment (`cloud.provision`) and a satellite
in us-west-2 (`infra.local.satellite`, the parameter `infra/satellite.py` publishes). The
control plane is built from its configuration as in Lambda (`ControlPlane.from_config`
with the satellite variables), and driven through the real handlers with AWS's event shapes;
the agents' side (writing checkpoints, reporting) is played by the test, as an agent would.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

import lambdas._runtime as runtime
from infra.local import cloud
from infra.local.satellite import LocalSatellite, provision_satellite, satellite_env
from lambdas import agent_events, instance_state, spot_fulfillment, spot_interruption
from lambdas.agent_events import check_sender
from respot.aws.satellites import RegionalCapacity, SatelliteError, parse_satellite
from respot.control.config import ENV_DLQ_URL, ControlPlaneConfig
from respot.control.service import ControlPlane
from respot.core.cost import ledger
from respot.core.job import Market
from respot.core.placement import candidates
from respot.core.pool_watch import PoolKey, Sighting, absolute_tick
from respot.core.states import JobState
from respot.policy.pools import TRANSFER_PRICE_PER_GB
from respot.storage import layout
from respot.wire.messages import AgentCheckpoint, AgentCompleted, AgentMessage, AgentStarted
from tests.handlers.test_forwarded_events import forwarded
from tests.handlers.test_handlers import CONTEXT, Env, submit_job

WEST = "us-west-2"


class TwoRegions(Env):
    """The home deployment plus a satellite, and the control plane that knows both."""

    def __init__(self, endpoint: str) -> None:
        self.local = cloud.provision(endpoint, prefix=f"t{secrets.token_hex(4)}")
        self.satellite: LocalSatellite = provision_satellite(self.local, WEST)
        self.clients = {n: self.local.client(n) for n in ("dynamodb", "ec2", "s3", "sqs")}
        self.west = {n: self.satellite.client(n, endpoint) for n in ("ec2", "s3")}
        env = {**self.local.function_env("commands"), **satellite_env([self.satellite])}
        self.config = ControlPlaneConfig.from_env(env)
        self.control = ControlPlane.from_config(
            self.config, session=cloud.session(), clients=self.clients, endpoint_url=endpoint
        )
        runtime.install(lambda: self.control)

    def home_pools_down(self, job_id: str) -> None:
        """The account saw no spot in any home pool this tick (capacity errors)."""
        record = self.control.jobs.get(job_id)
        assert record is not None and self.control.pools is not None
        tick = absolute_tick(datetime.now(UTC), self.control.settings)
        for placement in candidates(record, Market.SPOT, self.control.settings):
            if placement.availability_zone.startswith(WEST):
                continue
            self.control.pools.record(
                Sighting(PoolKey.of(placement), tick, False, "InsufficientInstanceCapacity")
            )

    def west_instances(self, job_id: str) -> list[dict[str, Any]]:
        reservations = self.west["ec2"].describe_instances(
            Filters=[{"Name": "tag:respot:job-id", "Values": [job_id]}]
        )["Reservations"]
        return [i for r in reservations for i in r["Instances"]]


@pytest.fixture
def regions(
    moto_endpoint: str, aws_credentials: None, monkeypatch: pytest.MonkeyPatch
) -> Iterator[TwoRegions]:
    deployment = TwoRegions(moto_endpoint)
    monkeypatch.setenv(ENV_DLQ_URL, deployment.local.dlq_urls["commands"])
    yield deployment
    runtime.install(None)


def _agent(job_id: str, attempt: int, iid: str, seq: int, body: Any) -> dict[str, Any]:
    return AgentMessage(
        job_id=job_id,
        attempt=attempt,
        instance_id=iid,
        seq=seq,
        sent_at=datetime.now(UTC),
        body=body,
    ).model_dump()


def _saved(step: int, key: str, size: int) -> AgentCheckpoint:
    return AgentCheckpoint(
        step=step, manifest_key=key, size_bytes=size, uploaded_bytes=size, upload_seconds=1.0
    )


def _write_checkpoint(
    s3: Any, bucket: str, job_id: str, step: int, attempt: int
) -> tuple[str, int]:
    """What the agent writes: the blob by content, then the manifest (last)."""
    data = f"weights at step {step}".encode() * 1000
    digest = hashlib.sha256(data).hexdigest()
    s3.put_object(Bucket=bucket, Key=layout.blob_key(job_id, digest), Body=data)
    key = layout.manifest_key(job_id, step, attempt)
    manifest = {
        "schema_version": 1,
        "job_id": job_id,
        "attempt": attempt,
        "step": step,
        "files": [{"path": "model.pt", "size": len(data), "sha256": digest}],
    }
    s3.put_object(Bucket=bucket, Key=key, Body=json.dumps(manifest).encode())
    return key, len(data)


def _report(env: TwoRegions, *messages: dict[str, Any]) -> None:
    bodies = [json.dumps(m, default=str) for m in messages]
    assert agent_events.handler(env.sqs_event(*bodies), CONTEXT) == {"batchItemFailures": []}


def _keys(s3: Any, bucket: str, job_id: str) -> list[str]:
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=layout.job_prefix(job_id))
    return sorted(o["Key"] for o in listed.get("Contents", []))


def test_the_control_plane_reads_the_satellite_and_places_there_too(regions: TwoRegions):
    zones = [s.availability_zone for s in regions.control.settings.subnets]
    assert any(z.startswith("us-east-1") for z in zones)
    assert [z for z in zones if z.startswith(WEST)] == [
        s.availability_zone for s in regions.satellite.subnets
    ]
    assert isinstance(regions.control.capacity, RegionalCapacity)
    assert regions.control.satellite_role_ids == (regions.satellite.instance_role_id,)


def test_an_interrupted_job_resumes_in_the_satellite_from_the_copied_checkpoint(
    regions: TwoRegions,
):
    home_s3, west_s3 = regions.clients["s3"], regions.west["s3"]
    home_bucket, west_bucket = regions.local.bucket, regions.satellite.bucket
    # GIVEN a job training at home, with a checkpoint at step 40
    job_id, iid = submit_job(regions)
    spot_fulfillment.handler(regions.ec2_event("spot-request-fulfillment", iid), CONTEXT)
    first_key, size = _write_checkpoint(home_s3, home_bucket, job_id, 40, 1)
    _report(
        regions,
        _agent(job_id, 1, iid, 1, AgentStarted()),
        _agent(job_id, 1, iid, 2, _saved(40, first_key, size)),
    )
    # AND no spot left in any home pool this tick
    regions.home_pools_down(job_id)

    # WHEN its instance gets the two-minute warning
    result = spot_interruption.handler(regions.ec2_event("spot-interruption-warning", iid), CONTEXT)
    assert result["state"] == "REQUESTED"

    # THEN the replacement is launched in us-west-2, from the satellite's launch template,
    # tagged as this deployment's, after the job's objects were copied there
    record = regions.control.jobs.get(job_id)
    assert record is not None and record.current is not None and record.current.number == 2
    assert record.current.placement.availability_zone.startswith(WEST)
    (west,) = regions.west_instances(job_id)
    tags = {t["Key"]: t["Value"] for t in west["Tags"]}
    assert tags["respot:attempt"] == "2" and tags["respot:managed"] == regions.local.name
    assert west["InstanceLifecycle"] == "spot"
    new_iid = west["InstanceId"]
    assert regions.control.jobs.instance_owner(new_iid) == (job_id, 2)
    copied = _keys(west_s3, west_bucket, job_id)
    assert layout.submission_key(job_id) in copied and first_key in copied
    # nothing of the home region's instances is there
    assert not [k for k in copied if "/control/" in k or "/outputs" in k]

    # WHEN the old agent saves its last checkpoint (step 55) at home and its instance goes
    last_key, last_size = _write_checkpoint(home_s3, home_bucket, job_id, 55, 1)
    home_s3.put_object(
        Bucket=home_bucket, Key=layout.handoff_key(job_id, 1), Body=b'{"attempt": 1}'
    )
    _report(
        regions,
        _agent(job_id, 1, iid, 3, _saved(55, last_key, last_size)),
    )
    instance_state.handler(
        regions.ec2_event("instance-state-change", iid, state="terminated"), CONTEXT
    )
    # THEN that checkpoint and the handoff marker follow the job to the satellite
    copied = _keys(west_s3, west_bucket, job_id)
    assert last_key in copied and layout.handoff_key(job_id, 1) in copied
    blob = json.loads(west_s3.get_object(Bucket=west_bucket, Key=last_key)["Body"].read())
    digest = blob["files"][0]["sha256"]
    assert layout.blob_key(job_id, digest) in copied

    # WHEN the satellite's agent starts from step 55 (events forwarded from us-west-2)
    state = forwarded(regions.ec2_event("instance-state-change", new_iid, state="running"), WEST)
    instance_state.handler(state, CONTEXT)
    started = AgentStarted(restored_step=55, restored_manifest=last_key)
    _report(regions, _agent(job_id, 2, new_iid, 1, started))
    _report(regions, _agent(job_id, 2, new_iid, 1, started))  # delivered twice

    # THEN it runs there, no step lost, and the move is in the ledger once
    record = regions.control.jobs.get(job_id)
    assert record is not None and record.state is JobState.RUNNING
    second = record.attempt(2)
    assert second is not None and second.restored_step == 55
    assert second.transfer_bytes == last_size and second.transfer_from == "us-east-1"
    assert [a.transfer_bytes for a in record.attempts] == [None, last_size]
    lines = ledger(record, datetime.now(UTC))
    expected = last_size / 1e9 * TRANSFER_PRICE_PER_GB
    assert [line.transfer_usd for line in lines] == [0.0, pytest.approx(expected)]

    # AND its interruption warning, forwarded from us-west-2, moves it again
    warning = forwarded(regions.ec2_event("spot-interruption-warning", new_iid), WEST)
    assert spot_interruption.handler(warning, CONTEXT)["state"] == "REQUESTED"


def test_a_job_that_ends_in_the_satellite_has_its_outputs_home_when_it_is_ended(
    regions: TwoRegions, monkeypatch: pytest.MonkeyPatch
):
    home_s3, west_s3 = regions.clients["s3"], regions.west["s3"]
    home_bucket, west_bucket = regions.local.bucket, regions.satellite.bucket
    # GIVEN a job moved to us-west-2 (interrupted at home with no home spot left)
    job_id, iid = submit_job(regions)
    spot_fulfillment.handler(regions.ec2_event("spot-request-fulfillment", iid), CONTEXT)
    _report(regions, _agent(job_id, 1, iid, 1, AgentStarted()))
    regions.home_pools_down(job_id)
    spot_interruption.handler(regions.ec2_event("spot-interruption-warning", iid), CONTEXT)
    (west,) = regions.west_instances(job_id)
    new_iid = west["InstanceId"]
    state = forwarded(regions.ec2_event("instance-state-change", new_iid, state="running"), WEST)
    instance_state.handler(state, CONTEXT)
    _report(regions, _agent(job_id, 2, new_iid, 1, AgentStarted()))
    # AND its session there wrote its outputs to that region's bucket, manifest last
    west_s3.put_object(Bucket=west_bucket, Key=f"{layout.outputs_prefix(job_id)}a.txt", Body=b"1")
    west_s3.put_object(Bucket=west_bucket, Key=layout.outputs_manifest_key(job_id), Body=b"{}")
    # AND we note what the home bucket holds at the moment the job is written as ended
    seen_at_end: list[list[str]] = []
    update = regions.control.jobs.update

    def watched(job: str, change: Any, **kw: Any) -> Any:
        read, written = update(job, change, **kw)
        if written is not None and written.state.is_terminal():
            seen_at_end.append(_keys(home_s3, home_bucket, job_id))
        return read, written

    monkeypatch.setattr(regions.control.jobs, "update", watched)
    # WHEN the agent there says the session completed
    done = AgentCompleted(step=10, outputs_prefix=layout.outputs_prefix(job_id), train_seconds=1.0)
    _report(regions, _agent(job_id, 2, new_iid, 2, done))
    # THEN the job is ended, and its outputs were home before anyone could see it ended
    record = regions.control.jobs.get(job_id)
    assert record is not None and record.state is JobState.COMPLETED
    (home_keys,) = seen_at_end
    assert f"{layout.outputs_prefix(job_id)}a.txt" in home_keys
    assert layout.outputs_manifest_key(job_id) in home_keys


def test_copies_are_idempotent_and_manifests_come_after_their_blobs(regions: TwoRegions):
    objects = regions.control.objects
    assert objects is not None
    s3 = regions.clients["s3"]
    job_id, _ = submit_job(regions)
    key, size = _write_checkpoint(s3, regions.local.bucket, job_id, 10, 1)
    order: list[str] = []
    west = regions.west["s3"]
    real_copy = west.copy

    def recording_copy(source: dict[str, str], bucket: str, k: str, **kw: Any) -> Any:
        order.append(k)
        return real_copy(source, bucket, k, **kw)

    objects.s3_in = lambda region: (
        type(
            "S3", (), {"copy": staticmethod(recording_copy), "get_paginator": west.get_paginator}
        )()
        if region == WEST
        else s3
    )
    first = objects.follow(job_id, "us-east-1", WEST)
    assert first >= size
    assert order.index(key) > max(i for i, k in enumerate(order) if "/blobs/" in k)
    assert objects.follow(job_id, "us-east-1", WEST) == 0  # all there: nothing copied again
    assert objects.follow(job_id, WEST, WEST) == 0


def test_a_satellite_agent_may_speak_for_its_instance_only(regions: TwoRegions):
    from lambdas._runtime import PoisonMessageError

    job_id, iid = submit_job(regions)
    message = AgentMessage.model_validate(_agent(job_id, 1, iid, 1, AgentStarted()))
    west_role = regions.satellite.instance_role_id
    check_sender(message, f"{west_role}:{iid}", "AROAHOME", (west_role,))
    check_sender(message, f"AROAHOME:{iid}", "AROAHOME", (west_role,))
    with pytest.raises(PoisonMessageError):
        check_sender(message, f"{west_role}:i-0other", "AROAHOME", (west_role,))
    with pytest.raises(PoisonMessageError):
        check_sender(message, f"AROAOTHER:{iid}", "AROAHOME", (west_role,))


def test_a_malformed_or_foreign_satellite_parameter_is_refused_with_the_fix():
    good = {
        "region": WEST,
        "launch_template_id": "lt-0123",
        "bucket": "b",
        "instance_role_id": "AROA1",
        "subnets": [{"subnet_id": "subnet-1", "availability_zone": "us-west-2a"}],
    }
    assert parse_satellite(WEST, json.dumps(good)).bucket == "b"
    with pytest.raises(SatelliteError, match="redeploy"):
        parse_satellite(WEST, "{}")
    with pytest.raises(SatelliteError, match="describes"):
        parse_satellite("eu-west-1", json.dumps(good))
    wrong = dict(good, subnets=[{"subnet_id": "subnet-1", "availability_zone": "us-east-1a"}])
    with pytest.raises(SatelliteError, match="no subnets of its region"):
        parse_satellite(WEST, json.dumps(wrong))
