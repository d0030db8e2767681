"""What the platform team chooses at deploy time: CDK context values, read and checked once.

Every key is optional; `docs/deploy.md` lists them with examples. Values come from `cdk.json`
(typed JSON) or from `cdk deploy -c key=value` (always a string), so list and mapping values
also accept JSON text, and lists accept comma-separated text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from respot.control.config import IdleGpusError, parse_idle_gpus, parse_launch_pacing
from respot.queue.settings import QueueSettingsError, parse_settings

# The PyTorch Deep Learning AMI (NVIDIA driver, CUDA, PyTorch in the Python at
# /opt/pytorch/bin/python). Public SSM parameter named as the DLAMI guide says ("Finding the
# ID of a DLAMI": /aws/service/deeplearning/ami/$architecture/$ami_type/latest/ami-id, the
# ami_type being the AMI name without "deep", "learning" and "ami"). docs/ami.md: the contract.
DEFAULT_AMI_PARAMETER = (
    "/aws/service/deeplearning/ami/x86_64/"
    "oss-nvidia-driver-gpu-pytorch-2.11-ubuntu-24.04/latest/ami-id"
)
# The Python that runs jobs on that AMI (where the framework lives); the agent's venv and
# every job's venv are made from it.
DEFAULT_FRAMEWORK_PYTHON = "/opt/pytorch/bin/python"
# Its version (the PyTorch DLAMIs on Ubuntu 24.04: 3.12): the agent package is built for it only.
DEFAULT_FRAMEWORK_PYTHON_VERSION = "3.12"
DEFAULT_INSTANCE_TYPES = ("g5.xlarge", "g4dn.xlarge")
DEFAULT_ROOT_VOLUME_GB = 200
DEFAULT_ROOT_DEVICE = "/dev/sda1"  # Ubuntu AMIs; Amazon Linux uses /dev/xvda
MAX_ROOT_VOLUME_GB = 16384  # the gp3 limit
# Extra regions one home stack takes: its control roles' satellite policies grow ~150
# characters a region and must stay under IAM's 6,144 per managed policy
# (tests/infra/test_iam_size.py synthesizes this many and checks every quota).
MAX_EXTRA_REGIONS = 16

CONTEXT_KEYS = (
    "stage",
    "vpc_id",
    "subnet_ids",
    "instance_types",
    "ami_id",
    "ami_parameter",
    "framework_python",
    "root_volume_gb",
    "root_device_name",
    "slack_channel",
    "slack_token_parameter",
    "allowed_publisher_role_arns",
    "admin_principal_arns",
    "data_bucket_arns",
    "on_demand_prices",
    "deployment_parameter",
    "alarm_topic_arn",
    "max_boot_failures",
    "allowed_instance_types",
    "extra_regions",
    "session_manager",
    "workspaces",
    "framework_python_version",
    "queue",
    "idle_gpus",
    "launch_pacing",
)

_TEXT_KEYS = {
    "stage",
    "vpc_id",
    "ami_id",
    "ami_parameter",
    "framework_python",
    "framework_python_version",
    "root_device_name",
    "slack_channel",
    "slack_token_parameter",
    "deployment_parameter",
    "alarm_topic_arn",
}
_LIST_KEYS = {
    "instance_types",
    "allowed_instance_types",
    "allowed_publisher_role_arns",
    "admin_principal_arns",
    "data_bucket_arns",
    "extra_regions",
}

_STAGE = re.compile(r"[A-Za-z][A-Za-z0-9-]{0,24}")
_SUBNET = re.compile(r"subnet-[0-9a-f]{8,17}")
_VPC = re.compile(r"vpc-[0-9a-f]{8,17}")
_AZ = re.compile(r"[a-z]{2}(-[a-z]+)+-\d[a-z]")
_AMI = re.compile(r"ami-[0-9a-f]{8,17}")
_INSTANCE_TYPE = re.compile(r"[a-z][a-z0-9-]*\.[a-z0-9-]+")
_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_ARN = re.compile(r"arn:aws[a-z-]*:\S+")
_PARAMETER = re.compile(r"/[A-Za-z0-9_./-]{1,1000}")
_ABS_PATH = re.compile(r"/[A-Za-z0-9_./+-]{1,255}")
_REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-\d")
_PY_VERSION = re.compile(r"3\.(1[1-9]|[2-9]\d)")


class DeploySettingsError(ValueError):
    """A context value is missing, malformed or inconsistent with another one."""


@dataclass(frozen=True)
class DeploySettings:
    """The deploy-time choices the stack is built from."""

    stage: str | None = None
    vpc_id: str | None = None
    subnets: Mapping[str, str] = field(default_factory=dict)  # subnet id -> availability zone
    instance_types: tuple[str, ...] = DEFAULT_INSTANCE_TYPES
    ami_id: str | None = None
    ami_parameter: str = DEFAULT_AMI_PARAMETER
    framework_python: str = DEFAULT_FRAMEWORK_PYTHON
    root_volume_gb: int = DEFAULT_ROOT_VOLUME_GB
    root_device_name: str = DEFAULT_ROOT_DEVICE
    slack_channel: str | None = None
    # The SSM SecureString parameter the platform team puts the Slack bot token in (CloudFormation
    # cannot create SecureString parameters: `aws ssm put-parameter`, docs/deploy.md).
    slack_token_parameter: str | None = None
    allowed_publisher_role_arns: tuple[str, ...] = ()
    # Principals that may cancel any job (a role ARN covers its sessions); owners cancel theirs.
    admin_principal_arns: tuple[str, ...] = ()
    data_bucket_arns: tuple[str, ...] = ()  # bucket ARNs (a /prefix narrows) or bucket names
    on_demand_prices: Mapping[str, float] = field(default_factory=dict)
    deployment_parameter: str | None = None
    alarm_topic_arn: str | None = None
    # Attempts in a row that never start training (broken boot) before the job fails.
    max_boot_failures: int = 3
    # Instance types jobs may use (IAM ec2:InstanceType and the submit check); empty: the
    # default instance_types are the only ones allowed.
    allowed_instance_types: tuple[str, ...] = ()
    # Regions with a satellite stack (infra/satellite.py): instances may run there, the
    # control plane stays in the home region. Empty: the one home stack, as before.
    extra_regions: tuple[str, ...] = ()
    # Shell access to instances through Session Manager (infra/constructs/session_manager.py):
    # the instance role gets the SSM Agent's session permissions; no inbound port either way.
    session_manager: bool = False
    # Interactive notebooks (`respot notebook`, docs/notebooks-platform.md): the instance role
    # gets the SSM Agent's session permissions (as with session_manager) and the researcher
    # policy a port-forwarding tunnel to their own instances only
    # (infra/constructs/workspaces.py). false: neither.
    workspaces: bool = True
    # The version of `framework_python`: the agent package is built for that Python only
    # (infra/bundling.py); the bootstrap names this setting if the AMI's differs.
    framework_python_version: str = DEFAULT_FRAMEWORK_PYTHON_VERSION
    # The team's queue (docs/queue.md): {"enabled": true, "researcher_gpus": 8, "queues":
    # {"serial": {"max_running": 1}}, ...}; an admin changes it without a deploy
    # (`respot queue --set-limits`). Empty: off (only `after:`/`queue:` jobs are held).
    queue: Mapping[str, Any] = field(default_factory=dict)
    # Idle GPUs (docs/queue.md): {"threshold_pct": 5, "period_minutes": 30, "action": "warn"}
    # ("stop": also checkpoint and stop the job). Empty: those defaults.
    idle_gpus: Mapping[str, Any] = field(default_factory=dict)
    # Launch pacing (docs/queue.md, "Launch pacing"): {"rate_per_second": 1, "burst": 10},
    # respot's launches per second for the whole account. Empty: those defaults.
    launch_pacing: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.stage is not None and not _STAGE.fullmatch(self.stage):
            raise DeploySettingsError(
                f"stage {self.stage!r}: use a letter then up to 24 letters, digits or '-'"
            )
        if (self.vpc_id is None) != (not self.subnets):
            raise DeploySettingsError(
                "give vpc_id and subnet_ids together, or neither (the stack then creates a VPC)"
            )
        if self.vpc_id is not None and not _VPC.fullmatch(self.vpc_id):
            raise DeploySettingsError(f"vpc_id {self.vpc_id!r} is not a VPC id (vpc-...)")
        for subnet_id, zone in self.subnets.items():
            if not _SUBNET.fullmatch(subnet_id) or not _AZ.fullmatch(zone):
                raise DeploySettingsError(
                    f"subnet_ids entry {subnet_id!r}: {zone!r} must map a subnet id to its "
                    'availability zone, e.g. {"subnet-0abc12345": "us-east-1a"}'
                )
        if not self.instance_types or not all(
            _INSTANCE_TYPE.fullmatch(t) for t in self.instance_types
        ):
            raise DeploySettingsError(
                f"instance_types {list(self.instance_types)!r}: give EC2 types such as g5.xlarge"
            )
        if not all(_INSTANCE_TYPE.fullmatch(t) for t in self.allowed_instance_types):
            raise DeploySettingsError(
                f"allowed_instance_types {list(self.allowed_instance_types)!r}: give EC2 types "
                "such as g5.xlarge"
            )
        outside = [t for t in self.instance_types if t not in self.allowed]
        if outside:
            raise DeploySettingsError(
                f"instance_types {outside} are not in allowed_instance_types "
                f"{list(self.allowed)}: the defaults must be allowed"
            )
        if self.ami_id is not None and not _AMI.fullmatch(self.ami_id):
            raise DeploySettingsError(f"ami_id {self.ami_id!r} is not an AMI id (ami-...)")
        if not _PARAMETER.fullmatch(self.ami_parameter):
            raise DeploySettingsError(f"ami_parameter {self.ami_parameter!r} is not an SSM name")
        if not _ABS_PATH.fullmatch(self.framework_python):
            raise DeploySettingsError(
                f"framework_python {self.framework_python!r}: give the absolute path of the "
                "AMI's framework Python, e.g. /opt/pytorch/bin/python"
            )
        if not _PY_VERSION.fullmatch(self.framework_python_version):
            raise DeploySettingsError(
                f"framework_python_version {self.framework_python_version!r}: give the AMI's "
                "framework Python as major.minor, 3.11 or newer (the PyTorch DLAMIs: 3.12)"
            )
        if not 8 <= self.root_volume_gb <= MAX_ROOT_VOLUME_GB:
            raise DeploySettingsError(
                f"root_volume_gb {self.root_volume_gb}: give 8..{MAX_ROOT_VOLUME_GB}"
            )
        if not self.root_device_name.startswith("/dev/"):
            raise DeploySettingsError(f"root_device_name {self.root_device_name!r}: /dev/...")
        for arn in self.allowed_publisher_role_arns:
            if not _ARN.fullmatch(arn) or ":iam::" not in arn:
                raise DeploySettingsError(f"allowed_publisher_role_arns: {arn!r} is not an IAM ARN")
        for arn in self.admin_principal_arns:
            if not _ARN.fullmatch(arn) or ":iam::" not in arn or "," in arn:
                raise DeploySettingsError(
                    f"admin_principal_arns: {arn!r} is not an IAM user or role ARN "
                    "(arn:aws:iam::<account>:role/<name>)"
                )
        for bucket in self.data_bucket_arns:
            if not (
                _BUCKET_NAME.fullmatch(bucket) or (_ARN.fullmatch(bucket) and ":s3:::" in bucket)
            ):
                raise DeploySettingsError(
                    f"data_bucket_arns: {bucket!r} is neither an S3 bucket ARN nor a bucket name"
                )
        if not 1 <= self.max_boot_failures <= 100:
            raise DeploySettingsError(
                f"max_boot_failures {self.max_boot_failures}: give 1..100 (default 3)"
            )
        for region in self.extra_regions:
            if not _REGION.fullmatch(region):
                raise DeploySettingsError(
                    f"extra_regions: {region!r} is not a region name; give e.g. "
                    "extra_regions=us-west-2,eu-west-1"
                )
        if len(self.extra_regions) > MAX_EXTRA_REGIONS:
            raise DeploySettingsError(
                f"extra_regions names {len(self.extra_regions)} regions; at most "
                f"{MAX_EXTRA_REGIONS} (the control roles' IAM policies are sized for that): "
                "keep the regions with the most spot capacity for your instance types"
            )
        if len(set(self.extra_regions)) != len(self.extra_regions):
            raise DeploySettingsError(
                f"extra_regions {list(self.extra_regions)!r} names a region twice"
            )
        if self.extra_regions and self.ami_id is not None:
            raise DeploySettingsError(
                "ami_id is one region's image id; with extra_regions give ami_parameter "
                "instead (a public SSM parameter each region resolves to its own image)"
            )
        try:
            parse_settings(dict(self.queue))
        except QueueSettingsError as exc:
            raise DeploySettingsError(f"queue: {exc}") from None
        try:
            parse_idle_gpus(self.idle_gpus)
        except IdleGpusError as exc:
            raise DeploySettingsError(str(exc)) from None
        try:
            parse_launch_pacing(dict(self.launch_pacing))
        except ValueError as exc:
            raise DeploySettingsError(str(exc)) from None
        if self.alarm_topic_arn is not None and ":sns:" not in self.alarm_topic_arn:
            raise DeploySettingsError(f"alarm_topic_arn {self.alarm_topic_arn!r}: an SNS ARN")
        for name, price in self.on_demand_prices.items():
            if not _INSTANCE_TYPE.fullmatch(name) or not price > 0:
                raise DeploySettingsError(
                    f"on_demand_prices {name!r}: {price!r}; map instance types to USD per hour"
                )
        if self.slack_token_parameter is not None and not _PARAMETER.fullmatch(
            self.slack_token_parameter
        ):
            raise DeploySettingsError(
                f"slack_token_parameter {self.slack_token_parameter!r}: an SSM name such as "
                "/respot/slack-token"
            )
        if self.deployment_parameter is not None and not _PARAMETER.fullmatch(
            self.deployment_parameter
        ):
            raise DeploySettingsError(
                f"deployment_parameter {self.deployment_parameter!r}: an SSM name such as "
                "/respot/deployment"
            )

    @property
    def allowed(self) -> tuple[str, ...]:
        """The instance types jobs may use: allowed_instance_types, else instance_types."""
        return self.allowed_instance_types or self.instance_types

    @property
    def stack_name(self) -> str:
        """`Respot`, or `Respot-<stage>` when a stage is given."""
        return f"Respot-{self.stage}" if self.stage else "Respot"

    @property
    def name_prefix(self) -> str:
        """The prefix of the few physical names respot fixes (parameters, policy)."""
        return f"respot/{self.stage}" if self.stage else "respot"

    @property
    def deployment_parameter_name(self) -> str:
        """Where the SDK finds this deployment."""
        return self.deployment_parameter or f"/{self.name_prefix}/deployment"

    @property
    def slack_token_parameter_name(self) -> str:
        """Where the functions read the Slack bot token (a SecureString, by name)."""
        return self.slack_token_parameter or f"/{self.name_prefix}/slack-token"

    @classmethod
    def from_context(cls, get: Callable[[str], Any]) -> DeploySettings:
        """Read every context key through `get` (e.g. `app.node.try_get_context`)."""
        raw = {key: value for key in CONTEXT_KEYS if (value := get(key)) not in (None, "")}
        values: dict[str, Any] = {}
        for key in _TEXT_KEYS & raw.keys():
            values[key] = str(raw[key])
        for key in _LIST_KEYS & raw.keys():
            values[key] = _strings(raw[key], key)
        if "subnet_ids" in raw:
            values["subnets"] = _subnets(raw["subnet_ids"])
        if "root_volume_gb" in raw:
            try:
                values["root_volume_gb"] = int(raw["root_volume_gb"])
            except (TypeError, ValueError) as exc:
                raise DeploySettingsError(
                    f"root_volume_gb {raw['root_volume_gb']!r} is not a number"
                ) from exc
        if "max_boot_failures" in raw:
            try:
                values["max_boot_failures"] = int(raw["max_boot_failures"])
            except (TypeError, ValueError) as exc:
                raise DeploySettingsError(
                    f"max_boot_failures {raw['max_boot_failures']!r} is not a number"
                ) from exc
        if "session_manager" in raw:
            values["session_manager"] = _flag(raw["session_manager"], "session_manager")
        if "workspaces" in raw:
            values["workspaces"] = _flag(raw["workspaces"], "workspaces")
        if "queue" in raw:
            values["queue"] = dict(_mapping(raw["queue"], "queue"))
        if "idle_gpus" in raw:
            values["idle_gpus"] = dict(_mapping(raw["idle_gpus"], "idle_gpus"))
        if "launch_pacing" in raw:
            values["launch_pacing"] = dict(_mapping(raw["launch_pacing"], "launch_pacing"))
        if "on_demand_prices" in raw:
            prices = _mapping(raw["on_demand_prices"], "on_demand_prices")
            try:
                values["on_demand_prices"] = {str(k): float(v) for k, v in prices.items()}
            except (TypeError, ValueError) as exc:
                raise DeploySettingsError(f"on_demand_prices: {exc}") from exc
        return cls(**values)


def _flag(value: Any, key: str) -> bool:
    """true/false from cdk.json (a JSON boolean) or `-c key=true` (text)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise DeploySettingsError(f"{key} {value!r}: give true or false")


