"""What `respot notebook start/open/stop` do, as functions (the CLI, the e2e tests and the
browser test call these): each takes the deployment and the researcher's boto3 session.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from respot.aws.jobs import JobTable
from respot.client.status import JobStatus
from respot.core.job import JobRecord
from respot.exceptions import DuplicateJobError
from respot.storage import layout
from respot.wire.messages import new_job_id
from respot.workspace import names
from respot.workspace.catalog import (
    Workspace,
    WorkspaceError,
    caller_arn,
    find,
    live_or_explain,
    mine,
)
from respot.workspace.spec import JUPYTERLAB, job_name, workspace_spec, write_code
from respot.workspace.tokens import new_token, read_token, save_token
from respot.workspace.tunnel import Tunnel

SCAN_LIMIT = 100_000  # every job of the table: a workspace's jobs may be weeks apart
DELETED_MARKER = "workspace-deleted"  # jobs/<id>/workspace-deleted: its owner deleted it


@dataclass(frozen=True)
class Started:
    name: str
    job_id: str
    restored_from: str | None


def records(deployment: Any, session: Any) -> list[JobRecord]:
    return JobTable(deployment.table_name, deployment.client("dynamodb", session)).recent(
        SCAN_LIMIT
    )


def is_deleted(deployment: Any, session: Any, job_id: str) -> bool:
    from botocore.exceptions import ClientError

    from respot.storage import layout

    key = layout.job_prefix(job_id) + DELETED_MARKER
    try:
        deployment.client("s3", session).head_object(Bucket=deployment.bucket, Key=key)
    except ClientError:
        return False
    return True


def put_token(deployment: Any, session: Any, job_id: str, token: str) -> None:
    """Upload the job's token object, create-only (nobody replaces a token once written)."""
    from botocore.exceptions import ClientError

    try:
        deployment.client("s3", session).put_object(
            Bucket=deployment.bucket,
            Key=layout.workspace_token_key(job_id),
            Body=token.encode(),
            IfNoneMatch="*",
        )
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "412"):
            raise DuplicateJobError(
                f"job id {job_id}: a workspace token is already stored under it; start again "
                "(a new id is chosen)"
            ) from None
        raise


def idle_reason(deployment: Any, session: Any, job_id: str) -> str | None:
    """Why the supervisor stopped the job for idleness (its `workspace-stopped.txt` output),
    or None if it did not."""
    from botocore.exceptions import ClientError

    key = layout.outputs_prefix(job_id) + names.STOPPED_OUTPUT
    try:
        body = deployment.client("s3", session).get_object(Bucket=deployment.bucket, Key=key)
    except ClientError:
        return None
    return str(body["Body"].read(4096).decode(errors="replace")).strip() or None


def my_workspace(deployment: Any, session: Any, name: str) -> Workspace | None:
    """The caller's workspace `name` (names are per owner), or None."""
    names.check_name(name)
    me = caller_arn(deployment, session)
    for workspace in mine(records(deployment, session), me):
        if workspace.name == name:
            return workspace
    return None


