"""Configuration that reaches the control-plane Lambdas through their environment.

The stack sets these variables on every function (infra/) and the local runtime sets the
same ones; `ControlPlaneConfig.from_env` is the one place they are read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from respot.aws.pacing import Pacing
from respot.core.placement import ControlSettings, SubnetRef
from respot.exceptions import RespotError
from respot.queue.model import QueueLimits
from respot.queue.settings import QueueSettingsError, parse_settings

# Names of the environment variables (the stack and the local runtime import these).
ENV_TABLE = "RESPOT_TABLE"
ENV_BUCKET = "RESPOT_BUCKET"
ENV_LAUNCH_TEMPLATE_ID = "RESPOT_LAUNCH_TEMPLATE_ID"
ENV_LAUNCH_TEMPLATE_VERSION = "RESPOT_LAUNCH_TEMPLATE_VERSION"
ENV_SUBNETS = "RESPOT_SUBNETS"  # JSON: [{"subnet_id": "...", "availability_zone": "..."}]
ENV_INSTANCE_TYPES = "RESPOT_INSTANCE_TYPES"  # comma-separated, best first
ENV_AGENT_QUEUE_URL = "RESPOT_AGENT_QUEUE_URL"
ENV_NOTIFY_QUEUE_URL = "RESPOT_NOTIFY_QUEUE_URL"
ENV_DLQ_URL = "RESPOT_DLQ_URL"
# The FIFO queue of sweep news: the control plane tells the sweep Lambda what trial jobs do.
ENV_SWEEP_QUEUE_URL = "RESPOT_SWEEP_QUEUE_URL"
# The queue of the lifecycle's delayed work: a paced launch's look again when its token is due.
ENV_LAUNCH_RETRY_QUEUE_URL = "RESPOT_LAUNCH_RETRY_QUEUE_URL"
ENV_ON_DEMAND_PRICES = "RESPOT_ON_DEMAND_PRICES"  # JSON: {"g5.xlarge": 1.006}
ENV_HEARTBEAT_TIMEOUT = "RESPOT_HEARTBEAT_TIMEOUT_SECONDS"
ENV_BOOT_TIMEOUT = "RESPOT_BOOT_TIMEOUT_SECONDS"
ENV_LAUNCH_TIMEOUT = "RESPOT_LAUNCH_TIMEOUT_SECONDS"
ENV_POLICY_TICK = "RESPOT_POLICY_TICK_SECONDS"  # the reconcile period (the deadline policy's tick)
ENV_CHANGEOVER = "RESPOT_CHANGEOVER_SECONDS"  # expected cost of one instance change
# The name of the SSM SecureString parameter holding the Slack bot token (never its value).
ENV_SLACK_TOKEN_PARAMETER = "RESPOT_SLACK_TOKEN_PARAMETER"  # noqa: S105 - a variable name
ENV_SLACK_CHANNEL = "RESPOT_SLACK_CHANNEL"
# Where the notifier finds the Slack Web API (the local runtime's stand-in); unset on AWS.
ENV_SLACK_API_URL = "RESPOT_SLACK_API_URL"
# At most one progress note (and Slack reply) per job this often; 0 turns them off.
ENV_NOTIFY_PROGRESS_SECONDS = "RESPOT_NOTIFY_PROGRESS_SECONDS"
# The value of the respot:managed tag on this deployment's instances (the stack name): cleanup
# and the terminate permission are scoped to it, so two deployments never touch each other.
ENV_DEPLOYMENT_NAME = "RESPOT_DEPLOYMENT_NAME"
# The unique id (AROA...) of the instances' role: agent messages must carry the SQS SenderId
# "<that id>:<instance id>" of the instance they speak for. Unset (local runtime): no check.
ENV_AGENT_ROLE_ID = "RESPOT_AGENT_ROLE_ID"
# This many attempts in a row that never start training fail the job (default 3).
ENV_MAX_BOOT_FAILURES = "RESPOT_MAX_BOOT_FAILURES"
# Comma-separated instance types jobs may use (empty: any); IAM enforces the same list.
ENV_ALLOWED_INSTANCE_TYPES = "RESPOT_ALLOWED_INSTANCE_TYPES"
# Comma-separated data_bucket_arns (bucket names or S3 ARNs, a /prefix narrowing): what the
# instance role may read data from; the commands function refuses the rest (respot.spec.reach).
# Unset: not checked.
ENV_DATA_BUCKETS = "RESPOT_DATA_BUCKETS"
# Comma-separated regions with a satellite stack (docs/deploy.md, "Extra regions"), and the
# SSM parameter each of them holds (launch template, subnets, bucket, instance role id).
ENV_SATELLITE_REGIONS = "RESPOT_SATELLITE_REGIONS"
ENV_SATELLITE_PARAMETER = "RESPOT_SATELLITE_PARAMETER"
# The team's queue (JSON, respot.queue.settings): {"enabled": true, "researcher_gpus": 8, ...}
ENV_QUEUE = "RESPOT_QUEUE"
# Launch pacing (JSON, `parse_launch_pacing`): {"rate_per_second": 1, "burst": 10}
ENV_LAUNCH_PACING = "RESPOT_LAUNCH_PACING"
# Idle GPUs (JSON, `parse_idle_gpus`): {"threshold_pct": 5, "period_minutes": 30, "action": "warn"}
ENV_IDLE_GPUS = "RESPOT_IDLE_GPUS"
IDLE_GPU_ACTIONS = ("warn", "stop")
_IDLE_KEYS = ("threshold_pct", "period_minutes", "action")


class ConfigError(RespotError):
    """A required environment variable is missing or malformed."""


class IdleGpusError(ValueError):
    """An `idle_gpus` setting that cannot be used; the message names the field and the fix."""


@dataclass(frozen=True)
class IdleGpus:
    """The stack setting `idle_gpus` (docs/queue.md, "Idle GPUs"): a RUNNING job whose GPUs'
    mean utilization stays below `threshold_pct` for `period` gets a warning (`warn`), or is
    also checkpointed and stopped (`stop`)."""

    threshold_pct: float = 5.0
    period: timedelta = timedelta(minutes=30)
    action: str = "warn"


def parse_idle_gpus(data: Mapping[str, Any] | None) -> IdleGpus:
    """`IdleGpus` from the setting's JSON object; `IdleGpusError` naming the field if bad."""
    if data is None:
        return IdleGpus()
    if not isinstance(data, Mapping):
        raise IdleGpusError(
            'idle_gpus: give an object, e.g. {"threshold_pct": 5, "period_minutes": 30, '
            '"action": "warn"}'
        )
    unknown = sorted(str(k) for k in data if k not in _IDLE_KEYS)
    if unknown:
        raise IdleGpusError(
            f"idle_gpus: unknown field(s) {', '.join(unknown)}; known: {', '.join(_IDLE_KEYS)}"
        )
    default = IdleGpus()
    pct = data.get("threshold_pct", default.threshold_pct)
    if isinstance(pct, bool) or not isinstance(pct, int | float) or not 0 < pct <= 100:
        raise IdleGpusError(
            f"idle_gpus.threshold_pct: {pct!r} is not a percentage above 0 and at most 100 "
            "(GPU utilization below it counts as idle; default 5)"
        )
    minutes = data.get("period_minutes", default.period.total_seconds() / 60)
    if (
        isinstance(minutes, bool)
        or not isinstance(minutes, int | float)
        or not 1 <= minutes <= 10080
    ):
        raise IdleGpusError(
            f"idle_gpus.period_minutes: {minutes!r} is not a number of minutes from 1 to 10080 "
            "(a week; how long GPUs stay idle before the action; default 30)"
        )
    action = data.get("action", default.action)
    if not isinstance(action, str) or action not in IDLE_GPU_ACTIONS:
        raise IdleGpusError(
            f"idle_gpus.action: {action!r} is not warn or stop (warn: a Slack warning; stop: "
            "also checkpoint and stop the job)"
        )
    return IdleGpus(float(pct), timedelta(minutes=float(minutes)), action)