def _json(value: str, key: str) -> Any:
    try:
        return json.loads(value)
    except ValueError as exc:
        raise DeploySettingsError(f"{key}: {value!r} is not valid JSON ({exc})") from exc


def _strings(value: Any, key: str) -> tuple[str, ...]:
    """A list from JSON, a JSON string of a list, or comma-separated text."""
    if isinstance(value, str):
        text = value.strip()
        value = _json(text, key) if text.startswith("[") else text.split(",")
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise DeploySettingsError(f"{key}: give a list of strings, got {value!r}")
    return tuple(v.strip() for v in value if v.strip())


def _mapping(value: Any, key: str) -> dict[str, Any]:
    if isinstance(value, str):
        value = _json(value, key)
    if not isinstance(value, dict):
        raise DeploySettingsError(f"{key}: give a JSON object, got {value!r}")
    return value


def _subnets(value: Any) -> dict[str, str]:
    """`{"subnet-...": "us-east-1a"}`: the placement policy needs each subnet's zone."""
    if isinstance(value, list | tuple) or (isinstance(value, str) and not value.strip()[:1] == "{"):
        raise DeploySettingsError(
            "subnet_ids must map each subnet id to its availability zone, e.g. "
            '{"subnet-0abc12345": "us-east-1a", "subnet-0def67890": "us-east-1b"}: '
            "spot capacity and prices are per zone"
        )
    return {str(k): str(v) for k, v in _mapping(value, "subnet_ids").items()}
