"""EC2 capacity: launch one instance for an attempt, terminate instances, read an instance's owner.

Launches use `RunInstances` with respot's launch template (which fixes IMDSv2, the role, the
security group, the disk and the boot script) and, for spot, one-time `InstanceMarketOptions`.
Each launch carries the attempt's client token, so asking twice yields one instance.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from respot.aws.pacing import PACED_ERROR, LaunchPacer
from respot.core.cost import on_demand_price
from respot.core.effects import LaunchInstance
from respot.core.events import CapacityLaunched, CapacityUnavailable, LaunchRefused
from respot.core.failures import launch_error_kind
from respot.core.job import Market
from respot.core.lifecycle import ATTEMPT_TAG, HANDOFF_TAG, JOB_TAG, MANAGED_TAG
from respot.core.quotas import QuotaReading, quota_for

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client

log = logging.getLogger(__name__)

NOT_FOUND = frozenset({"InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"})
# Seconds (halved at random for jitter) before asking a throttled RunInstances again: three
# more tries in about 4-7 s, after which the lifecycle's own, slower retry takes over.
THROTTLE_BACKOFF = (1.0, 2.0, 4.0)


class Ec2Capacity:
    """Launches and terminates respot's instances."""

    def __init__(
        self,
        *,
        launch_template_id: str,
        launch_template_version: str = "$Latest",
        on_demand_prices: dict[str, float] | None = None,
        deployment_name: str = "respot",
        client: EC2Client | Any = None,
        quotas_client: Any = None,
        sleep: Callable[[float], None] = time.sleep,
        pacer: LaunchPacer | None = None,
    ) -> None:
        if client is None:
            import boto3

            client = boto3.client("ec2")
        self.client = client
        self.sleep = sleep  # between throttled RunInstances calls (tests pass their own)
        # Service Quotas, asked only after a quota error (None: no quota value is read).
        self.quotas_client = quotas_client
        self.launch_template_id = launch_template_id
        self.launch_template_version = launch_template_version
        self.on_demand_prices = on_demand_prices or {}
        self.deployment_name = deployment_name
        # The account's launch pacing (`aws.pacing`), shared by every handler; None: unpaced.
        self.pacer = pacer

    def launch(
        self, effect: LaunchInstance
    ) -> CapacityLaunched | CapacityUnavailable | LaunchRefused:
        """Ask for one instance; a refusal comes back as an event, AWS's own errors raise.

        No capacity: `CapacityUnavailable`. Over a vCPU quota: `CapacityUnavailable` with the
        quota, its value and the instance's vCPUs. Anything no retry fixes (a mistyped
        instance type, UnauthorizedOperation, KMS): `LaunchRefused` with AWS's text.
        """
        p = effect.placement
        tags = [
            {"Key": JOB_TAG, "Value": effect.job_id},
            {"Key": ATTEMPT_TAG, "Value": str(effect.attempt)},
            {"Key": MANAGED_TAG, "Value": self.deployment_name},
            {"Key": "Name", "Value": f"respot {effect.job_id} #{effect.attempt}"},
        ]
        if effect.await_handoff_from is not None:
            tags.append({"Key": HANDOFF_TAG, "Value": str(effect.await_handoff_from)})
        tags.extend({"Key": k, "Value": v} for k, v in sorted(effect.tags.items()))
        specs = [
            {"ResourceType": "instance", "Tags": tags},
            {"ResourceType": "volume", "Tags": tags},
        ]
        kwargs: dict[str, Any] = {
            "LaunchTemplate": {
                "LaunchTemplateId": self.launch_template_id,
                "Version": self.launch_template_version,
            },
            "InstanceType": p.instance_type,
            "SubnetId": p.subnet_id,
            "MinCount": 1,
            "MaxCount": 1,
            "ClientToken": effect.client_token,
        }
        if p.market is Market.SPOT:
            spot_options: dict[str, Any] = {
                "SpotInstanceType": "one-time",
                "InstanceInterruptionBehavior": "terminate",
            }
            if p.max_price is not None:
                spot_options["MaxPrice"] = f"{p.max_price:.4f}"
            kwargs["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": spot_options}
            specs.append({"ResourceType": "spot-instances-request", "Tags": tags})
        kwargs["TagSpecifications"] = specs
        if self.pacer is not None:
            grant = self.pacer.take(effect.client_token)
            if not grant.granted:
                pacing = self.pacer.pacing
                log.info("job %s: launch paced (next token in %.1fs)", effect.job_id, grant.wait)
                whose = "its token, reserved, is" if grant.reserved else "the next token is"
                return CapacityUnavailable(
                    attempt=effect.attempt,
                    client_token=effect.client_token,
                    error_code=PACED_ERROR,
                    message=(
                        f"respot's launches in this account are at their pace "
                        f"({pacing.rate_per_second:g}/s, burst {pacing.burst}: stack setting "
                        f"launch_pacing); {whose} due in {grant.wait:.1f}s"
                    ),
                    # Launch again when its own token is due; without one, at the next tick.
                    retry_after=grant.wait if grant.reserved else None,
                )
        try:
            response = self._run_instances(kwargs)
        except ClientError as exc:
            code = exc.response["Error"]["Code"]
            message = exc.response["Error"].get("Message", "")
            kind = launch_error_kind(code)
            if kind == "transient":
                raise
            if kind in ("throttle", "unauthorized"):
                # Not the pool's fault: the lifecycle retries this pool later, never marks it
                # tried, bounded (respot.core.lifecycle.launches._retry_same_pool).
                log.warning("job %s: RunInstances %s: %s", effect.job_id, code, message)
            if kind == "refused":
                log.error("job %s: EC2 refused the launch: %s: %s", effect.job_id, code, message)
                return LaunchRefused(effect.attempt, effect.client_token, code, message)
            return CapacityUnavailable(
                attempt=effect.attempt,
                client_token=effect.client_token,
                error_code=code,
                message=message,
                quota=self.quota_reading(p.instance_type, p.market) if kind == "quota" else None,
            )
        instance = response["Instances"][0]
        az = instance.get("Placement", {}).get("AvailabilityZone") or p.availability_zone
        return CapacityLaunched(
            attempt=effect.attempt,
            client_token=effect.client_token,
            instance_id=instance["InstanceId"],
            spot_request_id=instance.get("SpotInstanceRequestId"),
            availability_zone=az,
            price_per_hour=self.price(p.market, p.instance_type, az),
        )

    def _run_instances(self, kwargs: dict[str, Any]) -> Any:
        """RunInstances, asked again after `THROTTLE_BACKOFF` while EC2 throttles it (on top of
        botocore's own retries; the same client token, so never a second instance)."""
        for delay in (*THROTTLE_BACKOFF, None):
            try:
                return self.client.run_instances(**kwargs)
            except ClientError as exc:
                if delay is None or launch_error_kind(exc.response["Error"]["Code"]) != "throttle":
                    raise
                self.sleep(delay * (0.5 + random.random() / 2))  # noqa: S311 - jitter
        raise AssertionError("unreachable")

    def quota_reading(self, instance_type: str, market: Market) -> QuotaReading | None:
        """The quota `instance_type` counts against, its current value and the type's vCPUs.

        Each read is best effort: a reading with an unknown value still names the quota.
        """
        quota = quota_for(instance_type, market)
        if quota is None:
            return None
        value: float | None = None
        if self.quotas_client is not None and quota.code is not None:
            try:
                answer = self.quotas_client.get_service_quota(
                    ServiceCode="ec2", QuotaCode=quota.code
                )
                value = float(answer["Quota"]["Value"])
            except (ClientError, KeyError, ValueError) as exc:
                log.warning("could not read quota %s: %s", quota.code, exc)
        vcpus: int | None = None
        try:
            described = self.client.describe_instance_types(InstanceTypes=[instance_type])
            vcpus = int(described["InstanceTypes"][0]["VCpuInfo"]["DefaultVCpus"])
        except (ClientError, KeyError, IndexError, ValueError) as exc:
            log.warning("could not read the vCPUs of %s: %s", instance_type, exc)
        region = getattr(getattr(self.client, "meta", None), "region_name", None)
        return QuotaReading(quota=quota, value=value, vcpus=vcpus, region=region)

    def price(self, market: Market, instance_type: str, availability_zone: str) -> float | None:
        """The current hourly price of the pool (spot price history, or the on-demand list)."""
        if market is Market.ON_DEMAND:
            return on_demand_price(instance_type, self.on_demand_prices)
        try:
            history = self.client.describe_spot_price_history(
                InstanceTypes=[instance_type],
                AvailabilityZone=availability_zone,
                ProductDescriptions=["Linux/UNIX"],
                StartTime=datetime.now(UTC),
                MaxResults=1,
            ).get("SpotPriceHistory", [])
        except ClientError as exc:
            log.warning("spot price of %s in %s unknown: %s", instance_type, availability_zone, exc)
            return None
        return float(history[0]["SpotPrice"]) if history else None

    def terminate(self, instance_ids: list[str] | tuple[str, ...]) -> list[str]:
        """Terminate instances; ones already gone count as done. Returns those asked to stop."""
        ids = [i for i in instance_ids if i]
        if not ids:
            return []
        try:
            self.client.terminate_instances(InstanceIds=ids)
            return ids
        except ClientError as exc:
            if exc.response["Error"]["Code"] not in NOT_FOUND:
                raise
        # Some id is unknown: terminate the others one by one so that one bad id blocks none.
        done = []
        for instance_id in ids:
            try:
                self.client.terminate_instances(InstanceIds=[instance_id])
                done.append(instance_id)
            except ClientError as exc:
                if exc.response["Error"]["Code"] not in NOT_FOUND:
                    raise
        return done

    def state_reason(self, instance_id: str) -> tuple[str, str] | None:
        """(code, message) of the instance's `StateReason` ("Client.VolumeLimitExceeded", "...");
        None if EC2 gives none or does not know the instance. Errors other than "not found"
        raise (the caller decides whether the reason is worth a retry)."""
        try:
            reservations = self.client.describe_instances(InstanceIds=[instance_id])["Reservations"]
        except ClientError as exc:
            if exc.response["Error"]["Code"] in NOT_FOUND:
                return None
            raise
        for reservation in reservations:
            for instance in reservation["Instances"]:
                reason = instance.get("StateReason") or {}
                code = str(reason.get("Code") or "")
                if code:
                    return code[:200], str(reason.get("Message") or "")[:500]
        return None

    def managed_instances(self) -> list[dict[str, Any]]:
        """Every instance of this deployment not yet terminated (for orphan clean-up)."""
        paginator = self.client.get_paginator("describe_instances")
        found = []
        for page in paginator.paginate(
            Filters=[
                {"Name": f"tag:{MANAGED_TAG}", "Values": [self.deployment_name]},
                {
                    "Name": "instance-state-name",
                    "Values": ["pending", "running", "stopping", "stopped"],
                },
            ]
        ):
            for reservation in page["Reservations"]:
                found.extend(reservation["Instances"])
        return found