@dataclass(frozen=True)
class ControlPlaneConfig:
    """Everything a control-plane handler needs to know about its deployment."""

    table_name: str
    bucket: str
    launch_template_id: str
    launch_template_version: str
    subnets: tuple[SubnetRef, ...]
    default_instance_types: tuple[str, ...]
    agent_queue_url: str
    notify_queue_url: str | None = None
    dlq_url: str | None = None
    sweep_queue_url: str | None = None
    launch_retry_queue_url: str | None = None  # ENV_LAUNCH_RETRY_QUEUE_URL
    on_demand_prices: dict[str, float] = field(default_factory=dict)
    heartbeat_timeout: timedelta = timedelta(minutes=10)
    boot_timeout: timedelta = timedelta(minutes=20)
    launch_timeout: timedelta = timedelta(minutes=3)
    progress_note_interval: timedelta = timedelta(minutes=10)
    policy_tick: timedelta = timedelta(minutes=1)
    changeover_estimate: timedelta = timedelta(minutes=6)
    deployment_name: str = "respot"
    max_boot_failures: int = 3
    allowed_instance_types: tuple[str, ...] = ()
    # Satellite regions (ENV_SATELLITE_REGIONS) and the parameter each one publishes.
    satellite_regions: tuple[str, ...] = ()
    satellite_parameter: str = "/respot/satellite"
    # The stack setting `queue` (respot.queue.settings); an admin's change in the ledger wins.
    queue: dict[str, Any] = field(default_factory=dict)
    launch_pacing: Pacing = field(default_factory=Pacing)  # aws.pacing; docs/queue.md
    # The stack setting `idle_gpus` (`parse_idle_gpus`), checked when read.
    idle_gpus: IdleGpus = field(default_factory=IdleGpus)

    def queue_limits(self) -> QueueLimits:
        """The stack's queue limits (checked when the configuration was read)."""
        return parse_settings(self.queue)[1]

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ControlPlaneConfig:
        """Read the configuration from `env` (default: the process environment)."""
        env = os.environ if env is None else env

        def need(name: str) -> str:
            value = env.get(name)
            if not value:
                raise ConfigError(f"environment variable {name} is not set")
            return value

        try:
            subnets = tuple(
                SubnetRef(s["subnet_id"], s["availability_zone"])
                for s in json.loads(need(ENV_SUBNETS))
            )
            prices = {
                k: float(v) for k, v in json.loads(env.get(ENV_ON_DEMAND_PRICES) or "{}").items()
            }
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(
                f"{ENV_SUBNETS} or {ENV_ON_DEMAND_PRICES} is malformed: {exc}"
            ) from exc
        types = tuple(t.strip() for t in need(ENV_INSTANCE_TYPES).split(",") if t.strip())
        try:
            max_boot_failures = int(env.get(ENV_MAX_BOOT_FAILURES) or 3)
        except ValueError as exc:
            raise ConfigError(f"{ENV_MAX_BOOT_FAILURES} is not a whole number: {exc}") from exc
        if max_boot_failures < 1:
            raise ConfigError(f"{ENV_MAX_BOOT_FAILURES} must be at least 1")

        def seconds(name: str, default: timedelta) -> timedelta:
            raw = env.get(name)
            return timedelta(seconds=float(raw)) if raw else default

        return cls(
            table_name=need(ENV_TABLE),
            bucket=need(ENV_BUCKET),
            launch_template_id=need(ENV_LAUNCH_TEMPLATE_ID),
            launch_template_version=env.get(ENV_LAUNCH_TEMPLATE_VERSION) or "$Latest",
            subnets=subnets,
            default_instance_types=types,
            agent_queue_url=need(ENV_AGENT_QUEUE_URL),
            notify_queue_url=env.get(ENV_NOTIFY_QUEUE_URL) or None,
            dlq_url=env.get(ENV_DLQ_URL) or None,
            sweep_queue_url=env.get(ENV_SWEEP_QUEUE_URL) or None,
            launch_retry_queue_url=env.get(ENV_LAUNCH_RETRY_QUEUE_URL) or None,
            on_demand_prices=prices,
            heartbeat_timeout=seconds(ENV_HEARTBEAT_TIMEOUT, timedelta(minutes=10)),
            boot_timeout=seconds(ENV_BOOT_TIMEOUT, timedelta(minutes=20)),
            launch_timeout=seconds(ENV_LAUNCH_TIMEOUT, timedelta(minutes=3)),
            policy_tick=seconds(ENV_POLICY_TICK, timedelta(minutes=1)),
            changeover_estimate=seconds(ENV_CHANGEOVER, timedelta(minutes=6)),
            progress_note_interval=seconds(ENV_NOTIFY_PROGRESS_SECONDS, timedelta(minutes=10)),
            deployment_name=env.get(ENV_DEPLOYMENT_NAME) or "respot",
            max_boot_failures=max_boot_failures,
            allowed_instance_types=tuple(
                t.strip()
                for t in (env.get(ENV_ALLOWED_INSTANCE_TYPES) or "").split(",")
                if t.strip()
            ),
            satellite_regions=tuple(
                r.strip() for r in (env.get(ENV_SATELLITE_REGIONS) or "").split(",") if r.strip()
            ),
            satellite_parameter=env.get(ENV_SATELLITE_PARAMETER) or "/respot/satellite",
            queue=_queue_settings(env.get(ENV_QUEUE)),
            launch_pacing=_launch_pacing(env.get(ENV_LAUNCH_PACING)),
            idle_gpus=_idle_gpus(env.get(ENV_IDLE_GPUS)),
        )

    def settings(self) -> ControlSettings:
        """The part of the configuration the pure core uses."""
        return ControlSettings(
            subnets=self.subnets,
            default_instance_types=self.default_instance_types,
            launch_timeout=self.launch_timeout,
            policy_tick=self.policy_tick,
            heartbeat_write_interval=self.heartbeat_timeout / 4,
            changeover_estimate=self.changeover_estimate,
            heartbeat_timeout=self.heartbeat_timeout,
            boot_timeout=self.boot_timeout,
            progress_note_interval=self.progress_note_interval,
            max_boot_failures=self.max_boot_failures,
            allowed_instance_types=self.allowed_instance_types,
            on_demand_prices=dict(self.on_demand_prices),
            admission=parse_settings(self.queue)[0],
            idle_gpu_pct=self.idle_gpus.threshold_pct,
            idle_gpu_period=self.idle_gpus.period,
            idle_gpu_action=self.idle_gpus.action,
        )


