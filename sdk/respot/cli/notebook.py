"""`respot notebook ...`: JupyterLab workspaces on spot instances (docs/notebooks.md)."""

from __future__ import annotations

import signal
import threading
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any

import typer

from respot.cli.context import (
    Connection,
    JsonOption,
    LocalOption,
    connect,
    console,
    fail,
    print_json,
    reports_errors,
)
from respot.workspace import names

if TYPE_CHECKING:
    from respot.core.job import JobRecord
    from respot.workspace.catalog import Workspace

app = typer.Typer(no_args_is_help=True)


@app.callback()
def _notebook() -> None:
    """JupyterLab on a spot GPU: a workspace whose files survive interruptions and stops."""


NameArg = Annotated[str, typer.Argument(help="The workspace's name (yours; others may reuse it).")]


def _names_checked(func: Any) -> Any:
    """A bad name or idle time (ValueError from respot.workspace.names): one line, exit 1."""
    import functools

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ValueError as exc:
            fail(str(exc))

    return wrapper


def _me(conn: Connection) -> str:
    from respot.workspace import ops

    return ops.caller_arn(conn.deployment, conn.session)


def _records(conn: Connection) -> list[JobRecord]:
    from respot.workspace.ops import records

    return records(conn.deployment, conn.session)


def _deleted(conn: Connection, job_id: str) -> bool:
    from respot.workspace.ops import is_deleted

    return is_deleted(conn.deployment, conn.session, job_id)


@app.command()
@_names_checked
@reports_errors
def start(
    name: Annotated[str, typer.Argument(help="The workspace's name.")] = "main",
    instance_type: Annotated[
        list[str] | None,
        typer.Option("--instance-type", help="EC2 instance type, in order (repeatable)."),
    ] = None,
    requirements: Annotated[
        Path | None,
        typer.Option(help="A requirements file for the workspace's Python (jupyterlab is added)."),
    ] = None,
    max_runtime: Annotated[
        str, typer.Option(help="Stop it after this long whatever happens, e.g. 8h.")
    ] = names.DEFAULT_MAX_RUNTIME,
    idle_minutes: Annotated[
        float,
        typer.Option(help="Stop it after this many minutes without kernel activity or browser."),
    ] = names.DEFAULT_IDLE_MINUTES,
    on_demand: Annotated[
        bool,
        typer.Option(
            "--on-demand",
            help="On-demand from the start, never spot (the job's market: on-demand); "
            "default: spot, on-demand only by the fallback rules of any job.",
        ),
    ] = False,
    local: LocalOption = False,
    json_output: JsonOption = False,
) -> None:
    """Start a workspace (or start a stopped one again, where it was); then `open` it."""
    from respot.workspace import ops

    conn = connect(local)
    started = ops.start(
        conn.deployment,
        conn.session,
        name,
        local=conn.local,
        instance_types=instance_type,
        requirements=requirements,
        max_runtime=max_runtime,
        idle_minutes=idle_minutes,
        on_demand=on_demand,
    )
    restore_from = started.restored_from
    answer = {
        "name": name,
        "job_id": started.job_id,
        "restored_from": restore_from,
        "idle_minutes": idle_minutes,
        "max_runtime": max_runtime,
        "market": "on-demand" if on_demand else "spot",
    }
    if json_output:
        print_json(answer)
        return
    again = f" from {restore_from}'s files" if restore_from else ""
    where = " on on-demand" if on_demand else ""
    console().print(
        f"workspace {name!r}: job {started.job_id} starts{where}{again}; stops after "
        f"{idle_minutes:g} idle minutes or {max_runtime}. Next: respot notebook open {name}"
        + (" --local" if conn.local else ""),
        markup=False,
    )


