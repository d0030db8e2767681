"""What a researcher asks for: `TrainingEnvVar` and `DataSourceEnvVar`, validated on the laptop.

Everything here is checked before anything is published or spent. Errors name the field and
say how to fix it (see `validate_spec`). The JSON form is versioned by `schema_version`.
"""

from __future__ import annotations

import difflib
import keyword
import math
import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from respot.exceptions import SpecError
from respot.spec.jobid import is_job_id

SCHEMA_VERSION: Literal[1] = 1

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(d|h|m|s)", re.IGNORECASE)
_ISO_DURATION = re.compile(
    r"^P(?:(?P<d>\d+(?:\.\d+)?)D)?(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?(?:(?P<m>\d+(?:\.\d+)?)M)?"
    r"(?:(?P<s>\d+(?:\.\d+)?)S)?)?",
    re.IGNORECASE,
)
_UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
MAX_DURATION_SECONDS = 366 * 86400


def parse_duration(value: Any) -> timedelta:
    """Read a duration: seconds, "90m", "4h", "1h30m", "2d", ISO "PT4H" or a timedelta."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or text such as '90m' or '4h'")
    elif isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"\d+(?:\.\d+)?", text):
            seconds = float(text)
        elif m := _ISO_DURATION.fullmatch(text):
            seconds = sum(float(m.group(u) or 0) * _UNIT_SECONDS[u] for u in "dhms")
            if not any(m.group(u) for u in "dhms"):
                raise ValueError(f"{value!r} is an empty ISO-8601 duration; write e.g. 'PT4H'")
        else:
            parts = _DURATION_PART.findall(text)
            if not parts or _DURATION_PART.sub("", text).strip():
                raise ValueError(
                    f"{value!r} is not a duration; write e.g. '45m', '4h', '1h30m', '2d' or seconds"
                )
            seconds = sum(float(n) * _UNIT_SECONDS[u.lower()] for n, u in parts)
    else:
        raise ValueError("a duration is a number of seconds or text such as '90m' or '4h'")
    if not seconds > 0:
        raise ValueError("a duration must be positive")
    if seconds > MAX_DURATION_SECONDS:
        raise ValueError("a duration must be at most 366 days; write e.g. '30d'")
    return timedelta(seconds=seconds)


def _serialize_duration(value: timedelta) -> float:
    seconds = value.total_seconds()
    return int(seconds) if seconds == int(seconds) else seconds


Duration = Annotated[
    timedelta,
    BeforeValidator(parse_duration),
    PlainSerializer(_serialize_duration, return_type=int | float, when_used="json"),
]


def parse_deadline(value: Any) -> datetime:
    """Read a deadline: an ISO-8601 time with a zone, or "+48h" meaning that long from now."""
    if isinstance(value, str) and value.strip().startswith("+"):
        return datetime.now(UTC) + parse_duration(value.strip()[1:])
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(
                f"{value!r} is not a time; write ISO-8601 with a zone, e.g. "
                "'2026-11-27T09:00:00+01:00', or a delay such as '+48h'"
            ) from None
    if not isinstance(value, datetime):
        raise ValueError("a deadline is an ISO-8601 time with a zone, or a delay such as '+48h'")
    if value.tzinfo is None:
        raise ValueError(
            "the deadline has no time zone, so it is ambiguous; add one, e.g. '+00:00' or 'Z'"
        )
    return value.astimezone(UTC)


Deadline = Annotated[datetime, BeforeValidator(parse_deadline)]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_QUEUE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
MAX_AFTER = 20
_ENTRY_POINT = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")
# A notebook, relative to source_dir: plain names, '/' between them, no '..', no leading '/'.
_NOTEBOOK = re.compile(r"(?:[\w][\w .-]*/)*[\w][\w .-]*\.ipynb")
_INSTANCE_TYPE = re.compile(r"[a-z][a-z0-9-]*\.[a-z0-9-]+")
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HPARAM_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,127}")
_TAG_CHARS = re.compile(r"[\w .:/=+\-@]*", re.UNICODE)
# Keys as EC2 allows them when tags are exposed in instance metadata (respot's launch template
# sets InstanceMetadataTags): ASCII letters, digits and + - = . , _ : @; no spaces or '/'; not
# only '.', '..' or '_index'. Others fail the launch ("Work with instance tags in instance
# metadata", EC2 User Guide).
_TAG_KEY = re.compile(r"[A-Za-z0-9+\-=.,_:@]{1,128}", re.ASCII)
_TAG_KEY_NOT = re.compile(r"[^A-Za-z0-9+\-=.,_:@]", re.ASCII)
_TAG_KEY_RESERVED = (".", "..", "_index")
_IMAGE = re.compile(
    r"^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*"
    r"(:[\w][\w.-]{0,127})?(@sha256:[a-f0-9]{64})?$"
)
_S3_URI = re.compile(r"s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(?P<key>.*))?")
_SECRET_ARN = re.compile(
    r"arn:aws[a-z-]*:secretsmanager:[a-z]{2}(-[a-z]+)+-\d:\d{12}:secret:[A-Za-z0-9/_+=.@-]{1,512}"
)
_SLACK_CHANNEL = re.compile(r"(#[a-z0-9][a-z0-9_-]{0,79}|[CGD][A-Z0-9]{6,})")
RESERVED_ENV_PREFIXES = ("RESPOT_", "AWS_")
RESERVED_TAG_PREFIXES = ("aws:", "respot:")
MAX_JSON_INT = 2**63 - 1  # hyperparameter integers: what 64-bit JSON readers keep exactly
MAX_TAGS = 40  # EC2 allows 50 per resource; respot adds its own few.
MAX_COMMAND_ARGS = 256  # a command job's argv (docs/commands.md)
MAX_COMMAND_CHARS = 16_384
STOP_SIGNALS = ("SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2", "SIGHUP")


class DataSourceEnvVar(BaseModel):
    """One dataset to download onto the instance before training: an S3 URI and where to put it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    s3_uri: str = Field(
        description="s3://bucket/key for one object, or s3://bucket/prefix/ for many"
    )
    local_path: str = Field(description="path under the session's data_dir, e.g. 'digits'")

    @field_validator("s3_uri")
    @classmethod
    def _check_uri(cls, value: str) -> str:
        if not _S3_URI.fullmatch(value):
            raise ValueError(
                f"{value!r} is not an S3 URI; write s3://bucket/key or s3://bucket/prefix/"
            )
        return value

    @field_validator("local_path")
    @classmethod
    def _check_local_path(cls, value: str) -> str:
        parts = value.replace("\\", "/").split("/")
        if not value or value.startswith("/") or ".." in parts or "\x00" in value:
            raise ValueError(
                f"{value!r} must be a relative path inside data_dir without '..', e.g. 'digits'"
            )
        return value

    @property
    def bucket(self) -> str:
        """The bucket part of the URI."""
        m = _S3_URI.fullmatch(self.s3_uri)
        assert m is not None
        return m.group("bucket")

    @property
    def key(self) -> str:
        """The key or prefix part of the URI (may be empty: the whole bucket)."""
        m = _S3_URI.fullmatch(self.s3_uri)
        assert m is not None
        return m.group("key") or ""


