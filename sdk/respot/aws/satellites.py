"""Satellite regions from the control plane's side: what is there, launching there, and the
job's objects following it there.

A satellite stack (`infra/satellite.py`) publishes, in its own region, an SSM parameter with
its launch template, subnets and zones, checkpoint bucket and instance role id. The control
plane (in the home region) reads them once per process (`load_satellites`) and then:
- places jobs in those subnets as in its own (`with_satellite_subnets`: more pools);
- launches there with that region's launch template (`RegionalCapacity`, by the zone of the
  placement), and terminates / describes there too;
- keeps each job's objects where its attempt runs (`JobObjects`): before a launch in another
  region, the job's submission, code and checkpoints are copied into that region's bucket;
  when an attempt's instance is gone, its final checkpoints and handoff marker follow the
  job's current attempt, and its results (outputs, logs, scalars) come home, where
  `respot pull` reads them.

Copies are idempotent (an object already there with the same size is skipped) and ordered
as respot writes: blobs and the other objects first, then checkpoint manifests, then the
handoff markers, so a manifest is never seen before its blobs, nor a handoff before the
checkpoint it promises. The fee ($0.02/GB) is counted in the job's ledger when the next
attempt reports that it restored from a checkpoint of another region (`respot.core.transfer`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from botocore.exceptions import ClientError

from respot.aws.capacity import NOT_FOUND, Ec2Capacity
from respot.core.effects import LaunchInstance
from respot.core.events import CapacityLaunched, CapacityUnavailable, LaunchRefused
from respot.core.job import Market
from respot.core.placement import ControlSettings, SubnetRef
from respot.exceptions import RespotError
from respot.policy.pools import region_of
from respot.storage import layout

log = logging.getLogger(__name__)

# Under a job's prefix: what a new region needs before the launch (in this order, manifests
# and handoff markers last), and what comes home after an attempt there ends.
_FOLLOW = ("submission.json", "code/", "checkpoints/blobs/", "checkpoints/manifests/", "handoff/")
_RESULTS = ("outputs/", "logs/", "tensorboard/", "outputs.json")


class SatelliteError(RespotError):
    """A satellite region is configured but what it should publish is missing or malformed."""


@dataclass(frozen=True)
class Satellite:
    """What a satellite stack published in its region."""

    region: str
    launch_template_id: str
    bucket: str
    instance_role_id: str
    subnets: tuple[SubnetRef, ...]


def parse_satellite(region: str, text: str) -> Satellite:
    """The satellite parameter's value (JSON written by `infra/satellite.py`)."""
    try:
        raw = json.loads(text)
        subnets = tuple(SubnetRef(s["subnet_id"], s["availability_zone"]) for s in raw["subnets"])
        satellite = Satellite(
            region=str(raw["region"]),
            launch_template_id=str(raw["launch_template_id"]),
            bucket=str(raw["bucket"]),
            instance_role_id=str(raw["instance_role_id"]),
            subnets=subnets,
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise SatelliteError(
            f"the satellite parameter in {region} is malformed ({exc}); redeploy its stack "
            f"(cdk deploy --all -c extra_regions=...)"
        ) from exc
    if satellite.region != region:
        raise SatelliteError(
            f"the satellite parameter in {region} describes {satellite.region}; redeploy it"
        )
    wrong = [s.availability_zone for s in subnets if region_of(s.availability_zone) != region]
    if not subnets or wrong:
        raise SatelliteError(f"the satellite in {region} lists no subnets of its region: {wrong}")
    return satellite


def load_satellites(
    regions: Iterable[str], parameter: str, ssm_in: Callable[[str], Any]
) -> dict[str, Satellite]:
    """Each region's published satellite (`ssm_in(region)` is an SSM client there)."""
    found: dict[str, Satellite] = {}
    for region in regions:
        try:
            value = ssm_in(region).get_parameter(Name=parameter)["Parameter"]["Value"]
        except ClientError as exc:
            raise SatelliteError(
                f"extra region {region}: cannot read {parameter} there "
                f"({exc.response['Error']['Code']}); deploy its satellite stack "
                "(cdk deploy --all -c extra_regions=...) or drop the region"
            ) from exc
        found[region] = parse_satellite(region, value)
    return found


def with_satellite_subnets(
    settings: ControlSettings, satellites: Mapping[str, Satellite]
) -> ControlSettings:
    """The settings with every satellite's subnets after the home ones (more pools to place in)."""
    extra = tuple(s for sat in satellites.values() for s in sat.subnets)
    return replace(settings, subnets=settings.subnets + extra) if extra else settings


class RegionalCapacity(Ec2Capacity):
    """`Ec2Capacity` of the home region plus one per satellite, chosen by the placement's zone."""

    def __init__(
        self, *, home_region: str, satellites: Mapping[str, Ec2Capacity], **home: Any
    ) -> None:
        super().__init__(**home)
        self.home_region = home_region
        self.satellites = dict(satellites)

    def _in(self, availability_zone: str) -> Ec2Capacity | None:
        """The satellite's capacity for a zone, None for the home region's zones."""
        region = region_of(availability_zone)
        if region == self.home_region:
            return None
        try:
            return self.satellites[region]
        except KeyError:
            raise SatelliteError(
                f"{availability_zone} is in {region}, which is neither the home region "
                f"({self.home_region}) nor an extra region ({sorted(self.satellites)})"
            ) from None

    def launch(
        self, effect: LaunchInstance
    ) -> CapacityLaunched | CapacityUnavailable | LaunchRefused:
        there = self._in(effect.placement.availability_zone)
        return there.launch(effect) if there is not None else super().launch(effect)

    def price(self, market: Market, instance_type: str, availability_zone: str) -> float | None:
        there = self._in(availability_zone)
        if there is not None:
            return there.price(market, instance_type, availability_zone)
        return super().price(market, instance_type, availability_zone)

    def terminate(self, instance_ids: list[str] | tuple[str, ...]) -> list[str]:
        """Terminate wherever each instance is (an id unknown in one region is tried next)."""
        done = super().terminate(instance_ids)
        for there in self.satellites.values():
            rest = [i for i in instance_ids if i and i not in done]
            if not rest:
                break
            done.extend(there.terminate(rest))
        return done

    def state_reason(self, instance_id: str) -> tuple[str, str] | None:
        found = super().state_reason(instance_id)
        for there in self.satellites.values():
            if found is not None:
                break
            found = there.state_reason(instance_id)
        return found

    def managed_instances(self) -> list[dict[str, Any]]:
        found = super().managed_instances()
        for there in self.satellites.values():
            found.extend(there.managed_instances())
        return found


class JobObjects:
    """Where a job's objects are, by region, and the copies that make them follow the job."""

    def __init__(
        self,
        *,
        home_region: str,
        home_bucket: str,
        s3_in: Callable[[str], Any],
        satellites: Mapping[str, Satellite],
    ) -> None:
        self.home_region = home_region
        self.buckets = {home_region: home_bucket} | {r: s.bucket for r, s in satellites.items()}
        self.s3_in = s3_in

    def bucket_for_zone(self, availability_zone: str) -> tuple[str, str]:
        """(region, bucket) of the region a zone is in."""
        region = region_of(availability_zone)
        try:
            return region, self.buckets[region]
        except KeyError:
            raise SatelliteError(
                f"{availability_zone}: no respot bucket in {region} (extra regions: "
                f"{sorted(set(self.buckets) - {self.home_region})})"
            ) from None

    def follow(self, job_id: str, source: str, target: str) -> int:
        """Copy what an attempt in `target` needs from `source`; the bytes copied."""
        return self._copy(job_id, source, target, _FOLLOW)

    def bring_home(self, job_id: str, source: str) -> int:
        """Copy an attempt's results (outputs, logs, scalars) from `source` to the home bucket."""
        return self._copy(job_id, source, self.home_region, _RESULTS)

    def _copy(self, job_id: str, source: str, target: str, parts: tuple[str, ...]) -> int:
        if source == target:
            return 0
        src_bucket, dst_bucket = self.buckets[source], self.buckets[target]
        src, dst = self.s3_in(source), self.s3_in(target)
        prefix = layout.job_prefix(job_id)
        have = {o["Key"]: o["Size"] for o in _listing(dst, dst_bucket, prefix)}
        objects = _listing(src, src_bucket, prefix)
        copied = 0
        for part in parts:  # in the order that keeps manifests and handoffs last
            for obj in sorted(objects, key=lambda o: str(o["Key"])):
                key = str(obj["Key"])
                rest = key[len(prefix) :]
                if not (rest == part if not part.endswith("/") else rest.startswith(part)):
                    continue
                if have.get(key) == obj["Size"]:
                    continue  # already there (an earlier copy, or written there)
                dst.copy({"Bucket": src_bucket, "Key": key}, dst_bucket, key, SourceClient=src)
                copied += int(obj["Size"])
        if copied:
            log.info(
                "job %s: copied %d bytes of %s from %s to %s",
                job_id,
                copied,
                ", ".join(parts),
                source,
                target,
                extra={"job_id": job_id, "transfer_bytes": copied},
            )
        return copied


def _listing(client: Any, bucket: str, prefix: str) -> list[dict[str, Any]]:
    try:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return [obj for page in pages for obj in page.get("Contents", [])]
    except ClientError as exc:
        if exc.response["Error"]["Code"] in NOT_FOUND | {"NoSuchBucket"}:
            raise SatelliteError(f"bucket {bucket} does not exist; deploy its stack") from exc
        raise
