"""The local spot market: capacity, prices and interruptions, from a trace or a chaos schedule.

It sits on the control plane's EC2 client as botocore event hooks, so respot's own capacity
adapter is the code under test: before `RunInstances` the market may refuse (no spot capacity
in the pool now: `InsufficientInstanceCapacity`; max price below the market:
`SpotMaxPriceTooLow`) or answer a repeated client token with the first launch's instance, as
EC2 does; after it, the fleet takes the instance over. `DescribeSpotPriceHistory` answers the
market price; `TerminateInstances` ends the local instance.

Availability comes from a `Trace` per pool (files of `bench/traces/`, tick `gap_seconds`
simulated) or is constant; a `ChaosSchedule` adds interruptions at set times after boot.
"""

from __future__ import annotations

import copy
import itertools
import json
import logging
import secrets
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.local.clock import Timers, TimeScale
from infra.local.fleet import InstanceFleet, LocalInstance
from respot.core.cost import on_demand_price

log = logging.getLogger("respot.local.market")

SPOT_DISCOUNT = 0.318  # spot/on-demand of the benchmark's prices (0.9731 / 3.06)


class _HttpStub:
    """Just enough of an HTTP response for botocore when a hook answers instead of the server."""

    def __init__(self, status_code: int) -> None:
        self.status_code = status_code
        self.headers: dict[str, str] = {}
        self.content = b""
        self.raw = None
        self.text = ""


def _error(code: str, message: str) -> tuple[_HttpStub, dict[str, Any]]:
    return _HttpStub(400), {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": 400, "RequestId": secrets.token_hex(8)},
    }


def _known_instance_types() -> frozenset[str]:
    """Every instance type EC2 offers (moto's copy of the list)."""
    from moto.ec2.models.instance_types import INSTANCE_TYPES

    return frozenset(INSTANCE_TYPES)


