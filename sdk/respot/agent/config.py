"""The agent's configuration, read from its environment in one place."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from respot.agent.exceptions import AgentConfigError

ENV_BUCKET = "RESPOT_BUCKET"
ENV_AGENT_QUEUE_URL = "RESPOT_AGENT_QUEUE_URL"
# The agent queue's region when it is not the instance's (a satellite region's instances
# report to the home queue; docs/deploy.md, "Extra regions"). Unset: the queue URL's region.
ENV_AGENT_QUEUE_REGION = "RESPOT_AGENT_QUEUE_REGION"
ENV_WORK_DIR = "RESPOT_WORK_DIR"
ENV_HEARTBEAT = "RESPOT_HEARTBEAT_SECONDS"
ENV_IMDS_POLL = "RESPOT_IMDS_POLL_SECONDS"
ENV_HANDOFF_WAIT = "RESPOT_HANDOFF_WAIT_SECONDS"
ENV_SHUTDOWN = "RESPOT_SHUTDOWN"
ENV_LOG_GROUP = "RESPOT_LOG_GROUP"  # CloudWatch Logs group for the session's output; unset: none
ENV_GPU_SAMPLE = "RESPOT_GPU_SAMPLE_SECONDS"  # how often NVML is read (respot.agent.telemetry)
ENV_IMDS_ENDPOINT = "AWS_EC2_METADATA_SERVICE_ENDPOINT"
# The framework's Python (the AMI contract, docs/ami.md); unset: the agent's own interpreter.
ENV_FRAMEWORK_PYTHON = "RESPOT_FRAMEWORK_PYTHON"
# A directory standing for "/" (the local runtime's sandbox); unset on EC2.
ENV_ROOT = "RESPOT_ROOT"
# The function that vends the job's own credentials (respot.credentials); unset: the agent
# reaches the job's objects with the instance role (a satellite region's instances).
ENV_CREDENTIALS_FUNCTION = "RESPOT_CREDENTIALS_FUNCTION"

DEFAULT_IMDS_ENDPOINT = "http://169.254.169.254"
DEFAULT_WORK_DIR = "/var/lib/respot"

Shutdown = Literal["poweroff", "exit"]


@dataclass(frozen=True)
class AgentConfig:
    """Where the agent reports, where it works, and how often it looks."""

    bucket: str
    agent_queue_url: str
    region: str | None = None
    queue_region: str | None = None  # ENV_AGENT_QUEUE_REGION
    endpoint_url: str | None = None  # AWS_ENDPOINT_URL: the moto server locally
    imds_endpoint: str = DEFAULT_IMDS_ENDPOINT
    work_dir: Path = Path(DEFAULT_WORK_DIR)
    # A minute: the control plane writes the job record on each (bench.cost), and declares an
    # instance lost after 10 silent minutes.
    heartbeat_seconds: float = 60.0
    imds_poll_seconds: float = 2.0
    handoff_wait_seconds: float = 150.0
    shutdown: Shutdown = "exit"
    log_group: str | None = None
    framework_python: Path | None = None  # None: the agent's own interpreter (tests)
    root: Path = Path("/")
    gpu_sample_seconds: float = 10.0
    credentials_function: str | None = None  # ENV_CREDENTIALS_FUNCTION

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AgentConfig:
        """Read the configuration from `env` (default: the process environment)."""
        env = os.environ if env is None else env

        def need(name: str) -> str:
            value = env.get(name, "").strip()
            if not value:
                raise AgentConfigError(f"environment variable {name} is not set")
            return value

        def seconds(name: str, default: float) -> float:
            raw = env.get(name, "").strip()
            if not raw:
                return default
            try:
                value = float(raw)
            except ValueError:
                raise AgentConfigError(f"{name}={raw!r} is not a number of seconds") from None
            if value <= 0:
                raise AgentConfigError(f"{name} must be positive, not {raw!r}")
            return value

        shutdown = env.get(ENV_SHUTDOWN, "exit").strip() or "exit"
        if shutdown not in ("poweroff", "exit"):
            raise AgentConfigError(f"{ENV_SHUTDOWN} is 'poweroff' or 'exit', not {shutdown!r}")
        imds = env.get(ENV_IMDS_ENDPOINT, "").strip() or DEFAULT_IMDS_ENDPOINT
        if not imds.startswith(("http://", "https://")):
            raise AgentConfigError(f"{ENV_IMDS_ENDPOINT}={imds!r} is not an http(s) URL")
        root = Path(env.get(ENV_ROOT, "").strip() or "/")

        def rooted(path: str) -> Path:
            return root / path.lstrip("/")

        framework = env.get(ENV_FRAMEWORK_PYTHON, "").strip()
        if framework and not framework.startswith("/"):
            raise AgentConfigError(f"{ENV_FRAMEWORK_PYTHON}={framework!r} is not an absolute path")
        return cls(
            root=root,
            framework_python=rooted(framework) if framework else None,
            bucket=need(ENV_BUCKET),
            agent_queue_url=need(ENV_AGENT_QUEUE_URL),
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None,
            endpoint_url=env.get("AWS_ENDPOINT_URL") or None,
            queue_region=env.get(ENV_AGENT_QUEUE_REGION, "").strip() or None,
            imds_endpoint=imds.rstrip("/"),
            work_dir=Path(env.get(ENV_WORK_DIR) or rooted(DEFAULT_WORK_DIR)),
            heartbeat_seconds=seconds(ENV_HEARTBEAT, 60.0),
            imds_poll_seconds=seconds(ENV_IMDS_POLL, 2.0),
            handoff_wait_seconds=seconds(ENV_HANDOFF_WAIT, 150.0),
            shutdown="poweroff" if shutdown == "poweroff" else "exit",
            log_group=env.get(ENV_LOG_GROUP, "").strip() or None,
            credentials_function=env.get(ENV_CREDENTIALS_FUNCTION, "").strip() or None,
            gpu_sample_seconds=seconds(ENV_GPU_SAMPLE, 10.0),
        )
