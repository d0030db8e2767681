"""What a job cost, and what the same work would have cost on on-demand instances."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from importlib import resources

from respot.core.job import Attempt, JobRecord, Market
from respot.core.transfer import transfer_usd


@cache
def on_demand_prices() -> dict[str, float]:
    """List prices per instance type (USD/hour); source and date are in the JSON file."""
    text = resources.files("respot").joinpath("data/on_demand_prices.json").read_text()
    return {k: float(v) for k, v in json.loads(text)["prices"].items()}


def on_demand_price(instance_type: str, overrides: dict[str, float] | None = None) -> float | None:
    """The on-demand price of `instance_type`, or None if respot does not know it."""
    if overrides and instance_type in overrides:
        return overrides[instance_type]
    return on_demand_prices().get(instance_type)


def _hours(start: datetime | None, end: datetime | None, now: datetime) -> float:
    if start is None:
        return 0.0
    return max(((end or now) - start).total_seconds(), 0.0) / 3600.0


def attempt_hours(att: Attempt, now: datetime) -> float:
    """Instance-hours billed for an attempt: from launch to its end (or now)."""
    return _hours(att.launched_at or att.bound_at, att.ended_at, now)


def attempt_cost(att: Attempt, now: datetime, overrides: dict[str, float] | None = None) -> float:
    """Dollars billed for one attempt at its recorded price (on-demand list price if unknown)."""
    price = att.price_per_hour
    if price is None:
        price = on_demand_price(att.placement.instance_type, overrides) or 0.0
        if att.placement.market is Market.SPOT:
            price = 0.0  # unknown spot price: count nothing rather than guess
    return attempt_hours(att, now) * price


@dataclass(frozen=True)
class CostSummary:
    """Paid so far, the on-demand equivalent, and the saving."""

    paid_usd: float
    on_demand_usd: float | None
    instance_hours: float
    training_hours: float

    @property
    def savings_pct(self) -> float | None:
        """Percent saved against on-demand, if the on-demand price is known."""
        if not self.on_demand_usd:
            return None
        return 100.0 * (1.0 - self.paid_usd / self.on_demand_usd)


def job_cost(
    job: JobRecord, now: datetime, overrides: dict[str, float] | None = None
) -> CostSummary:
    """Cost of a job so far.

    The on-demand equivalent is what one uninterrupted on-demand instance of the job's first
    instance type would have cost for the same training time plus one boot: the hours the
    agent trained on any attempt, plus the first attempt's launch-to-start time.
    """
    paid = sum(attempt_cost(a, now, overrides) + transfer_usd(a) for a in job.attempts)
    hours = sum(attempt_hours(a, now) for a in job.attempts)
    training = sum(_hours(a.started_at, a.ended_at, now) for a in job.attempts)
    first = next((a for a in job.attempts if a.started_at), None)
    boot = _hours(first.launched_at, first.started_at, now) if first else 0.0
    types = job.spec.instance_types or (
        [job.attempts[0].placement.instance_type] if job.attempts else []
    )
    price = on_demand_price(types[0], overrides) if types else None
    on_demand = (training + boot) * price if price is not None else None
    return CostSummary(
        paid_usd=paid, on_demand_usd=on_demand, instance_hours=hours, training_hours=training
    )


@dataclass(frozen=True)
class LedgerLine:
    """One attempt's line in a job's cost ledger."""

    attempt: int
    market: str
    instance_type: str
    availability_zone: str
    instance_id: str | None
    started: datetime | None  # billing starts: launch (or binding, if the launch is unknown)
    ended: datetime | None  # None while the instance runs
    hours: float
    price_per_hour: float | None
    paid_usd: float
    on_demand_price_per_hour: float | None
    end: str | None
    # The checkpoint moved into this attempt's region from another (respot.core.transfer).
    transfer_gb: float = 0.0
    transfer_usd: float = 0.0
    transfer_from: str | None = None


def ledger(
    job: JobRecord, now: datetime, overrides: dict[str, float] | None = None
) -> list[LedgerLine]:
    """Every attempt's instance type, zone, market, start, end, price and cost, in order.

    `paid_usd` is the instance's; a checkpoint moved across regions is `transfer_usd`.
    """
    lines = []
    for att in job.attempts:
        lines.append(
            LedgerLine(
                attempt=att.number,
                market=att.placement.market.value,
                instance_type=att.placement.instance_type,
                availability_zone=att.placement.availability_zone,
                instance_id=att.instance_id,
                started=att.launched_at or att.bound_at,
                ended=att.ended_at,
                hours=attempt_hours(att, now),
                price_per_hour=att.price_per_hour,
                paid_usd=attempt_cost(att, now, overrides),
                on_demand_price_per_hour=on_demand_price(att.placement.instance_type, overrides),
                end=att.end.value if att.end else None,
                transfer_gb=(att.transfer_bytes or 0) / 1e9,
                transfer_usd=transfer_usd(att),
                transfer_from=att.transfer_from,
            )
        )
    return lines