@dataclass(frozen=True)
class Trace:
    """Spot availability of one pool: `data[t]` for tick t of `gap_seconds` simulated seconds."""

    name: str
    gap_seconds: int
    data: tuple[int, ...]

    @classmethod
    def load(cls, path: Path) -> Trace:
        """Read a trace file: {"metadata": {"gap_seconds": G}, "data": [...]}."""
        raw = json.loads(path.read_text())
        return cls(
            path.stem, int(raw["metadata"]["gap_seconds"]), tuple(int(x) for x in raw["data"])
        )

    def available(self, simulated_seconds: float, offset_ticks: int = 0) -> bool:
        """Availability at a simulated time from the start of the run."""
        tick = offset_ticks + int(simulated_seconds // self.gap_seconds)
        return self.data[tick % len(self.data)] > 0


@dataclass
class ChaosSchedule:
    """Interruptions at set simulated seconds after an instance boots.

    `after_boot[attempt]` interrupts that attempt's instance (of every job, or only of
    `job_ids`); `every` interrupts every spot instance that many seconds after boot.
    """

    after_boot: dict[int, float] = field(default_factory=dict)
    every: float | None = None
    job_ids: set[str] | None = None
    per_job: dict[str, dict[int, float]] = field(default_factory=dict)

    def add(self, job_id: str, attempt: int, after_boot: float) -> None:
        """Interrupt one job's attempt `after_boot` simulated seconds after its instance boots."""
        self.per_job.setdefault(job_id, {})[attempt] = after_boot

    def delay_for(self, inst: LocalInstance) -> float | None:
        """Simulated seconds after boot at which to interrupt `inst`, or None."""
        if inst.market != "spot":
            return None
        if inst.job_id in self.per_job:
            return self.per_job[inst.job_id].get(inst.attempt or 0)
        if self.job_ids is not None and inst.job_id not in self.job_ids:
            return None
        if inst.attempt is not None and inst.attempt in self.after_boot:
            return self.after_boot[inst.attempt]
        return self.every


class SpotMarket:
    """Capacity, prices and interruptions of the local spot market."""

    def __init__(
        self,
        fleet: InstanceFleet,
        *,
        scale: TimeScale,
        timers: Timers,
        traces: Sequence[Trace] = (),
        chaos: ChaosSchedule | None = None,
        trace_offset_ticks: int = 0,
        pool_traces: dict[str, Trace] | None = None,
    ) -> None:
        self.fleet = fleet
        self.scale = scale
        self.timers = timers
        self.traces = list(traces)
        self.chaos = chaos or ChaosSchedule()
        self.trace_offset_ticks = trace_offset_ticks
        self.started = time.monotonic()
        self.refusals: list[tuple[str, str]] = []
        self.launches: list[tuple[str, str]] = []
        # "<instance type>/<zone>" -> its trace; pools not named take `traces` in turn (and
        # have spot always without any).
        self.pool_traces = dict(pool_traces or {})
        # Subnets of satellite regions (infra/local/satellite.py), whose launches it also sees.
        self.extra_subnets: list[Any] = []
        self._pools: dict[str, Trace] = dict(self.pool_traces)
        self._tokens: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        fleet.on_boot.append(self._on_boot)
        if self.traces or self.pool_traces:
            self._ticker = threading.Thread(
                target=self._tick_loop, name="local-market", daemon=True
            )
            self._ticker.start()

    # ---- availability and prices -------------------------------------------------------------

    def now(self) -> float:
        """Simulated seconds since the market opened."""
        return self.scale.simulated(time.monotonic() - self.started)

    def trace_of(self, pool: str) -> Trace | None:
        """The trace a pool (instance type/zone) follows: its own, or the traces in turn."""
        with self._lock:
            if pool in self.pool_traces:
                return self.pool_traces[pool]
            if not self.traces:
                return None
            if pool not in self._pools:
                self._pools[pool] = self.traces[len(self._pools) % len(self.traces)]
            return self._pools[pool]

    def set_pool_trace(self, pool: str, trace: Trace) -> None:
        """From now on, pool "<instance type>/<zone>" follows `trace` (a test's pool going away)."""
        with self._lock:
            self.pool_traces[pool] = trace
            self._pools[pool] = trace

    def available(self, instance_type: str, availability_zone: str) -> bool:
        """True if the pool can give a spot instance now."""
        trace = self.trace_of(f"{instance_type}/{availability_zone}")
        return True if trace is None else trace.available(self.now(), self.trace_offset_ticks)

    def price(self, instance_type: str) -> float:
        """The spot price of an instance type (a fixed share of its on-demand price)."""
        return round((on_demand_price(instance_type) or 1.0) * SPOT_DISCOUNT, 4)

    # ---- hooks on the control plane's EC2 client ---------------------------------------------

    def attach(self, ec2_client: Any) -> None:
        """Put the market between `ec2_client` and the emulator."""
        events = ec2_client.meta.events
        events.register("before-parameter-build.ec2.RunInstances", self._remember_params)
        events.register("before-call.ec2.RunInstances", self._before_run)
        events.register("after-call.ec2.RunInstances", self._after_run)
        events.register("before-call.ec2.DescribeSpotPriceHistory", self._price_history)
        events.register("after-call.ec2.TerminateInstances", self._after_terminate)

    def _remember_params(self, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["respot_params"] = copy.deepcopy(params)
        region = context.get("client_region")
        if region is not None:
            context["respot_region"] = region

    def _zone_of(self, subnet_id: str | None) -> str:
        for subnet in (*self.fleet.deployment.subnets, *self.extra_subnets):
            if subnet.subnet_id == subnet_id:
                return subnet.availability_zone
        return self.fleet.deployment.subnets[0].availability_zone

    def _before_run(self, context: dict[str, Any], **_: Any) -> Any:
        params = context.get("respot_params", {})
        token = params.get("ClientToken")
        with self._lock:
            if token and token in self._tokens:
                # EC2 answers a repeated client token with the instance of the first call.
                return _HttpStub(200), copy.deepcopy(self._tokens[token])
        instance_type = params.get("InstanceType", "")
        if instance_type not in _known_instance_types():
            # EC2's answer for a type that does not exist (e.g. a mistyped g5.xlarg).
            self.refusals.append((instance_type, "InvalidParameterValue"))
            return _error(
                "InvalidParameterValue", f"Invalid value '{instance_type}' for InstanceType."
            )
        options = params.get("InstanceMarketOptions") or {}
        if options.get("MarketType") != "spot":
            return None
        zone = self._zone_of(params.get("SubnetId"))
        if not self.available(instance_type, zone):
            self.refusals.append((f"{instance_type}/{zone}", "InsufficientInstanceCapacity"))
            return _error(
                "InsufficientInstanceCapacity",
                f"There is no Spot capacity available that matches your request ({instance_type} "
                f"in {zone}).",
            )
        max_price = options.get("SpotOptions", {}).get("MaxPrice")
        if max_price is not None and float(max_price) < self.price(instance_type):
            self.refusals.append((f"{instance_type}/{zone}", "SpotMaxPriceTooLow"))
            return _error(
                "SpotMaxPriceTooLow",
                f"Your Spot request price of {max_price} is lower than the minimum required "
                f"Spot request fulfillment price of {self.price(instance_type)}.",
            )
        return None

    def _after_run(
        self, http_response: Any, parsed: dict[str, Any], context: dict[str, Any], **_: Any
    ) -> None:
        if http_response.status_code >= 300 or not parsed.get("Instances"):
            return
        params = context.get("respot_params", {})
        token = params.get("ClientToken")
        with self._lock:
            if token and token in self._tokens:
                return  # a replayed answer: the instance is already in the fleet
        instance = parsed["Instances"][0]
        spot = (params.get("InstanceMarketOptions") or {}).get("MarketType") == "spot"
        sir = f"sir-{secrets.token_hex(4)}" if spot else None
        if sir:
            instance["SpotInstanceRequestId"] = sir
        tags = {
            t["Key"]: t["Value"]
            for spec in params.get("TagSpecifications", [])
            if spec.get("ResourceType") == "instance"
            for t in spec.get("Tags", [])
        }
        zone = instance.get("Placement", {}).get("AvailabilityZone") or self._zone_of(
            params.get("SubnetId")
        )
        with self._lock:
            if token:
                self._tokens[token] = copy.deepcopy(parsed)
            self.launches.append((instance["InstanceId"], "spot" if spot else "on-demand"))
        self.fleet.launched(
            instance_id=instance["InstanceId"],
            instance_type=params.get("InstanceType", ""),
            availability_zone=zone,
            market="spot" if spot else "on-demand",
            tags=tags,
            spot_request_id=sir,
            launch_template_id=(params.get("LaunchTemplate") or {}).get("LaunchTemplateId"),
            region=context.get("respot_region"),
        )

    def _price_history(self, context: dict[str, Any], **_: Any) -> Any:
        params = context.get("respot_params") or {}
        types = params.get("InstanceTypes") or ["g5.xlarge"]
        zone = params.get("AvailabilityZone") or self._zone_of(None)
        return _HttpStub(200), {
            "SpotPriceHistory": [
                {
                    "AvailabilityZone": zone,
                    "InstanceType": t,
                    "ProductDescription": "Linux/UNIX",
                    "SpotPrice": f"{self.price(t):.6f}",
                }
                for t in types
            ],
            "ResponseMetadata": {"HTTPStatusCode": 200},
        }

    def _after_terminate(self, http_response: Any, parsed: dict[str, Any], **_: Any) -> None:
        for item in parsed.get("TerminatingInstances", []):
            self.fleet.terminate(item["InstanceId"], "terminated by respot", via_api=True)

    # ---- interruptions -----------------------------------------------------------------------

    def _on_boot(self, inst: LocalInstance) -> None:
        delay = self.chaos.delay_for(inst)
        if delay is not None:
            self.timers.after(
                self.scale.real(delay), lambda: self.fleet.interrupt(inst.instance_id)
            )

    def _tick_loop(self) -> None:
        gap = min(t.gap_seconds for t in [*self.traces, *self.pool_traces.values()])
        period = max(self.scale.real(gap) / 4, 0.05)
        while not self._stop.wait(period):
            for inst in self.fleet.live():
                if inst.market != "spot" or inst.noticed_at is not None:
                    continue
                if not self.available(inst.instance_type, inst.availability_zone):
                    self.fleet.interrupt(inst.instance_id)

    def stop(self) -> None:
        """Stop the trace ticker."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=5)


def load_traces(directory: Path, limit: int | None = None) -> list[Trace]:
    """Every trace file in a directory, sorted by name."""
    files = sorted(directory.glob("*.json"))
    return [Trace.load(p) for p in itertools.islice(files, limit)]
