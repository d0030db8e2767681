"""What both sides of a workspace agree on: the name rule, the tag, files and defaults.

Standard library only: the supervisor imports it on the job's own Python.
"""

from __future__ import annotations

import re

TAG = "respot-workspace"  # the job's tag naming its workspace ('respot:' is reserved for respot)
SUPERVISOR_MODULE = "respot.workspace.serve"
COMMAND = ["python", "-m", SUPERVISOR_MODULE]
REMOTE_PORT = 8888  # on an instance, JupyterLab listens on 127.0.0.1:8888 (SSM forwards to it)
DEFAULT_IDLE_MINUTES = 30
MAX_IDLE_MINUTES = 7 * 24 * 60
DEFAULT_MAX_RUNTIME = "12h"
# The Jupyter token: an object of its own beside the job's code (storage.layout's
# workspace_token_key, which no researcher may read), that the agent downloads with the job's
# credentials as a data source: RESPOT_DATA_DIR/<TOKEN_DATA_PATH>/<TOKEN_OBJECT>.
TOKEN_OBJECT = "workspace-token"  # noqa: S105 - an object's name (= layout.WORKSPACE_TOKEN)
TOKEN_DATA_PATH = "respot-workspace"  # noqa: S105 - a directory's name
PORT_FILE = "workspace.json"  # beside the notice file: the port JupyterLab got, for the laptop
STOPPED_OUTPUT = "workspace-stopped.txt"  # in the job's outputs: why an idle stop stopped it
# The metric the supervisor reports (respot.report) as it stops idle: the minutes it was idle.
# The agent sends it with the job's completion; Slack's reply says the idle stop by it.
IDLE_METRIC = "workspace_idle_minutes"
NOTE_FILE = "RESPOT-README.md"  # in the workspace: why the page reloaded on a new instance
ENV_IDLE_MINUTES = "RESPOT_WORKSPACE_IDLE_MINUTES"
ENV_PORT = "RESPOT_WORKSPACE_PORT"  # 0: any free port (local instances share one host)
ENV_SYNC_SECONDS = "RESPOT_WORKSPACE_SYNC_SECONDS"
ENV_POLL_SECONDS = "RESPOT_WORKSPACE_POLL_SECONDS"
ENV_AUTOSAVE_SECONDS = "RESPOT_WORKSPACE_AUTOSAVE_SECONDS"
# The job's hyperparameters carry the settings (RESPOT_* environment names are respot's own);
# the supervisor reads them under the names above.
SETTINGS = {
    "idle_minutes": ENV_IDLE_MINUTES,
    "port": ENV_PORT,
    "sync_seconds": ENV_SYNC_SECONDS,
    "poll_seconds": ENV_POLL_SECONDS,
    "autosave_seconds": ENV_AUTOSAVE_SECONDS,
}

# The control plane's environment: "false" where the stack setting is `workspaces: false`
# (infra/stack.py); the commands function then refuses a workspace before launch.
ENV_WORKSPACES_SETTING = "RESPOT_WORKSPACES"
# The stack setting that turns workspaces off (infra/settings.py, docs/notebooks-platform.md).
WORKSPACES_OFF = (
    "workspaces are off in this deployment (the stack setting `workspaces: false` in cdk.json, "
    "docs/notebooks-platform.md): its instances get no Session Manager tunnel, so JupyterLab "
    "could not be opened; ask your platform team to deploy with `workspaces: true`"
)


def is_workspace_command(command: list[str] | None, tags: dict[str, str]) -> bool:
    """Does a job's spec run a workspace (the supervisor as its command, or the tag)?"""
    return SUPERVISOR_MODULE in (command or []) or TAG in tags


_NAME = re.compile(r"[a-z][a-z0-9-]{0,30}[a-z0-9]|[a-z]")


class WorkspaceNameError(ValueError):
    """A workspace name that breaks the rule (the message says the rule)."""


def check_name(name: str) -> str:
    """The name, if it is 1-32 lowercase letters, digits and '-', starting with a letter and not
    ending with '-'; else WorkspaceNameError naming the rule."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise WorkspaceNameError(
            f"workspace name {name!r}: use 1-32 lowercase letters, digits and '-', starting "
            "with a letter and not ending with '-' (e.g. 'alice-nlp')"
        )
    return name


def check_idle_minutes(value: float) -> float:
    """`idle_minutes` between 1 and a week; else a ValueError naming the flag."""
    if not 1 <= value <= MAX_IDLE_MINUTES:
        raise ValueError(
            f"--idle-minutes {value:g}: give 1 to {MAX_IDLE_MINUTES} minutes (a week); "
            "max_runtime bounds a workspace in any case"
        )
    return value
