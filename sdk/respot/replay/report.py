"""Live against predicted: the figures `respot replay` prints, and whether they agree."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from respot.policy.model import SECONDS_PER_HOUR
from respot.policy.pools import CHECKPOINT_GB, TRANSFER_PRICE_PER_GB, PoolsOutcome
from respot.replay.live import LiveRun
from respot.replay.plan import LiveCost, Prediction, ReplayPlan, tolerance

DEFAULT_TOLERANCE = 0.10  # normalized: the least allowed |live - predicted| (see `tolerance`)


@dataclass(frozen=True)
class Comparison:
    """One replay's verdict."""

    plan: ReplayPlan
    live: LiveRun
    cost: LiveCost
    prediction: Prediction
    tolerance: float

    @property
    def difference(self) -> float:
        """live - predicted, normalized."""
        return self.cost.normalized - self.prediction.respot.normalized_cost

    @property
    def ok(self) -> bool:
        """Within tolerance, live deadline met, and the prediction met it too."""
        return (
            abs(self.difference) <= self.tolerance
            and self.live.deadline_met
            and not self.prediction.respot.missed
        )

    @property
    def inconclusive(self) -> str | None:
        """Why this run cannot judge the policy, if the machine could not play the model.

        The agent's start takes real seconds the time scale does not shrink; when it alone
        outlasts the modelled changeover d (real), every live changeover is longer than the
        simulator's and the difference says how busy the machine was, not whether the
        product drifted from the benchmark.
        """
        starts = self.live.agent_starts
        d_real = self.plan.live_seconds()["changeover"]
        if starts and sum(starts) / len(starts) > d_real:
            return (
                f"the agent's start took {sum(starts) / len(starts):.1f} s real on average, more "
                f"than d = {d_real:.1f} s real: the machine is too busy for this compression; "
                f"give a smaller --time-scale (longer ticks) or a larger --changeover-hours"
            )
        return None

    @property
    def verdict(self) -> str:
        """OK, DRIFT, DEADLINE MISSED or INCONCLUSIVE."""
        if self.ok:
            return "OK"
        if self.inconclusive:
            return "INCONCLUSIVE"
        return "DRIFT" if self.live.deadline_met else "DEADLINE MISSED"

    def explanations(self) -> list[str]:
        """The expected sources of the difference, with this run's figures."""
        plan, live, pred = self.plan, self.live, self.prediction.respot
        gap = plan.gap
        notes = [
            "tick discretization: the simulator bills whole ticks (the finishing tick too) and "
            "decides only at boundaries; live bills each instance from launch to its end to "
            f"the second, and events land within a tick (1 tick = {gap} s = {plan.tick_seconds} "
            "s real)",
        ]
        if live.changeovers:
            n = len(live.changeovers)
            mean = sum(live.changeovers) / n * plan.time_scale
            launch = sum(live.launches) / n * plan.time_scale
            notes.append(
                f"changeover: modelled d = {plan.job.changeover_seconds} s, each paid in full; "
                f"live request -> training took {mean:.0f} s on average over {n} start(s) "
                f"({launch:.0f} s of it before the launch, unbilled; the rest is the boot as "
                f"set plus the agent's real start, {plan.tick_seconds} s real per tick); "
                f"the simulator made {pred.changeovers} change(s), live {len(live.spans)}"
            )
        if live.agent_starts:
            agent = sum(live.agent_starts) / len(live.agent_starts)
            notes.append(
                f"agent start: boot script -> training took {agent:.1f} s real on average "
                f"({agent * plan.time_scale:.0f} s of trace time, not compressed: the machine's "
                "load stretches it); EC2's simulated boot was set to d less the starts measured"
            )
        notes.append(
            "observability: the simulator's policy sees every pool's availability each tick; "
            "live, a pool is known from launches, refusals and interruptions (not asked: "
            "assumed up when placing)"
        )
        if len(plan.pool_set.regions) > 1:
            fee = pred.transfers * CHECKPOINT_GB * TRANSFER_PRICE_PER_GB
            notes.append(
                f"regions: the set spans {', '.join(plan.pool_set.regions)}; the live stack has "
                f"one region, so the live policy sees no transfer fee; the live cost counts "
                f"the set's transfers from the zones its attempts used ({self.cost.transfers}; "
                f"predicted {pred.transfers}, ${fee:.2f})"
            )
        notes.extend(f"whole seconds: {n}" for n in plan.rounding())
        return notes

    def to_json(self) -> dict[str, Any]:
        """The `--json` object."""
        plan, live, cost = self.plan, self.live, self.cost
        references = {
            name: round(o.normalized_cost, 4)
            for name, o in self.prediction.outcomes.items()
            if name != "respot"
        }
        references["omniscient"] = round(self.prediction.omniscient, 4)
        return {
            "traces": plan.pool_set.source,
            "pools": [p.name for p in plan.pool_set.pools],
            "live_zones": list(plan.zones()),
            "window_start": plan.start,
            "window_ticks": plan.window_ticks,
            "gap_seconds": plan.gap,
            "work_hours": plan.job.work_seconds / SECONDS_PER_HOUR,
            "deadline_hours": plan.job.deadline_seconds / SECONDS_PER_HOUR,
            "changeover_hours": plan.job.changeover_seconds / SECONDS_PER_HOUR,
            "tick_seconds_real": plan.tick_seconds,
            "time_scale": plan.time_scale,
            "live": {
                "job_id": live.job_id,
                "state": live.state,
                "deadline_met": live.deadline_met,
                "finish_hours": _hours(plan, live.finish_ticks),
                "spot_hours": round(cost.spot_hours, 4),
                "on_demand_hours": round(cost.on_demand_hours, 4),
                "transfers": cost.transfers,
                "cost_usd": round(cost.cost_usd, 4),
                "normalized": round(cost.normalized, 4),
                "ledger_usd_compressed": round(cost.ledger_usd, 6),
                "attempts": [
                    {"pool": pool, "from_tick": round(a, 2), "to_tick": _round(b)}
                    for pool, a, b in live.spans
                ],
            },
            "predicted": _outcome(plan, self.prediction.respot),
            "references": references,
            "difference": round(self.difference, 4),
            "tolerance": round(self.tolerance, 4),
            "ok": self.ok,
            "verdict": self.verdict,
            "inconclusive": self.inconclusive,
            "explanations": self.explanations(),
        }

    def lines(self) -> list[str]:
        """The human report."""
        plan, live, cost, pred = self.plan, self.live, self.cost, self.prediction.respot
        out = [
            f"window: ticks {plan.start}..{plan.start + plan.window_ticks - 1} of "
            f"{plan.pool_set.source} (G = {plan.gap} s; 1 tick = {plan.tick_seconds} s real, "
            f"x{plan.time_scale:g})",
            f"job: C = {plan.job.work_seconds / 3600:g} h, D = "
            f"{plan.job.deadline_seconds / 3600:g} h, d = "
            f"{plan.job.changeover_seconds / 3600:g} h",
            *(f"  {e}" for e in plan.events()),
            "",
            f"{'':22}{'normalized':>11}{'$':>9}{'spot h':>8}{'OD h':>7}{'transfers':>10}  deadline",
            _row(
                "live (ledger)",
                cost.normalized,
                cost.cost_usd,
                cost.spot_hours,
                cost.on_demand_hours,
                cost.transfers,
                live.deadline_met,
            ),
            _row(
                "predicted (respot)",
                pred.normalized_cost,
                pred.cost,
                pred.spot_ticks * plan.gap / 3600,
                pred.on_demand_ticks * plan.gap / 3600,
                pred.transfers,
                not pred.missed,
            ),
        ]
        for name, o in self.prediction.outcomes.items():
            if name != "respot":
                out.append(f"  {name:20}{o.normalized_cost:11.3f}{o.cost:9.2f}")
        out.append(f"  {'omniscient':20}{self.prediction.omniscient:11.3f}")
        out += [
            "",
            "live attempts (ticks from the job's start): "
            + "; ".join(f"{p} {a:.1f}-{_fmt(b)}" for p, a, b in live.spans),
            "predicted placements per tick: " + " ".join(str(x) for x in pred.placements),
            "",
            f"live - predicted = {self.difference:+.3f} (tolerance {self.tolerance:.3f}): "
            + self.verdict
            + (f" ({self.inconclusive})" if self.inconclusive and not self.ok else ""),
            "expected sources of a difference:",
            *(f"  - {n}" for n in self.explanations()),
        ]
        return out


