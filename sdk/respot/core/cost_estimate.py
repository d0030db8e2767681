"""What a job may cost by its deadline, before it is submitted (`respot run --check`).

Pure: the prices come in (`PriceQuote`: the current spot prices of a type across the region's
zones, its on-demand list price), nothing is read or spent here. The bounds follow the
deadline policy (`core.deadline`, docs/policy.md), for C = `estimated_runtime` and d = the
changeover (launch, boot, restore; `ControlSettings.changeover_estimate`), both billed:

- **spot** (the low bound): the whole job on spot, never interrupted, at the lowest current
  spot price among the types it may use: (C + d) x that price.
- **on-demand**: the whole job on on-demand at the dearest allowed type's list price, what
  the policy pays when spot never comes: (C + d) x that price.
- **worst by the deadline** (the high bound the policy allows): the policy keeps a job on spot
  only while the slack (time to the deadline minus C + d) lasts, then runs it whole on
  on-demand: spot billed for at most the slack, at the highest current spot price (or
  `max_spot_price`), plus (C + d) on on-demand. Without a deadline nothing forces on-demand
  and interruptions may cost without bound, except `max_runtime` (wall time from admission),
  which caps every bound at `max_runtime` x the dearest price.

Current spot prices are today's, not tomorrow's: the spot figures are estimates at those
prices, said so wherever they are printed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from respot.spec.training import TrainingEnvVar


@dataclass(frozen=True)
class PriceQuote:
    """One instance type's prices (USD per instance-hour); None: unknown."""

    instance_type: str
    spot_low: float | None = None  # the lowest current spot price across the region's zones
    spot_high: float | None = None  # the highest
    on_demand: float | None = None


@dataclass(frozen=True)
class CostEstimate:
    """The bounds of what a job may cost (USD); None where a price or the runtime is unknown."""

    billed_hours: float | None  # C + d, or None without `estimated_runtime`
    hours_to_deadline: float | None
    spot_usd: float | None
    spot_type: str | None
    on_demand_usd: float | None
    on_demand_type: str | None
    worst_usd: float | None
    notes: list[str] = field(default_factory=list)


def _cheapest(quotes: list[PriceQuote]) -> PriceQuote | None:
    known = [q for q in quotes if q.spot_low is not None]
    return min(known, key=lambda q: q.spot_low or 0.0) if known else None


def estimate(
    spec: TrainingEnvVar,
    quotes: list[PriceQuote],
    now: datetime,
    changeover: timedelta = timedelta(minutes=6),
) -> CostEstimate:
    """The cost bounds of `spec` at `quotes` (one per type it may be placed on), at `now`."""
    notes: list[str] = []
    deadline_h = (spec.deadline - now).total_seconds() / 3600.0 if spec.deadline else None
    if spec.estimated_runtime is None:
        notes.append(
            "no estimated_runtime: the cost cannot be estimated; give one "
            "(e.g. estimated_runtime: 3h) and the queue and the deadline policy use it too"
        )
        return CostEstimate(None, deadline_h, None, None, None, None, None, notes)
    hours = (spec.estimated_runtime + changeover).total_seconds() / 3600.0
    cheap = _cheapest(quotes)
    spot = hours * cheap.spot_low if cheap and cheap.spot_low is not None else None
    if cheap is None:
        notes.append("no current spot price known for any allowed type: the spot bound is unknown")
    priced = [q for q in quotes if q.on_demand is not None]
    dear = max(priced, key=lambda q: q.on_demand or 0.0) if priced else None
    on_demand = hours * dear.on_demand if dear and dear.on_demand is not None else None
    missing = sorted(q.instance_type for q in quotes if q.on_demand is None)
    if missing:
        notes.append(
            f"no on-demand list price for {', '.join(missing)}: not in respot's price list"
        )
    worst: float | None = None
    if spec.market == "on-demand":  # on-demand from the first launch: no spot, no slack spent
        notes.append("market: on-demand: the whole job on on-demand, never spot")
        spot, cheap, worst = None, None, on_demand
        if deadline_h is not None and deadline_h < hours:
            notes.append(
                f"cannot make its deadline: {hours:.2f} h of work and changeover, "
                f"{max(deadline_h, 0.0):.2f} h left"
            )
    elif deadline_h is not None:
        slack = deadline_h - hours
        if slack < 0:
            notes.append(
                f"cannot make its deadline: {hours:.2f} h of work and changeover, "
                f"{max(deadline_h, 0.0):.2f} h left; the policy fails it when even on-demand "
                "cannot finish in time"
            )
        highs = [q.spot_high for q in quotes if q.spot_high is not None]
        spot_rate = spec.max_spot_price if spec.max_spot_price is not None else max(highs or [0])
        if on_demand is not None and (highs or spec.max_spot_price is not None):
            worst = max(slack, 0.0) * spot_rate + on_demand
        if not spec.on_demand_fallback:
            worst = deadline_h * spot_rate if highs or spec.max_spot_price else None
            notes.append("on_demand_fallback is off: it stays on spot, billed until its deadline")
    else:
        notes.append(
            "no deadline: nothing forces on-demand, so what interruptions cost is not bounded "
            "(max_runtime bounds it)"
        )
    if spec.max_runtime is not None:
        rates = [r for q in quotes for r in (q.spot_high, q.on_demand) if r is not None]
        if rates:
            cap = spec.max_runtime.total_seconds() / 3600.0 * max(rates)
            worst = cap if worst is None else min(worst, cap)
    return CostEstimate(
        billed_hours=hours,
        hours_to_deadline=deadline_h,
        spot_usd=spot,
        spot_type=cheap.instance_type if cheap else None,
        on_demand_usd=on_demand,
        on_demand_type=dear.instance_type if dear else None,
        worst_usd=worst,
        notes=notes,
    )