def parse_launch_pacing(data: Mapping[str, Any] | None) -> Pacing:
    """`Pacing` from the stack setting `launch_pacing`; `ValueError` naming the field."""
    if not data:
        return Pacing()
    if not isinstance(data, Mapping):
        raise ValueError('launch_pacing: give an object, e.g. {"rate_per_second": 1, "burst": 10}')
    unknown = sorted(str(k) for k in data if k not in ("rate_per_second", "burst"))
    if unknown:
        raise ValueError(
            f"launch_pacing: unknown field(s) {', '.join(unknown)}; known: rate_per_second, burst"
        )
    rate, burst = data.get("rate_per_second", Pacing.rate_per_second), data.get("burst")
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0.01 <= rate <= 100:
        raise ValueError(
            f"launch_pacing.rate_per_second {rate!r}: give launches per second, 0.01..100 "
            "(default 1: half of EC2's RunInstances refill of 2 instances a second)"
        )
    if burst is None:
        burst = Pacing.burst
    if isinstance(burst, bool) or not isinstance(burst, int) or not 1 <= burst <= 1000:
        raise ValueError(f"launch_pacing.burst {burst!r}: give a whole number 1..1000 (default 10)")
    return Pacing(rate_per_second=float(rate), burst=burst)


def _launch_pacing(raw: str | None) -> Pacing:
    try:
        return parse_launch_pacing(json.loads(raw) if raw else None)
    except ValueError as exc:
        raise ConfigError(f"{ENV_LAUNCH_PACING}: {exc}") from None


