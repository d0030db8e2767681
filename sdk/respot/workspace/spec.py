"""The job a workspace is: the spec `respot notebook start` submits (docs/notebooks.md).

A command job whose command is the supervisor (`python -m respot.workspace.serve`), tagged with
the workspace's name, with a `max_runtime` always. Its code is a README and the researcher's
requirements file. The Jupyter token is an object of its own under the job's prefix
(`layout.workspace_token_key`), which the owner uploads create-only and no researcher may read
(the researcher policy's `NoWorkspaceTokens`); the job names it as a data source, so its agent
downloads it with the job's own credentials. The spec names the object, never the token: it is
not in the spec, the record, Slack or a log.
"""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path

from respot.spec.training import TrainingEnvVar, validate_spec
from respot.storage import layout
from respot.workspace import names

# JupyterLab in the job's Python: pinned as in requirements.txt. With `requirements:` the
# instance installs it from the cached wheelhouse; without, the framework Python must have it.
JUPYTERLAB = "jupyterlab==4.6.6"
REQUIREMENTS_FILE = "requirements.txt"


def job_name(name: str) -> str:
    """The job's name for workspace `name` (`respot ls` shows it in the job id)."""
    return f"nb-{names.check_name(name)}"


README = (
    "respot workspace: the supervisor (python -m respot.workspace.serve) runs from here.\n"
    "Your files are in the workspace, JupyterLab's root, not here.\n"
)


def write_code(directory: Path, requirements: Path | None = None) -> list[str] | str | None:
    """Fill `directory` (the job's source_dir) with a README and the requirements; the
    `requirements` value for the spec."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "README.txt").write_text(README)
    if requirements is None:
        return None
    if not requirements.is_file():
        raise FileNotFoundError(
            f"--requirements {requirements}: no such file; name a requirements file"
        )
    lines = requirements.read_text().splitlines()
    if not any(line.strip().lower().startswith("jupyterlab") for line in lines):
        lines.append(JUPYTERLAB)  # the workspace needs it in the job's Python
    (directory / REQUIREMENTS_FILE).write_text("\n".join(lines) + "\n")
    shutil.copymode(requirements, directory / REQUIREMENTS_FILE)
    return REQUIREMENTS_FILE


def token_source(bucket: str, job_id: str) -> dict[str, str]:
    """The data source that brings the token object onto the instance."""
    return {
        "s3_uri": f"s3://{bucket}/{layout.workspace_token_key(job_id)}",
        "local_path": names.TOKEN_DATA_PATH,
    }


def workspace_spec(
    name: str,
    *,
    job_id: str,
    bucket: str,
    source_dir: Path,
    requirements: list[str] | str | None = None,
    instance_types: list[str] | None = None,
    max_runtime: str | timedelta = names.DEFAULT_MAX_RUNTIME,
    idle_minutes: float = names.DEFAULT_IDLE_MINUTES,
    local: bool = False,
    restore_from: str | None = None,
    slack_channel: str | None = None,
    settings: dict[str, float] | None = None,
    on_demand: bool = False,
) -> TrainingEnvVar:
    """The spec of one run of workspace `name`; SpecError/ValueError naming the field."""
    names.check_idle_minutes(idle_minutes)
    unknown = sorted(set(settings or {}) - set(names.SETTINGS))
    if unknown:
        raise ValueError(f"workspace settings {unknown}: known are {sorted(names.SETTINGS)}")
    hyperparameters: dict[str, float] = {**(settings or {}), "idle_minutes": idle_minutes}
    if local:  # the local runtime's instances share one host: any free port, found by file
        hyperparameters["port"] = 0
    body: dict[str, object] = {
        "name": job_name(name),
        "command": list(names.COMMAND),
        "source_dir": str(source_dir),
        "hyperparameters": hyperparameters,
        "tags": {names.TAG: name},
        "data": [token_source(bucket, job_id)],
        "max_runtime": max_runtime,
        "warm_start": False,  # a command job's replacement starts cold in any case
    }
    if requirements is not None:
        body["requirements"] = requirements
    if instance_types:
        body["instance_types"] = instance_types
    if slack_channel:
        body["slack_channel"] = slack_channel
    if restore_from is not None:
        body["restore_from"] = restore_from
    if on_demand:  # the job's `market:` (default spot, with the fallback rules of any job)
        body["market"] = "on-demand"
    return validate_spec(body)
