"""The user data every respot instance boots with: one function, used by the CDK stack (the
launch template) and by the local runtime (which runs it in a sandbox laid out like the AMI).

The user data is: the deployment's values written to `/etc/respot/respot.env` from a quoted
heredoc (the shell expands nothing in them), then the fixed script
`infra/bootstrap/agent-bootstrap.sh`. Nothing in it comes from a job spec.

`RESPOT_ROOT` (unset on EC2) moves every absolute path the script writes under a directory:
that is how the local runtime runs the very same text without root.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

BOOTSTRAP_SCRIPT = Path(__file__).resolve().parent / "bootstrap" / "agent-bootstrap.sh"
ENV_FILE = "/etc/respot/respot.env"
HEREDOC_END = "RESPOT_ENV"
_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


def agent_environment(
    *,
    bucket: str,
    agent_queue_url: str,
    region: str,
    log_group: str,
    asset_bucket: str,
    asset_key: str,
    framework_python: str,
    queue_region: str | None = None,
    credentials_function: str | None = None,
) -> dict[str, str]:
    """The deployment's values in the env file (the agent's systemd `EnvironmentFile=`).

    `queue_region`: the agent queue's region when it is not `region` (a satellite region's
    instances report to the home region's queue). `credentials_function`: the function the
    agent asks for its job's credentials (`respot.credentials.vending`).
    """
    extra = {"RESPOT_AGENT_QUEUE_REGION": queue_region} if queue_region else {}
    if credentials_function:
        extra["RESPOT_CREDENTIALS_FUNCTION"] = credentials_function
    return {
        "RESPOT_BUCKET": bucket,
        "RESPOT_AGENT_QUEUE_URL": agent_queue_url,
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
        "RESPOT_SHUTDOWN": "poweroff",
        "RESPOT_LOG_GROUP": log_group,
        "RESPOT_AGENT_ASSET_BUCKET": asset_bucket,
        "RESPOT_AGENT_ASSET_KEY": asset_key,
        "RESPOT_FRAMEWORK_PYTHON": framework_python,
        **extra,
    }


def user_data_lines(environment: Mapping[str, str]) -> list[str]:
    """The commands after `#!/bin/bash` (CDK's `UserData.add_commands` takes these).

    Values may be CDK tokens (resolved at deploy time); they are written verbatim, one
    `NAME=value` per line, and read by the script without being executed.
    """
    for name, value in environment.items():
        if not _NAME.match(name):
            raise ValueError(f"{name!r} is not an environment variable name")
        if "\n" in str(value) or str(value).strip() == HEREDOC_END:
            raise ValueError(f"the value of {name} cannot be one line of the env file")
    return [
        'ROOT="${RESPOT_ROOT:-}"',
        'install -d -m 0755 "$ROOT/etc/respot"',
        # A quoted heredoc: the shell expands nothing in these lines.
        f"cat > \"$ROOT{ENV_FILE}\" <<'{HEREDOC_END}'",
        *(f"{name}={value}" for name, value in environment.items()),
        HEREDOC_END,
        BOOTSTRAP_SCRIPT.read_text(),
    ]


def render_user_data(environment: Mapping[str, str]) -> str:
    """The whole user data text, as `UserData.for_linux()` renders it (values already known)."""
    return "#!/bin/bash\n" + "\n".join(user_data_lines(environment))


__all__ = [
    "BOOTSTRAP_SCRIPT",
    "ENV_FILE",
    "agent_environment",
    "render_user_data",
    "user_data_lines",
]