def _queue_settings(raw: str | None) -> dict[str, Any]:
    """The queue settings' JSON object, checked (`ConfigError` naming the field)."""
    if not raw:
        return {}
    try:
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise QueueSettingsError("give a JSON object")
        parse_settings(data)
    except (ValueError, QueueSettingsError) as exc:
        raise ConfigError(f"{ENV_QUEUE}: {exc}") from None
    return data


def _idle_gpus(raw: str | None) -> IdleGpus:
    """The idle_gpus setting's JSON object, checked (`ConfigError` naming the field)."""
    if not raw:
        return IdleGpus()
    try:
        return parse_idle_gpus(json.loads(raw))
    except (ValueError, IdleGpusError) as exc:
        raise ConfigError(f"{ENV_IDLE_GPUS}: {exc}") from None


@dataclass(frozen=True)
class NotifyConfig:
    """What the `notify` Lambda needs: the job table, the Slack token's parameter, the channel."""

    table_name: str
    slack_token_parameter: str | None = None
    slack_channel: str | None = None
    slack_api_url: str | None = None
    on_demand_prices: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> NotifyConfig:
        """Read the configuration from `env` (default: the process environment)."""
        env = os.environ if env is None else env
        table = env.get(ENV_TABLE)
        if not table:
            raise ConfigError(f"environment variable {ENV_TABLE} is not set")
        try:
            prices = {
                k: float(v) for k, v in json.loads(env.get(ENV_ON_DEMAND_PRICES) or "{}").items()
            }
        except (ValueError, TypeError, AttributeError) as exc:
            raise ConfigError(f"{ENV_ON_DEMAND_PRICES} is malformed: {exc}") from exc
        return cls(
            table_name=table,
            slack_token_parameter=env.get(ENV_SLACK_TOKEN_PARAMETER) or None,
            slack_channel=env.get(ENV_SLACK_CHANNEL) or None,
            slack_api_url=env.get(ENV_SLACK_API_URL) or None,
            on_demand_prices=prices,
        )