@app.command(name="open")
@_names_checked
@reports_errors
def open_(
    name: NameArg,
    port: Annotated[int, typer.Option(help="The laptop's port: http://127.0.0.1:PORT/.")] = 8888,
    local: LocalOption = False,
) -> None:
    """Reach the workspace's JupyterLab on http://127.0.0.1:PORT/ until Ctrl-C; the tunnel
    follows it to a replacement after an interruption (reload the page)."""
    from respot.workspace import ops

    if not 0 <= port <= 65535:
        fail(f"--port {port}: give a port between 1024 and 65535 (0: any free one)")
    conn = connect(local)
    live = ops.live_job(conn.deployment, conn.session, name)  # yours, and running
    if not conn.local:
        _open_aws(conn, live, name, port)
        return
    from respot.client.localstate import read_state

    state = read_state()
    if state is None:
        fail("no local runtime is running; start one with `respot local up`")
    moved = live.interruptions
    tunnel, link = ops.open_local(conn.deployment, conn.session, name, Path(state.work_root), port)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        console().print(f"workspace {name!r}: {link}", markup=False, soft_wrap=True)
        if moved:
            console().print(_moved(moved), markup=False)
        console().print(
            "the tunnel follows the workspace to a new instance (reload the page); "
            "Ctrl-C closes it",
            markup=False,
        )
        console().file.flush()
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        tunnel.close()
        signal.signal(signal.SIGTERM, previous)


def _open_aws(conn: Connection, live: JobRecord, name: str, port: int) -> None:
    """Session Manager port forwarding to the instance's 127.0.0.1:8888, following the
    workspace to a replacement (respot.workspace.ssm, docs/notebooks-platform.md)."""
    from respot.workspace import ops, ssm
    from respot.workspace.local import table_of
    from respot.workspace.tokens import read_token

    if port == 0:
        fail("--port 0: on AWS give the laptop's port (Session Manager's plugin needs one)")
    problem = ssm.plugin_problem()  # before a URL is printed or any session starts
    if problem is not None:
        fail(problem)
    token = read_token(live.job_id)
    if token is None:
        fail(
            f"no token for job {live.job_id} on this machine (it was started elsewhere); "
            f"open it there, or `respot notebook stop {name}` and start it again here"
        )
    console().print(f"workspace {name!r}: {ops.url(port, token)}", markup=False, soft_wrap=True)
    if live.interruptions:
        console().print(_moved(live.interruptions), markup=False)
    console().print("Ctrl-C closes the tunnel", markup=False)
    console().file.flush()
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        why = ssm.follow(
            conn.deployment,
            ssm.instance_resolver(table_of(conn.deployment, conn.session), live.job_id, name),
            names.REMOTE_PORT,
            port,
            stop,
            say=lambda text: console().print(text, markup=False),
            session=conn.session,
        )
        console().print(why, markup=False)
    except KeyboardInterrupt:
        pass
    except ssm.SessionManagerError as exc:
        # The workspace stopped, the plugin is missing or ended, Session Manager refused
        # (AccessDenied), the new instance never registered: the message says the fix.
        fail(str(exc))
    finally:
        signal.signal(signal.SIGTERM, previous)


def _moved(times: int) -> str:
    return (
        f"it moved to a new instance {times} time(s) after spot interruptions: variables are "
        "gone; files are kept"
    )


def _why_stopped(conn: Connection, newest: JobRecord) -> str | None:
    from respot.core.states import JobState
    from respot.workspace.ops import idle_reason

    if newest.state is JobState.COMPLETED:
        idle = idle_reason(conn.deployment, conn.session, newest.job_id)
        if idle is not None:
            return idle.split(":", 1)[0]  # "idle for 30.2 min (...)"
    return newest.reason


def _row(conn: Connection, workspace: Workspace, now: datetime) -> dict[str, Any]:
    from respot.core.cost import job_cost

    newest = workspace.newest
    live = workspace.live
    attempt = live.current if live is not None else None
    return {
        "name": workspace.name,
        "state": workspace.state,
        "job_id": (live or newest).job_id,
        "instance_id": attempt.instance_id if attempt else None,
        "interruptions": sum(j.interruptions for j in workspace.jobs),
        "paid_usd": round(sum(job_cost(j, now).paid_usd for j in workspace.jobs), 6),
        "last_reason": None if live is not None else _why_stopped(conn, newest),
        "note": _moved(live.interruptions) if live is not None and live.interruptions else None,
        "since": (live or newest).created_at.isoformat(),
    }


