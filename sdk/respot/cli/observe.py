"""`respot logs | cost | tensorboard | timeline`: what a job printed, cost, learned and lived."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from respot.cli.context import (
    JsonOption,
    LocalOption,
    connect,
    console,
    err_console,
    fail,
    need_package,
    print_json,
    reports_errors,
)

if TYPE_CHECKING:
    from respot.client.logs import LogLine

DEFAULT_TENSORBOARD_PORT = 6006
TENSORBOARD_SYNC_SECONDS = 30.0

# ---- logs --------------------------------------------------------------------------------------


@reports_errors
def logs(
    job_id: Annotated[str, typer.Argument(help="The job whose output to show.")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new lines until the job ends.")
    ] = False,
    prefix: Annotated[
        bool, typer.Option(help="Start each line with its attempt and instance.")
    ] = True,
    local: LocalOption = False,
    json_output: Annotated[
        bool, typer.Option("--json", help="One JSON object per line (JSON Lines).")
    ] = False,
) -> None:
    """The training process's stdout/stderr, across every instance the job ran on, in order."""
    import json

    from respot.client.logs import JobLogs, failure_lines

    conn = connect(local)
    record = conn.record(job_id)
    reader = JobLogs(conn.deployment, conn.session, job_id)
    out = console()
    shown = 0

    def emit(line: LogLine) -> None:
        nonlocal shown
        shown += 1
        if json_output:
            sys.stdout.write(
                json.dumps(
                    {
                        "attempt": line.attempt,
                        "instance_id": line.instance_id,
                        "timestamp_ms": line.timestamp_ms,
                        "message": line.text,
                        "source": line.source,
                    }
                )
                + "\n"
            )
            sys.stdout.flush()
        elif prefix:
            out.print(f"[dim]{line.prefix} |[/] ", end="")
            out.print(line.text, markup=False, highlight=False)
        else:
            out.print(line.text, markup=False, highlight=False)

    try:
        if follow:
            final = reader.follow(
                conn.handle(job_id), emit, poll_seconds=1.0 if conn.local else 2.0
            )
            record = final or record
        else:
            for line in reader.read(record):
                emit(line)
        if not shown:  # e.g. the environment failed: the session never printed a line
            for line in failure_lines(record):
                emit(line)
    except KeyboardInterrupt:
        pass
    for warning in dict.fromkeys(reader.warnings):
        err_console().print(f"[yellow]note:[/] {escape(str(warning))}", highlight=False)


# ---- cost --------------------------------------------------------------------------------------