class TrainingEnvVar(BaseModel):
    """A training job as the researcher describes it: what to run, where, until when, for how much.

    Only `name` and what to run (`command`, or `entry_point` and/or `image`) are required.
    Everything else has a default that suits a first run.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    schema_version: Literal[1] = SCHEMA_VERSION
    name: str = Field(description="a short name for the job: letters, digits, '.', '_', '-'")
    entry_point: str | None = Field(
        default=None,
        description="'package.module:SessionClass', a respot.TrainingSession subclass; or a "
        "notebook in source_dir, 'train.ipynb', run by Papermill (hyperparameters: its parameters)",
    )
    command: list[str] | None = Field(
        default=None,
        description="run this argv in source_dir instead of a session, e.g. "
        "['python', 'train.py', '--epochs', '3'] (docs/commands.md); not with entry_point",
    )
    stop_signal: str | None = Field(
        default=None,
        description="a command job's process group gets this signal on the notice "
        "(SIGTERM when unset; SIGINT, SIGUSR1, SIGUSR2, SIGHUP)",
    )
    image: str | None = Field(default=None, description="container image to run the session in")
    source_dir: str | None = Field(
        default=None, description="local directory with the training code; shipped with the job"
    )
    requirements: list[str] | str | None = Field(
        default=None,
        description="extra packages: a list of requirements, or a requirements file in source_dir",
    )
    processes_per_node: int | Literal["auto"] | None = Field(
        default=None,
        description="run the session under torchrun with this many processes ('auto': one per GPU)",
    )
    hyperparameters: dict[str, Any] = Field(default_factory=dict)
    environment: dict[str, str] = Field(default_factory=dict)
    secrets: dict[str, str] = Field(
        default_factory=dict,
        description="{ENV_NAME: Secrets Manager ARN}: read on the instance, never stored",
    )
    instance_types: list[str] | None = Field(
        default=None, description="EC2 instance types in order of preference, e.g. ['g5.xlarge']"
    )
    max_spot_price: float | None = Field(default=None, description="USD per instance-hour")
    data: list[DataSourceEnvVar] = Field(default_factory=list)
    deadline: Deadline | None = None
    max_runtime: Duration | None = None
    estimated_runtime: Duration | None = Field(
        default=None,
        description="compute the job needs on one instance; sharpens the deadline plan",
    )
    max_interruptions: int = Field(default=20, ge=0, le=1000)
    on_demand_fallback: bool = Field(
        default=True, description="use on-demand when spot cannot meet the deadline or the wait"
    )
    max_spot_wait: Duration = Field(default=timedelta(minutes=20))
    market: Literal["spot", "on-demand"] = Field(
        default="spot",
        description="'spot': spot first, on-demand only by the fallback rules (max_spot_wait, "
        "max_interruptions, the deadline); 'on-demand': on-demand from the first launch and "
        "for every replacement, never moved to spot",
    )
    seed: int = Field(default=0, ge=0, le=2**32 - 1)
    tags: dict[str, str] = Field(default_factory=dict)
    slack_channel: str | None = None
    checkpoint_keep: int = Field(default=3, ge=1, le=100)
    warm_start: bool = Field(
        default=True,
        description="a replacement imports the code and calls prepare() before it restores, "
        "while the interrupted instance trains on; false: tell the session at the notice and "
        "start the replacement's session only after the restore",
    )
    budget_usd: float | None = Field(default=None, gt=0)
    # The team's queue (docs/queue.md): order among the researcher's own jobs, the jobs this
    # one starts after, and the named queue it runs in (the platform team names them).
    priority: Literal["low", "normal", "high"] = Field(
        default="normal", description="order among your own queued jobs: low, normal or high"
    )
    after: list[str] = Field(
        default_factory=list,
        description="job ids this job starts after (it fails if one of them fails)",
    )
    queue: str | None = Field(
        default=None, description="a named queue of this deployment (`respot queue` lists them)"
    )
    restore_from: str | None = Field(
        default=None,
        description="a job id of yours: this job starts from that job's newest checkpoint, "
        "copied into this job's prefix by the control plane before the first launch (how "
        "`respot notebook start` continues a stopped workspace)",
    )

    def __init__(self, **data: Any) -> None:
        # Constructed by hand on a laptop: report problems the same way validate_spec does.
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise SpecError(describe_validation_error(exc)) from None

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not _NAME.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a job name; use 1-64 letters, digits, '.', '_' or '-', "
                "starting with a letter or digit, e.g. 'digits-mlp'"
            )
        return value

    @field_validator("restore_from")
    @classmethod
    def _check_restore_from(cls, value: str | None) -> str | None:
        if value is not None and not is_job_id(value):
            raise ValueError(
                f"{str(value)[:120]!r} is not a job id: lowercase letters, digits and '-', "
                "as `respot ls` shows them"
            )
        return value

    @field_validator("after")
    @classmethod
    def _check_after(cls, value: list[str]) -> list[str]:
        if len(value) > MAX_AFTER:
            raise ValueError(
                f"{len(value)} jobs; at most {MAX_AFTER} "
                "(chain them: each job names the one before)"
            )
        for i, job_id in enumerate(value):
            if not is_job_id(job_id):
                raise ValueError(
                    f"item {i} ({str(job_id)[:120]!r}) is not a job id: lowercase letters, "
                    "digits and '-', as `respot ls` shows them"
                )
        if len(set(value)) != len(value):
            raise ValueError("a job id is named twice; name each job once")
        return value

    @field_validator("queue")
    @classmethod
    def _check_queue(cls, value: str | None) -> str | None:
        if value is not None and not _QUEUE.fullmatch(value):
            raise ValueError(
                f"{value[:80]!r} is not a queue name: 1-64 lowercase letters, digits, '-' and "
                "'_' (`respot queue` lists this deployment's queues)"
            )
        return value

    @field_validator("entry_point")
    @classmethod
    def _check_entry_point(cls, value: str | None) -> str | None:
        if value is None or _ENTRY_POINT.fullmatch(value):
            return value
        if value.endswith(".ipynb"):
            if not _NOTEBOOK.fullmatch(value) or ".." in value.split("/"):
                raise ValueError(
                    f"{value!r} is not a notebook path inside source_dir; write it relative "
                    "to source_dir with '/' between names and no '..', e.g. 'notebooks/train.ipynb'"
                )
            return value
        raise ValueError(
            f"{value!r} is not an entry point; write 'package.module:SessionClass', "
            "e.g. 'digits.train:DigitsSession', or a notebook in source_dir, e.g. 'train.ipynb'"
        )

    @field_validator("command", mode="before")
    @classmethod
    def _command_numbers_as_text(cls, value: Any) -> Any:
        # A job file's `[python, train.py, --epochs, 3]`: YAML reads 3 as a number.
        if isinstance(value, list | tuple):
            return [
                str(a) if isinstance(a, int | float) and not isinstance(a, bool) else a
                for a in value
            ]
        return value

    @field_validator("command")
    @classmethod
    def _check_command(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        if not value:
            raise ValueError(
                "give the program and its arguments as a list, e.g. ['python', 'train.py'], "
                "or leave command out"
            )
        if len(value) > MAX_COMMAND_ARGS:
            raise ValueError(
                f"{len(value)} arguments; at most {MAX_COMMAND_ARGS} (put long option lists "
                "in a config file in source_dir)"
            )
        if sum(len(a) for a in value) > MAX_COMMAND_CHARS:
            raise ValueError(f"the command is longer than {MAX_COMMAND_CHARS} characters in all")
        for i, arg in enumerate(value):
            if not isinstance(arg, str):
                raise ValueError(f"argument {i} is not text; write every argument as a string")
            if "\x00" in arg:
                raise ValueError(f"argument {i} contains a NUL byte, which no process accepts")
        if not value[0].strip():
            raise ValueError("the program (the first item) is empty; e.g. 'python'")
        return value

    @field_validator("stop_signal")
    @classmethod
    def _check_stop_signal(cls, value: str | None) -> str | None:
        if value is None:
            return None
        name = value.strip().upper()
        name = name if name.startswith("SIG") else f"SIG{name}"
        if name not in STOP_SIGNALS:
            raise ValueError(
                f"{value!r} is not a stop signal respot sends; choose one of "
                f"{', '.join(STOP_SIGNALS)}"
            )
        return name

    @field_validator("image")
    @classmethod
    def _check_image(cls, value: str | None) -> str | None:
        if value is not None and not _IMAGE.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a container image reference; write e.g. "
                "'123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1.4' or 'repo/name@sha256:...'"
            )
        return value

    @field_validator("requirements")
    @classmethod
    def _check_requirements(cls, value: list[str] | str | None) -> list[str] | str | None:
        from respot.spec.requirements import MAX_REQUIREMENTS, check_requirement

        if isinstance(value, list):
            if len(value) > MAX_REQUIREMENTS:
                raise ValueError(f"at most {MAX_REQUIREMENTS} requirements")
            return [check_requirement(item) for item in value]
        if isinstance(value, str):
            parts = value.replace("\\", "/").split("/")
            if value.startswith("/") or ".." in parts or not value.strip() or "\x00" in value:
                raise ValueError(
                    f"{value!r}: give the requirements file's path inside source_dir, "
                    "e.g. 'requirements.txt', or a list of requirements"
                )
        return value

    @field_validator("processes_per_node")
    @classmethod
    def _check_processes(cls, value: int | str | None) -> int | str | None:
        if isinstance(value, int) and not 1 <= value <= 64:
            raise ValueError("give 1..64 processes, or 'auto' (one per GPU of the instance)")
        return value

    @field_validator("hyperparameters")
    @classmethod
    def _check_hyperparameters(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        entry_point = info.data.get("entry_point")
        notebook = isinstance(entry_point, str) and entry_point.endswith(".ipynb")
        for key, item in value.items():
            if not _HPARAM_KEY.fullmatch(key):
                raise ValueError(
                    f"key {key!r} must start with a letter or '_' and use letters, digits, "
                    "'_', '.', '-' (at most 128)"
                )
            if notebook and (not key.isidentifier() or keyword.iskeyword(key)):
                # Papermill makes each parameter a variable of the notebook.
                name = re.sub(r"\W", "_", key)
                name = f"{name}_" if keyword.iskeyword(name) else name
                raise ValueError(
                    f"key {key!r} is not a Python name, and a notebook's hyperparameters become "
                    f"its variables; rename it, e.g. {name!r}"
                )
            _check_json_value(item, f"hyperparameters[{key!r}]")
        return value

    @field_validator("environment")
    @classmethod
    def _check_environment(cls, value: dict[str, str]) -> dict[str, str]:
        for key, item in value.items():
            if not _ENV_KEY.fullmatch(key):
                raise ValueError(
                    f"{key!r} is not an environment variable name; use letters, digits and '_', "
                    "not starting with a digit"
                )
            if key.upper().startswith(RESERVED_ENV_PREFIXES):
                raise ValueError(
                    f"{key!r} starts with a prefix respot sets itself "
                    f"({', '.join(RESERVED_ENV_PREFIXES)}); rename it"
                )
            if "\x00" in item:
                raise ValueError(
                    f"the value of {key!r} contains a NUL byte, which no process accepts"
                )
        return value

    @field_validator("secrets")
    @classmethod
    def _check_secrets(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > 20:
            raise ValueError("at most 20 secrets; keep related values in one JSON secret")
        for key, arn in value.items():
            if not _ENV_KEY.fullmatch(key) or key.upper().startswith(RESERVED_ENV_PREFIXES):
                raise ValueError(
                    f"{key!r} is not an environment variable name you may set; use letters, "
                    "digits and '_' (not RESPOT_* or AWS_*)"
                )
            if not _SECRET_ARN.fullmatch(arn):
                raise ValueError(
                    f"the value of {key!r} must be a Secrets Manager ARN, e.g. "
                    "'arn:aws:secretsmanager:us-east-1:123456789012:secret:respot/jobs/wandb-AbCdEf'"
                    " (the secret itself never goes in the spec)"
                )
        return value

    @field_validator("instance_types")
    @classmethod
    def _check_instance_types(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("give at least one instance type, e.g. ['g5.xlarge'], or leave it out")
        if len(value) > 10:
            raise ValueError("give at most 10 instance types")
        for item in value:
            if not _INSTANCE_TYPE.fullmatch(item):
                raise ValueError(
                    f"{item!r} is not an EC2 instance type; write family.size, e.g. 'g5.xlarge'"
                )
        if len(set(value)) != len(value):
            raise ValueError("an instance type is listed twice; list each once, best first")
        return value

    @field_validator("max_spot_price")
    @classmethod
    def _check_price(cls, value: float | None) -> float | None:
        if value is not None and not (0 < value < 1000):
            raise ValueError("the maximum spot price is in USD per hour, above 0 and below 1000")
        return value

    @field_validator("data")
    @classmethod
    def _check_data(cls, value: list[DataSourceEnvVar]) -> list[DataSourceEnvVar]:
        if len(value) > 20:
            raise ValueError("at most 20 data sources; put related objects under one S3 prefix")
        paths = [d.local_path.rstrip("/") for d in value]
        if len(set(paths)) != len(paths):
            raise ValueError("two data sources share a local_path; give each its own")
        return value

    @field_validator("tags")
    @classmethod
    def _check_tags(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > MAX_TAGS:
            raise ValueError(f"at most {MAX_TAGS} tags")
        for key, item in value.items():
            if not _TAG_KEY.fullmatch(key) or key in _TAG_KEY_RESERVED:
                raise ValueError(_tag_key_problem(key))
            if key.lower().startswith(RESERVED_TAG_PREFIXES):
                raise ValueError(f"tag key {key!r} uses a reserved prefix ('aws:', 'respot:')")
            if len(item) > 256 or not _TAG_CHARS.fullmatch(item):
                raise ValueError(
                    f"tag {key!r}: the value must be at most 256 letters, digits, spaces "
                    "or _ . : / = + - @"
                )
        return value

    @field_validator("slack_channel")
    @classmethod
    def _check_channel(cls, value: str | None) -> str | None:
        if value is not None and not _SLACK_CHANNEL.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a Slack channel; "
                "write '#name' (lowercase) or an id like 'C0123ABCD'"
            )
        return value

    @model_validator(mode="after")
    def _check_whole(self) -> TrainingEnvVar:
        if both := sorted(set(self.environment) & set(self.secrets)):
            raise ValueError(f"{', '.join(both)}: set each in environment or in secrets, not both")
        if self.command is not None and self.entry_point is not None:
            raise ValueError(
                "command and entry_point both say what to run; keep one: command runs a "
                "script as it is, entry_point a TrainingSession or a notebook"
            )
        if self.stop_signal is not None and self.command is None:
            raise ValueError(
                "stop_signal is for command jobs; a session hears the notice through "
                "respot (drop stop_signal, or set command)"
            )
        if self.entry_point is None and self.command is None and self.image is None:
            raise ValueError(
                "say what to run: set command (e.g. ['python', 'train.py']), or entry_point "
                "('package.module:SessionClass') and/or image"
            )
        if isinstance(self.requirements, str) and self.source_dir is None:
            raise ValueError(
                "requirements names a file but there is no source_dir to find it in; set "
                "source_dir or list the requirements"
            )
        if self.image is not None and self.requirements is not None:
            raise ValueError(
                "an image brings its own packages: install the requirements in the image, "
                "or drop image and keep requirements"
            )
        if self.image is not None and self.entry_point is None and self.command is None:
            raise ValueError(
                "with image, also set entry_point (the session runner starts that "
                "TrainingSession inside the container) or command (run inside it)"
            )
        if self.market == "on-demand" and self.max_spot_price is not None:
            raise ValueError(
                "max_spot_price is a spot price, and market: on-demand never buys spot; drop "
                "max_spot_price, or set market: spot"
            )
        if self.market == "on-demand" and not self.on_demand_fallback:
            raise ValueError(
                "market: on-demand asks for on-demand from the start, on_demand_fallback: false "
                "forbids it; drop one (market: spot with on_demand_fallback: false is spot only)"
            )
        if (
            self.estimated_runtime is not None
            and self.max_runtime is not None
            and self.estimated_runtime > self.max_runtime
        ):
            raise ValueError(
                "estimated_runtime is longer than max_runtime, so the job could never finish; "
                "raise max_runtime or lower the estimate"
            )
        return self

    def to_json(self) -> str:
        """The versioned JSON form that travels to the control plane."""
        return self.model_dump_json(exclude_none=True)


def _check_json_value(value: Any, where: str, depth: int = 0) -> None:
    if depth > 20:
        raise ValueError(f"{where} is nested too deeply (more than 20 levels)")
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_JSON_INT:
        # Python refuses to write ints of more than 4,300 digits as text (signing, JSON).
        raise ValueError(
            f"{where} is an integer beyond +-(2**63 - 1); write it as text in quotes, or as a float"
        )
    if value is None or isinstance(value, bool | int | str):
        return
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise ValueError(f"{where} is NaN or infinite, which JSON cannot carry")
        return
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check_json_value(item, f"{where}[{i}]", depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{where} has a key that is not text: {key!r}")
            _check_json_value(item, f"{where}[{key!r}]", depth + 1)
        return
    raise ValueError(
        f"{where} is a {type(value).__name__}; hyperparameters must be JSON values "
        "(numbers, text, true/false, null, lists, mappings)"
    )


_FIELD_NAMES = tuple(TrainingEnvVar.model_fields)


def _tag_key_problem(key: str) -> str:
    """Why `key` cannot be a tag key, and a key that can."""
    rule = (
        "EC2 exposes respot's tags in instance metadata, where a key may hold only ASCII "
        "letters, digits and + - = . , _ : @ (no spaces or '/'), 1-128 of them, and not "
        "only '.', '..' or '_index'"
    )
    fixed = _TAG_KEY_NOT.sub("_", key)[:128]
    if fixed and fixed not in _TAG_KEY_RESERVED and fixed != key:
        return f"tag key {key!r} would fail the launch: {rule}; rename it, e.g. {fixed!r}"
    return f"tag key {key!r} would fail the launch: {rule}; rename it"


def describe_validation_error(exc: ValidationError) -> list[str]:
    """Turn pydantic's error list into one line per problem: the field, what is wrong, the fix."""
    problems: list[str] = []
    for err in exc.errors():
        loc = _format_loc(err.get("loc", ()))
        kind = err.get("type", "")
        msg = str(err.get("msg", ""))
        msg = msg.removeprefix("Value error, ")
        inner = (err.get("ctx") or {}).get("error")
        if isinstance(inner, SpecError):
            # Raised by TrainingEnvVar.__init__ inside a larger model: keep its own lines.
            prefix = f"{loc}." if loc else ""
            problems.extend(f"{prefix}{p}" for p in inner.problems)
            continue
        if kind == "extra_forbidden":
            field = str(err["loc"][-1])
            guess = difflib.get_close_matches(field, _FIELD_NAMES, n=1)
            hint = f"; did you mean {guess[0]!r}?" if guess else ""
            problems.append(f"{loc}: unknown field{hint}")
        elif kind == "missing":
            problems.append(f"{loc}: required; set it")
        else:
            problems.append(f"{loc or 'spec'}: {msg}")
    return problems


def _format_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def validate_spec(data: Any) -> TrainingEnvVar:
    """Build a `TrainingEnvVar` from a mapping or JSON, raising `SpecError` with clear lines."""
    if isinstance(data, TrainingEnvVar):
        return data
    try:
        if isinstance(data, str | bytes):
            return TrainingEnvVar.model_validate_json(data)
        return TrainingEnvVar.model_validate(data)
    except ValidationError as exc:
        raise SpecError(describe_validation_error(exc)) from exc