@app.command()
@_names_checked
@reports_errors
def ls(local: LocalOption = False, json_output: JsonOption = False) -> None:
    """Your workspaces: running, starting or stopped; what each has cost."""
    from respot.workspace.catalog import mine

    conn = connect(local)
    me = _me(conn)
    now = datetime.now(UTC)
    rows = [
        _row(conn, w, now)
        for w in mine(_records(conn), me)
        if w.live is not None or not _deleted(conn, w.newest.job_id)
    ]
    if json_output:
        print_json(rows)
        return
    if not rows:
        console().print("no workspaces yet: `respot notebook start NAME` starts one")
        return
    from rich.table import Table

    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("name", "state", "job", "instance", "interr.", "paid", "note"):
        table.add_column(col)
    for row in rows:
        table.add_row(
            row["name"],
            row["state"],
            row["job_id"],
            row["instance_id"] or "-",
            str(row["interruptions"]),
            f"${row['paid_usd']:.4f}",
            row["note"] or row["last_reason"] or "",
        )
    console().print(table)


@app.command()
@_names_checked
@reports_errors
def stop(
    name: NameArg,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait/--no-wait",
            help="Wait until the workspace has saved and stopped (at most 15 min).",
        ),
    ] = True,
    local: LocalOption = False,
    json_output: JsonOption = False,
) -> None:
    """Stop a workspace: its files are saved to S3 first, then its instance goes; `start`
    brings them back."""
    from respot.workspace import ops

    conn = connect(local)
    job_id = ops.stop(conn.deployment, conn.session, name)
    out = console()
    if not json_output:
        out.print(
            f"workspace {name!r}: saving the workspace, then stopping (job {job_id})",
            markup=False,
        )
    if not wait:
        if json_output:
            print_json({"name": name, "job_id": job_id, "stopped": False, "state": None})
        else:
            out.print(
                f"not waiting: `respot notebook ls{' --local' if local else ''}` shows it "
                f"stopped; `respot notebook start {name}` then continues from the saved files",
                markup=False,
            )
        return
    try:
        status = ops.wait_stopped(
            conn.deployment, conn.session, job_id, poll_seconds=0.5 if conn.local else 2.0
        )
    except TimeoutError as exc:
        fail(
            f"{exc} after {ops.STOP_WAIT_SECONDS:.0f} s (saving, or its instance is slow to "
            f"stop; the control plane terminates it within its heartbeat timeout): "
            f"`respot notebook ls{' --local' if local else ''}` shows when it is stopped"
        )
    if json_output:
        print_json(
            {"name": name, "job_id": job_id, "stopped": True, "state": status.state,
             "reason": status.reason}
        )  # fmt: skip
        return
    out.print(
        f"workspace {name!r}: stopped ({status.state.lower()}: {status.reason or 'no reason'}); "
        f"`respot notebook start {name}` continues from the saved files",
        markup=False,
    )


@app.command()
@_names_checked
@reports_errors
def delete(
    name: NameArg,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask first.")] = False,
    local: LocalOption = False,
) -> None:
    """Delete a stopped workspace's files in S3 (asks first); its jobs' records stay."""
    from respot.storage import layout
    from respot.workspace.catalog import WorkspaceError, find
    from respot.workspace.ops import DELETED_MARKER
    from respot.workspace.tokens import forget_token

    conn = connect(local)
    me = _me(conn)
    workspace = find(_records(conn), name, me)
    if workspace is None:
        raise WorkspaceError(f"you have no workspace {name!r}; `respot notebook ls` lists yours")
    if workspace.live is not None:
        raise WorkspaceError(
            f"workspace {name!r} is running (job {workspace.live.job_id}); "
            f"`respot notebook stop {name}` first"
        )
    if not yes and not typer.confirm(
        f"Delete workspace {name!r}'s files in S3 ({len(workspace.jobs)} job(s)) for good?"
    ):
        fail("nothing deleted")
    s3 = conn.client("s3")
    bucket = conn.deployment.bucket
    deleted = 0
    for job in workspace.jobs:
        prefix = layout.checkpoints_prefix(job.job_id)
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            for i in range(0, len(keys), 1000):
                s3.delete_objects(Bucket=bucket, Delete={"Objects": keys[i : i + 1000]})
                deleted += len(keys[i : i + 1000])
        forget_token(job.job_id)
    marker = layout.job_prefix(workspace.newest.job_id) + DELETED_MARKER
    s3.put_object(Bucket=bucket, Key=marker, Body=b"")
    console().print(f"deleted workspace {name!r}: {deleted} object(s) in S3", markup=False)
