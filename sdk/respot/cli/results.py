"""`respot pull`: a job's outputs, logs and final checkpoint on this machine, verified."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from respot.cli.context import (
    Connection,
    JsonOption,
    LocalOption,
    connect,
    console,
    err_console,
    is_terminal_output,
    print_json,
    reports_errors,
)

if TYPE_CHECKING:
    from respot.client.pull import PullResult

CheckpointOption = Annotated[
    bool,
    typer.Option("--checkpoint", help="Also the newest complete checkpoint, into DIR/checkpoint/."),
]


@reports_errors
def pull(
    job_id: Annotated[str, typer.Argument(help="The job whose results to download.")],
    directory: Annotated[
        Path | None, typer.Argument(help="Where to put them (default: ./JOB).")
    ] = None,
    checkpoint: CheckpointOption = False,
    local: LocalOption = False,
    json_output: JsonOption = False,
) -> None:
    """Download a finished job's outputs and logs (SHA-256 checked) into DIR/outputs, DIR/logs."""
    conn = connect(local)
    result = pull_into(conn, job_id, directory or Path(job_id), checkpoint, json_output)
    report(result, json_output)


def pull_into(
    conn: Connection, job_id: str, directory: Path, checkpoint: bool, json_output: bool
) -> PullResult:
    """Pull `job_id` into `directory` with progress bars on a terminal."""
    from respot.client.pull import RichTransferProgress, pull_job

    record = conn.record(job_id)
    progress = (
        RichTransferProgress(err_console()) if is_terminal_output() and not json_output else None
    )
    return pull_job(
        record,
        conn.client("s3"),
        conn.deployment.bucket,
        directory,
        checkpoint=checkpoint,
        progress=progress,
    )


def report(result: PullResult, json_output: bool) -> None:
    """Say what was written where."""
    if json_output:
        print_json(result_json(result))
        return
    out = console()
    for note in result.notes:
        err_console().print(f"[yellow]note:[/] {note}", highlight=False)
    verified = sum(1 for f in result.outputs if f.verified)
    out.print(
        f"{result.job_id} ({result.state}): {len(result.outputs)} output file(s), "
        f"{verified} SHA-256 verified, {len(result.logs)} log file(s), "
        f"{result.bytes / 2**20:,.1f} MiB in {result.seconds:.1f}s -> {result.directory}",
        markup=False,
    )
    for f in result.outputs:
        out.print(
            f"  {f.path}  {f.size:,} bytes"
            + (f"  sha256 {f.sha256[:12]}… ok" if f.sha256 else "  (size checked)"),
            markup=False,
        )
    if result.checkpoint is not None:
        cp = result.checkpoint
        out.print(
            f"  {result.directory / 'checkpoint'}  step {cp.step:,} of attempt {cp.attempt}, "
            f"{len(cp.files)} file(s), {cp.size_bytes:,} bytes, verified",
            markup=False,
        )


def result_json(result: PullResult) -> dict[str, Any]:
    """The pull as JSON."""
    cp = result.checkpoint
    return {
        "job_id": result.job_id,
        "state": result.state,
        "directory": str(result.directory),
        "outputs_outcome": result.outputs_outcome,
        "outputs": [
            {"path": str(f.path), "size": f.size, "sha256": f.sha256, "verified": f.verified}
            for f in result.outputs
        ],
        "logs": [str(f.path) for f in result.logs],
        "checkpoint": None
        if cp is None
        else {"step": cp.step, "attempt": cp.attempt, "manifest": cp.key, "files": len(cp.files)},
        "notes": result.notes,
        "seconds": round(result.seconds, 3),
    }
