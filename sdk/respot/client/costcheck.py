"""The prices a job's cost estimate is made with, read the way the control plane reads them.

- on-demand: respot's list prices (`respot/data/on_demand_prices.json`, its source and date in
  the file), the list the control plane bills an attempt at when EC2 gives no price; a stack's
  `on_demand_prices` overrides are not published to researchers, so they are not applied here;
- spot: EC2's `DescribeSpotPriceHistory` in the deployment's region at this moment (the price
  in force in each zone, Linux/UNIX), as the control plane reads a pool's price when it places
  a job (`aws.capacity.Capacity.price`); read-only. Without a deployment, or when the call is
  refused, the spot prices are unknown and the estimate says so.

Nothing is submitted, uploaded or launched.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from respot.core.cost import on_demand_price
from respot.core.cost_estimate import CostEstimate, PriceQuote, estimate
from respot.spec.training import TrainingEnvVar

log = logging.getLogger("respot.client.costcheck")

SPOT_SOURCE = "EC2 DescribeSpotPriceHistory now, {region}, Linux/UNIX, every zone"
ON_DEMAND_SOURCE = "respot's on-demand list (respot/data/on_demand_prices.json)"


def spot_prices(ec2: Any, instance_types: list[str]) -> dict[str, list[float]]:
    """instance type -> the spot price in force now in each zone that offers it."""
    found: dict[str, dict[str, float]] = {}
    paginator = ec2.get_paginator("describe_spot_price_history")
    for page in paginator.paginate(
        InstanceTypes=instance_types,
        ProductDescriptions=["Linux/UNIX"],
        StartTime=datetime.now(UTC),
    ):
        for row in page.get("SpotPriceHistory", []):
            zones = found.setdefault(row["InstanceType"], {})
            zones.setdefault(row["AvailabilityZone"], float(row["SpotPrice"]))  # newest first
    return {t: list(z.values()) for t, z in found.items()}


def quotes(
    instance_types: list[str], ec2: Any | None, unreached: str | None = None
) -> tuple[list[PriceQuote], str | None]:
    """Each type's prices; and why the spot prices are unknown, if they are."""
    spot: dict[str, list[float]] = {}
    why = None
    if ec2 is None:
        why = f"spot prices unknown: no deployment reached ({unreached or 'none given'})"
    else:
        try:
            spot = spot_prices(ec2, instance_types)
        except Exception as exc:  # refused (no ec2:DescribeSpotPriceHistory), offline, ...
            why = f"spot prices unknown: DescribeSpotPriceHistory failed ({exc})"
    out = []
    for t in instance_types:
        zones = spot.get(t) or []
        out.append(
            PriceQuote(
                instance_type=t,
                spot_low=min(zones) if zones else None,
                spot_high=max(zones) if zones else None,
                on_demand=on_demand_price(t),
            )
        )
    return out, why


def check_cost(
    spec: TrainingEnvVar,
    instance_types: list[str],
    ec2: Any | None,
    *,
    unreached: str | None = None,
) -> tuple[CostEstimate, list[PriceQuote]]:
    """The cost estimate of `spec` over `instance_types` at today's prices; spends nothing.

    `ec2`: the deployment region's EC2 client (None: `unreached` says why there is none)."""
    found, why = quotes(instance_types, ec2, unreached)
    result = estimate(spec, found, datetime.now(UTC))
    if why:
        result.notes.insert(0, why)
    return result, found