def compare(plan: ReplayPlan, live: LiveRun, prediction: Prediction, floor: float) -> Comparison:
    """The verdict of one replay."""
    return Comparison(
        plan=plan,
        live=live,
        cost=LiveCost.of(plan, live.attempts),
        prediction=prediction,
        tolerance=tolerance(plan, prediction.respot, floor),
    )


def _row(name: str, norm: float, usd: float, spot: float, od: float, moves: int, met: bool) -> str:
    return (
        f"  {name:20}{norm:11.3f}{usd:9.2f}{spot:8.2f}{od:7.2f}{moves:10d}  "
        f"{'met' if met else 'MISSED'}"
    )


def _outcome(plan: ReplayPlan, o: PoolsOutcome) -> dict[str, Any]:
    return {
        "normalized": round(o.normalized_cost, 4),
        "cost_usd": round(o.cost, 4),
        "spot_hours": o.spot_ticks * plan.gap / SECONDS_PER_HOUR,
        "on_demand_hours": o.on_demand_ticks * plan.gap / SECONDS_PER_HOUR,
        "transfers": o.transfers,
        "changeovers": o.changeovers,
        "missed": o.missed,
        "finish_hours": None if o.finish_seconds is None else o.finish_seconds / SECONDS_PER_HOUR,
        "placements": [str(x) for x in o.placements],
    }


def _hours(plan: ReplayPlan, ticks: float | None) -> float | None:
    return None if ticks is None else round(ticks * plan.gap / SECONDS_PER_HOUR, 4)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _fmt(value: float | None) -> str:
    return "open" if value is None else f"{value:.1f}"