@reports_errors
def cost(
    job_id: Annotated[
        str | None, typer.Argument(help="A job: its per-attempt ledger. None: recent jobs.")
    ] = None,
    limit: Annotated[int, typer.Option(help="Without JOB: how many recent jobs.")] = 20,
    local: LocalOption = False,
    json_output: JsonOption = False,
) -> None:
    """What jobs paid, what on-demand would have cost, and the saving."""
    from rich.table import Table

    from respot.core.cost import job_cost, ledger

    conn = connect(local)
    now = datetime.now(UTC)
    out = console()
    if job_id is None:
        records = conn.recent(limit)
        rows = []
        for r in records:
            c = job_cost(r, now)
            rows.append(
                {
                    "job_id": r.job_id,
                    "state": r.state.value,
                    "attempts": len(r.attempts),
                    "interruptions": r.interruptions,
                    "instance_hours": round(c.instance_hours, 6),
                    "paid_usd": round(c.paid_usd, 6),
                    "on_demand_usd": _round(c.on_demand_usd),
                    "savings_pct": _round(c.savings_pct, 1),
                }
            )
        paid = sum(float(r["paid_usd"] or 0) for r in rows)
        known = [r for r in rows if r["on_demand_usd"] is not None]
        od = sum(float(r["on_demand_usd"] or 0) for r in known)
        total = {
            "paid_usd": round(paid, 6),
            "on_demand_usd": round(od, 6) if known else None,
            "savings_pct": round(100 * (1 - paid / od), 1) if od else None,
        }
        if json_output:
            print_json({"jobs": rows, "total": total})
            return
        if not rows:
            out.print("no jobs yet")
            return
        table = Table(box=None, header_style="bold", show_footer=True)
        table.add_column("job", footer="total")
        table.add_column("state")
        table.add_column("attempts", justify="right")
        table.add_column("instance-h", justify="right")
        table.add_column("paid", justify="right", footer=f"${paid:.4f}")
        table.add_column("on-demand", justify="right", footer=_usd(total["on_demand_usd"]))
        table.add_column("saved", justify="right", footer=_pct(total["savings_pct"]))
        for row in rows:
            table.add_row(
                str(row["job_id"]),
                str(row["state"]),
                str(row["attempts"]),
                f"{row['instance_hours']:.3f}",
                f"${row['paid_usd']:.4f}",
                _usd(row["on_demand_usd"]),
                _pct(row["savings_pct"]),
            )
        out.print(table)
        return

    record = conn.record(job_id)
    lines = ledger(record, now)
    summary = job_cost(record, now)
    if json_output:
        print_json(
            {
                "job_id": record.job_id,
                "state": record.state.value,
                "attempts": [
                    {
                        "attempt": ln.attempt,
                        "market": ln.market,
                        "instance_type": ln.instance_type,
                        "availability_zone": ln.availability_zone,
                        "instance_id": ln.instance_id,
                        "start": ln.started.isoformat() if ln.started else None,
                        "end": ln.ended.isoformat() if ln.ended else None,
                        "hours": round(ln.hours, 6),
                        "price_per_hour": ln.price_per_hour,
                        "on_demand_price_per_hour": ln.on_demand_price_per_hour,
                        "paid_usd": round(ln.paid_usd, 6),
                        "end_reason": ln.end,
                        "transfer_gb": round(ln.transfer_gb, 6),
                        "transfer_usd": round(ln.transfer_usd, 6),
                        "transfer_from": ln.transfer_from,
                    }
                    for ln in lines
                ],
                "paid_usd": round(summary.paid_usd, 6),
                "on_demand_usd": _round(summary.on_demand_usd),
                "savings_pct": _round(summary.savings_pct, 1),
                "instance_hours": round(summary.instance_hours, 6),
                "training_hours": round(summary.training_hours, 6),
            }
        )
        return
    table = Table(
        title=f"{record.job_id} ({record.state.value})",
        title_justify="left",
        box=None,
        header_style="bold",
        show_footer=True,
    )
    table.add_column("#", footer="")
    table.add_column("market")
    table.add_column("type")
    table.add_column("zone")
    table.add_column("instance")
    table.add_column("start")
    table.add_column("end")
    table.add_column("hours", justify="right", footer=f"{summary.instance_hours:.4f}")
    table.add_column("$/h", justify="right")
    table.add_column("paid", justify="right", footer=f"${summary.paid_usd:.4f}")
    table.add_column("why it ended", footer="")
    for ln in lines:
        table.add_row(
            str(ln.attempt),
            ln.market,
            ln.instance_type,
            ln.availability_zone,
            ln.instance_id or "-",
            _time(ln.started),
            _time(ln.ended) if ln.ended else "running",
            f"{ln.hours:.4f}",
            "-" if ln.price_per_hour is None else f"{ln.price_per_hour:.4f}",
            f"${ln.paid_usd:.4f}",
            ln.end or "-",
        )
    out.print(table)
    for ln in lines:
        if ln.transfer_from is not None:
            out.print(
                f"attempt {ln.attempt}: checkpoint moved from {ln.transfer_from} "
                f"({ln.transfer_gb:.3f} GB, ${ln.transfer_usd:.4f}; in the total)"
            )
    od_usd = summary.on_demand_usd
    if od_usd is None:
        out.print("on-demand equivalent: unknown (no list price for this instance type)")
    else:
        out.print(
            f"paid ${summary.paid_usd:.4f}; one on-demand instance for the same training would "
            f"have cost ${od_usd:.4f}: saved ${od_usd - summary.paid_usd:.4f} "
            f"({_pct(summary.savings_pct)})"
        )


def _round(value: float | None, digits: int = 6) -> float | None:
    return None if value is None else round(value, digits)


def _usd(value: Any) -> str:
    return "-" if value is None else f"${float(value):.4f}"


def _pct(value: Any) -> str:
    return "-" if value is None else f"{float(value):.0f}%"


def _time(at: datetime | None) -> str:
    return at.astimezone().strftime("%m-%d %H:%M:%S") if at else "-"


# ---- tensorboard -------------------------------------------------------------------------------


def download_tensorboard(conn: Any, job_id: str, directory: Path) -> list[Path]:
    """Copy the job's TensorBoard event files from S3 into `directory` (newer ones only)."""
    from respot.storage import layout

    s3 = conn.client("s3")
    prefix = layout.tensorboard_prefix(job_id)
    directory.mkdir(parents=True, exist_ok=True)
    files: list[Path] = []
    paginator = s3.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=conn.deployment.bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            name = obj["Key"][len(prefix) :]
            if not name or "/" in name or name.startswith("."):
                continue  # only the flat files the agent writes
            target = directory / name
            if not target.exists() or target.stat().st_size != obj["Size"]:
                s3.download_file(conn.deployment.bucket, obj["Key"], str(target))
            files.append(target)
    return files