def start(
    deployment: Any,
    session: Any,
    name: str,
    *,
    local: bool,
    instance_types: list[str] | None = None,
    requirements: Path | None = None,
    max_runtime: str = names.DEFAULT_MAX_RUNTIME,
    idle_minutes: float = names.DEFAULT_IDLE_MINUTES,
    settings: dict[str, float] | None = None,
    on_demand: bool = False,
) -> Started:
    """Submit workspace `name`'s job: a new one, or a stopped one's continuation (restore_from:
    its newest job). WorkspaceError if it runs already. The token is saved 0600 here."""
    from respot.client.handle import run

    if getattr(deployment, "workspaces", None) is False:  # the stack's `workspaces: false`
        raise WorkspaceError(names.WORKSPACES_OFF)
    names.check_name(name)
    names.check_idle_minutes(idle_minutes)
    workspace = my_workspace(deployment, session, name)
    restore_from = None
    if workspace is not None:
        live = workspace.live
        if live is not None:
            raise WorkspaceError(
                f"workspace {name!r} is in use: job {live.job_id} is {live.state.value}; "
                f"`respot notebook open {name}` opens it, `respot notebook stop {name}` stops it"
            )
        # `delete` marks the newest job; a start after it begins empty (a new newest job)
        previous = next((j for j in workspace.jobs if j.attempts), None)
        deleted = is_deleted(deployment, session, workspace.newest.job_id)
        if previous is not None and not deleted:
            restore_from = previous.job_id
    token = new_token()
    job_id = new_job_id(job_name(name), datetime.now(UTC))
    code = Path(tempfile.mkdtemp(prefix="respot-notebook-"))
    try:
        reqs = write_code(code, requirements)
        if reqs is None and not local:
            # On AWS, JupyterLab comes through `requirements:` and the cached wheelhouse.
            (code / "requirements.txt").write_text(JUPYTERLAB + "\n")
            reqs = "requirements.txt"
        spec = workspace_spec(
            name,
            job_id=job_id,
            bucket=deployment.bucket,
            source_dir=code,
            requirements=reqs,
            instance_types=instance_types,
            max_runtime=max_runtime,
            idle_minutes=idle_minutes,
            local=local,
            restore_from=restore_from,
            settings=settings,
            on_demand=on_demand,
        )
        # The laptop's copy first, then the job's: a token object is never without its copy.
        save_token(job_id, token)
        put_token(deployment, session, job_id, token)
        handle = run(spec, deployment=deployment, session=session, job_id=job_id)
    finally:
        shutil.rmtree(code, ignore_errors=True)
    return Started(name, handle.job_id, restore_from)


def live_job(deployment: Any, session: Any, name: str) -> JobRecord:
    """The caller's running workspace `name`: NotOwnerError if it is someone else's,
    WorkspaceError if it is stopped or unknown (saying `respot notebook start NAME`)."""
    me = caller_arn(deployment, session)
    return live_or_explain(find(records(deployment, session), name, me), name)


def url(port: int, token: str) -> str:
    return f"http://127.0.0.1:{port}/lab?token={token}"


def open_local(
    deployment: Any, session: Any, name: str, work_root: Path, port: int = 0
) -> tuple[Tunnel, str]:
    """Open the caller's workspace on the local runtime: a started tunnel on
    127.0.0.1:`port` (0: any free one) and its URL with the token. Close the tunnel when done."""
    from respot.workspace.local import resolver

    live = live_job(deployment, session, name)
    token = read_token(live.job_id)
    if token is None:
        raise WorkspaceError(
            f"no token for job {live.job_id} on this machine (it was started elsewhere); "
            f"open it there, or `respot notebook stop {name}` and start it again here"
        )
    table = JobTable(deployment.table_name, deployment.client("dynamodb", session))
    tunnel = Tunnel(resolver(table, work_root, live.job_id, name), port).start()
    return tunnel, url(tunnel.port, token)


# How long `respot notebook stop` waits for the job to be over: the supervisor's final sync
# and the agent's stop, which the control plane bounds by its heartbeat timeout (10 min by
# default; then it terminates the instance) and the next reconcile tick (60 s).
STOP_WAIT_SECONDS = 15 * 60.0


def stop(deployment: Any, session: Any, name: str) -> str:
    """Stop the caller's workspace, saving first: its job's cancel with `checkpoint_first`
    (the agent tells the supervisor, which syncs the workspace and exits; the job then ends
    CANCELLED with that snapshot kept; a workspace not running yet is cancelled at once).
    Its job id."""
    from respot.client.handle import JobHandle

    live = live_job(deployment, session, name)
    JobHandle(live.job_id, deployment, session).cancel(
        f"workspace {name} stopped by its owner", checkpoint_first=True
    )
    return live.job_id


def wait_stopped(
    deployment: Any,
    session: Any,
    job_id: str,
    timeout: float = STOP_WAIT_SECONDS,
    *,
    poll_seconds: float = 2.0,
) -> JobStatus:
    """The stopped workspace job's status, once it is over; TimeoutError after `timeout`."""
    from respot.client.handle import JobHandle

    return JobHandle(job_id, deployment, session).wait(timeout, poll_seconds=poll_seconds)
