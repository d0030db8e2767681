"""Where to ask for capacity: the candidate pools of a job, and which market to buy from now."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable

from respot.core.job import JobRecord, Market, Placement


@dataclass(frozen=True)
class SubnetRef:
    """A subnet instances may be launched in, and its Availability Zone."""

    subnet_id: str
    availability_zone: str


@dataclass(frozen=True)
class ControlSettings:
    """The deployment's knobs that the core needs (read from the Lambda environment)."""

    subnets: tuple[SubnetRef, ...]
    default_instance_types: tuple[str, ...]
    # A REQUESTED attempt with no instance this long after its request is launched again.
    launch_timeout: timedelta = timedelta(minutes=3)
    # A RUNNING job whose agent is silent this long has lost its instance.
    heartbeat_timeout: timedelta = timedelta(minutes=10)
    # A STARTING job whose agent never reports within this long has a broken instance.
    boot_timeout: timedelta = timedelta(minutes=20)
    # Expected boot + restore + redo time of one instance change, before any is measured.
    changeover_estimate: timedelta = timedelta(minutes=6)
    # Heartbeats that change nothing material are written at most this often (liveness is
    # judged against heartbeat_timeout, four times as long).
    heartbeat_write_interval: timedelta = timedelta(minutes=2, seconds=30)
    # The deadline policy's tick: one reconcile period.
    policy_tick: timedelta = timedelta(minutes=1)
    # At most one "progress" timeline note (hence Slack reply) per job this often; 0: none.
    progress_note_interval: timedelta = timedelta(minutes=10)
    # This many attempts in a row whose instance never started training (a broken boot, an
    # instance that vanished before its agent reported) fail the job with the last reason.
    max_boot_failures: int = 3
    # The instance types the platform team allows (empty: no restriction); also in IAM.
    allowed_instance_types: tuple[str, ...] = ()
    on_demand_prices: dict[str, float] = field(default_factory=dict)
    extra: dict[str, str] = field(default_factory=dict)
    # The team's queue is on (stack setting `queue`): every submission is HELD until admitted
    # (respot.queue). Off, only a spec naming `after:` or `queue:` is held.
    admission: bool = False
    # Idle GPUs (issue 26): a RUNNING job whose GPUs' mean utilization stays below this many
    # percent for `idle_gpu_period` (the agent's NVML samples, one mean per heartbeat) gets
    # one warning in its timeline and Slack. No NVML (no samples): never idle. The stack
    # setting `idle_gpus` sets all three; `idle_gpu_action` "stop" also checkpoints and stops
    # the job (core.lifecycle.stops).
    idle_gpu_pct: float = 5.0
    idle_gpu_period: timedelta = timedelta(minutes=30)
    idle_gpu_action: str = "warn"


def disallowed_instance_types(requested: list[str] | None, allowed: tuple[str, ...]) -> str | None:
    """A clear problem line if `requested` names a type outside `allowed`, else None."""
    if not requested or not allowed:
        return None
    bad = [t for t in requested if t not in allowed]
    if not bad:
        return None
    return (
        f"instance_types: {', '.join(bad)} {'is' if len(bad) == 1 else 'are'} not allowed by "
        f"this deployment; choose from {', '.join(allowed)} (the platform team sets "
        "allowed_instance_types)"
    )


def candidates(job: JobRecord, market: Market, settings: ControlSettings) -> list[Placement]:
    """Every pool the job may use in `market`, best first: instance type preference, then zone."""
    spec = job.spec
    types = spec.instance_types or list(settings.default_instance_types)
    max_price = spec.max_spot_price if market is Market.SPOT else None
    return [
        Placement(
            market=market,
            instance_type=instance_type,
            subnet_id=subnet.subnet_id,
            availability_zone=subnet.availability_zone,
            max_price=max_price,
        )
        for instance_type in types
        for subnet in settings.subnets
    ]


@dataclass(frozen=True)
class MarketChoice:
    """What to buy now: a market, nothing yet (wait), or give up (fail) — with the reason."""

    market: Market | None
    reason: str
    fail: bool = False
    # The pools to ask, in order (empty: every candidate in the fixed order of `candidates`).
    pools: tuple[Placement, ...] = ()


class MarketPolicy(Protocol):
    """Chooses spot, on-demand or waiting for a job that needs capacity now."""

    def choose(self, job: JobRecord, now: datetime, settings: ControlSettings) -> MarketChoice:
        """The market to buy from now."""
        ...


@runtime_checkable
class SwitchPolicy(Protocol):
    """Moves a training job to the other market (a planned stop after a checkpoint)."""

    def switch_running(
        self, job: JobRecord, now: datetime, settings: ControlSettings
    ) -> MarketChoice | None:
        """The market to move to now, or None to stay."""
        ...


class SpotFirstPolicy:
    """Spot while it comes within the job's wait, then on-demand if the researcher allows it.

    Jobs with a deadline are handled by `respot.policy` through `DeadlinePolicy`; this rule is
    the researcher-visible behaviour for jobs without one.
    """

    def choose(self, job: JobRecord, now: datetime, settings: ControlSettings) -> MarketChoice:
        """Spot first; on-demand once the wait or the interruption limit is spent."""
        spec = job.spec
        if job.interruptions > spec.max_interruptions:
            if spec.on_demand_fallback:
                return MarketChoice(
                    Market.ON_DEMAND,
                    f"{job.interruptions} interruptions exceed max_interruptions="
                    f"{spec.max_interruptions}",
                )
            return MarketChoice(
                None,
                f"{job.interruptions} interruptions exceed max_interruptions="
                f"{spec.max_interruptions} and on_demand_fallback is off",
                fail=True,
            )
        if job.policy.get("market") == Market.ON_DEMAND.value:
            return MarketChoice(Market.ON_DEMAND, job.policy.get("market_reason", "on-demand"))
        waited = now - job.waiting_since if job.waiting_since else timedelta(0)
        if waited >= spec.max_spot_wait:
            minutes = int(spec.max_spot_wait.total_seconds() // 60)
            if spec.on_demand_fallback:
                return MarketChoice(
                    Market.ON_DEMAND, f"no spot capacity within max_spot_wait ({minutes} min)"
                )
            return MarketChoice(
                None,
                f"no spot capacity within max_spot_wait ({minutes} min) and on_demand_fallback "
                "is off",
                fail=True,
            )
        return MarketChoice(Market.SPOT, "spot first")


ON_DEMAND_ONLY = "market: on-demand (the job's spec): on-demand for every attempt, never spot"


class OnDemandPolicy:
    """A job whose spec says `market: on-demand`: on-demand from the first launch, and for
    every replacement (a lost instance, a boot that failed). Not a `SwitchPolicy`, so the
    tick never moves it to spot (`lifecycle.ticks`); with no spot attempt, no spot
    interruption can reach it. `lifecycle.dispatch` uses it for such a job whatever policy
    the control plane passes."""

    def choose(self, job: JobRecord, now: datetime, settings: ControlSettings) -> MarketChoice:
        """On-demand, always."""
        return MarketChoice(Market.ON_DEMAND, ON_DEMAND_ONLY)


def policy_for(job: JobRecord, policy: MarketPolicy) -> MarketPolicy:
    """The market policy that decides for `job`: its spec's fixed market, else `policy`."""
    return OnDemandPolicy() if job.spec.market == Market.ON_DEMAND.value else policy
