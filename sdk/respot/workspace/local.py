"""Where a workspace's JupyterLab answers on the local runtime: the stand-in for Session
Manager's port forwarding (`respot.workspace.ssm` on AWS).

The local runtime's instances are process trees on this machine, each with its own `/` under
the runtime's work root (`<work_root>/<instance id>/root/`, infra/local/fleet.py); their
supervisors listen on any free port of 127.0.0.1 and write it beside the attempt's notice file
(`/var/lib/respot/<job>/<attempt>/ipc/workspace.json`). `resolver` answers, each time it is
asked, for the job's current attempt: so the tunnel follows the workspace to a replacement.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from respot.agent.config import DEFAULT_WORK_DIR
from respot.aws.jobs import JobTable
from respot.workspace import names
from respot.workspace.catalog import serving_attempt
from respot.workspace.tunnel import NotReachableError, Resolver

# infra/local: the runtime's instances live in <work_root>/instances/<id>/, their "/" in root/
INSTANCES = "instances"
INSTANCE_ROOT = "root"


def port_file(work_root: Path, instance_id: str, job_id: str, attempt: int) -> Path:
    """Where the supervisor of (job, attempt) on `instance_id` writes its port."""
    rooted = DEFAULT_WORK_DIR.lstrip("/")
    return (
        work_root / INSTANCES / instance_id / INSTANCE_ROOT / rooted / job_id / f"{attempt:04d}"
        / "ipc" / names.PORT_FILE
    )  # fmt: skip


def resolver(table: JobTable, work_root: Path, job_id: str, name: str) -> Resolver:
    """Where `job_id`'s JupyterLab answers now; NotReachableError saying why not. `work_root`: the
    local runtime's (`respot local up`'s state file names it)."""

    def resolve() -> tuple[str, int]:
        record = table.get(job_id)
        if record is None:
            raise NotReachableError(f"job {job_id} is not in the local runtime")
        if record.state.is_terminal():
            raise NotReachableError(
                f"workspace {name!r} stopped (job {job_id} is {record.state.value}): "
                f"`respot notebook start {name}` starts it again where it was"
            )
        attempt = serving_attempt(record)  # through a noticed instance's save window
        if attempt is None or attempt.instance_id is None:
            raise NotReachableError(f"workspace {name!r} is waiting for an instance")
        path = port_file(work_root, attempt.instance_id, job_id, attempt.number)
        try:
            port = int(json.loads(path.read_text())["port"])
        except (OSError, ValueError, KeyError, TypeError):
            raise NotReachableError(
                f"JupyterLab is starting on {attempt.instance_id} (attempt {attempt.number}): "
                "variables are gone; files are kept"
            ) from None
        return "127.0.0.1", port

    return resolve


def table_of(deployment: Any, session: Any) -> JobTable:
    return JobTable(deployment.table_name, deployment.client("dynamodb", session))