@reports_errors
def tensorboard(
    job_id: Annotated[str, typer.Argument(help="The job whose scalars to show.")],
    logdir: Annotated[
        Path | None,
        typer.Option(help="Where to put the event files (default ~/.respot/tensorboard/JOB)."),
    ] = None,
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1.")] = DEFAULT_TENSORBOARD_PORT,
    launch: Annotated[
        bool, typer.Option(help="Start TensorBoard; --no-launch only downloads.")
    ] = True,
    local: LocalOption = False,
    json_output: JsonOption = False,
) -> None:
    """Download the job's TensorBoard event files and serve them on 127.0.0.1 (Ctrl-C stops).

    While the job is still running the files are downloaded again every 30 s.
    """
    import signal
    import threading

    if launch:
        need_package("tensorboard", "tensorboard", "respot tensorboard")
    conn = connect(local)
    record = conn.record(job_id)
    directory = (logdir or Path("~/.respot/tensorboard").expanduser() / job_id).resolve()
    run_dir = directory / job_id  # TensorBoard names the run after this folder
    files = download_tensorboard(conn, job_id, run_dir)
    if json_output and not launch:
        print_json({"job_id": job_id, "logdir": str(directory), "files": [str(f) for f in files]})
        return
    out = console()
    if not files:
        note = "" if record.state.is_terminal() else " yet (the agent uploads them at checkpoints)"
        out.print(f"no TensorBoard event files for {job_id}{note}")
        if not launch or record.state.is_terminal():
            raise typer.Exit(1)
    else:
        out.print(f"{len(files)} event file(s) in {run_dir}")
    if not launch:
        return
    argv = [
        sys.executable,
        "-m",
        "tensorboard.main",
        "--logdir",
        str(directory),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    from respot.cli.children import port_in_use, run_in_own_group

    if port_in_use(port):
        fail(_port_taken(port))
    out.print(f"TensorBoard on http://127.0.0.1:{port}/ (Ctrl-C stops it)")
    stop = threading.Event()

    def resync() -> None:
        while not stop.wait(TENSORBOARD_SYNC_SECONDS):
            try:
                rec = conn.record(job_id)
                download_tensorboard(conn, job_id, run_dir)
                if rec.state.is_terminal():
                    return
            except Exception as exc:  # the server keeps what it has
                err_console().print(f"[yellow]note:[/] could not refresh: {escape(str(exc))}")

    if not record.state.is_terminal():
        threading.Thread(target=resync, daemon=True).start()
    try:
        code, stopped_by = run_in_own_group(argv)  # its whole group ends with this command
    finally:
        stop.set()
    if stopped_by is not None and stopped_by != signal.SIGINT:
        raise typer.Exit(128 + stopped_by)  # SIGTERM, SIGHUP: the usual 143, 129
    if code not in (0, -2, 130):
        hint = f"; {_port_taken(port)}" if port_in_use(port) else ""
        fail(f"TensorBoard exited with code {code}{hint}")


def _port_taken(port: int) -> str:
    return (
        f"port {port} on 127.0.0.1 is in use (another TensorBoard still running? "
        f"`lsof -i :{port}` names it); stop it, or serve on another port: --port {port + 1}"
    )


# ---- timeline ----------------------------------------------------------------------------------


@reports_errors
def timeline(
    job_id: Annotated[str, typer.Argument(help="The job to draw.")],
    png: Annotated[Path | None, typer.Option(help="Draw the picture into this PNG file.")] = None,
    all_events: Annotated[
        bool, typer.Option("--all", help="Also list the progress entries.")
    ] = False,
    local: LocalOption = False,
    json_output: JsonOption = False,
) -> None:
    """The job's life: every event in order, or --png FILE for the picture."""
    from respot.client.plot import draw_timeline, picture_data, picture_json

    if png is not None:
        need_package("matplotlib", "plot", "respot timeline --png")
    conn = connect(local)
    record = conn.record(job_id)
    if png is not None:
        path = draw_timeline(record, png)
        if json_output:
            print_json({"job_id": job_id, "png": str(path)})
        else:
            console().print(f"wrote {path}")
        return
    if json_output:
        data = picture_json(picture_data(record))
        data["events"] = [e.model_dump(mode="json") for e in record.timeline]
        print_json(data)
        return
    out = console()
    t0 = record.created_at
    for e in record.timeline:
        if e.kind == "progress" and not all_events:
            continue
        offset = (e.at - t0).total_seconds()
        out.print(f"+{offset:8.1f}s  {e.kind:<12} {e.text}", markup=False, highlight=False)
    from respot.core.lifecycle.progress import CHECKPOINT_NOTES_KEPT

    periodic = [
        e for e in record.timeline if e.kind == "checkpoint" and e.data.get("reason") == "periodic"
    ]
    if len(periodic) >= CHECKPOINT_NOTES_KEPT:
        out.print(
            f"(the timeline keeps only the newest {CHECKPOINT_NOTES_KEPT} periodic checkpoints; "
            "notice and final ones are all kept)",
            markup=False,
            highlight=False,
        )
