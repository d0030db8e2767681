"""`respot run | ls | status | cancel`: launch jobs and see where they are."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from respot.cli.context import (
    JsonOption,
    LocalOption,
    connect,
    console,
    fail,
    print_json,
    reports_errors,
)

if TYPE_CHECKING:
    from rich.console import Console

    from respot.client.status import JobStatus
    from respot.core.job import JobRecord

SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="Override a field: --set hyperparameters.lr=0.01, --set instance_types=\\[g5.xlarge]. "
        "Repeatable; the value is read as YAML.",
    ),
]


def _ago(at: datetime | None, now: datetime) -> str:
    from respot.client.progress import format_duration

    if at is None:
        return "-"
    delta = (now - at).total_seconds()
    return f"{format_duration(delta)} ago" if delta >= 0 else f"in {format_duration(-delta)}"


def _when(at: datetime | None) -> str:
    return at.astimezone().strftime("%Y-%m-%d %H:%M:%S") if at else "-"


def _short(at: datetime | None) -> str:
    return at.astimezone().strftime("%m-%d %H:%M:%S") if at else "-"


def _steps(step: int | None, total: int | None) -> str:
    if step is None:
        return "-"
    if total:
        return f"{step:,}/{total:,} ({100 * step / total:.0f}%)"
    return f"{step:,}"


def queue_wait_json(record: JobRecord) -> dict[str, Any] | None:
    """A HELD job's place in the team's queue, in `respot queue`'s fields (None otherwise)."""
    from respot.core.states import JobState
    from respot.queue.words import NOT_PLANNED

    if record.state is not JobState.HELD:
        return None
    wait = record.queue_wait
    if wait is None:
        return {"position": None, "waits_for": None, "reason": NOT_PLANNED,
                "estimated_start": None}  # fmt: skip
    return {
        "position": wait.position,
        "waits_for": wait.kind,
        "reason": wait.reason,
        "estimated_start": wait.estimate.isoformat() if wait.estimate else None,
        "planned_at": wait.at.isoformat(),
    }


def held_lines(records: list[JobRecord]) -> list[str]:
    """One line per HELD job for `respot ls`: '<job>  #3 · <waits for> · estimated start ...'."""
    from respot.queue.words import wait_line

    lines = []
    for r in records:
        said = queue_wait_json(r)
        if said is not None:
            lines.append(
                f"{r.job_id}  "
                + wait_line(said["position"], said["reason"], said["estimated_start"])
            )
    return lines


def status_json(record: JobRecord, now: datetime) -> dict[str, Any]:
    """The record as JSON, plus its cost so far."""
    from respot.core.cost import job_cost

    cost = job_cost(record, now)
    data = record.model_dump(mode="json", exclude_none=True)
    said = queue_wait_json(record)
    if said is not None:
        data["queue"] = said
    data["cost"] = {
        "paid_usd": round(cost.paid_usd, 6),
        "on_demand_usd": None if cost.on_demand_usd is None else round(cost.on_demand_usd, 6),
        "savings_pct": None if cost.savings_pct is None else round(cost.savings_pct, 1),
        "instance_hours": round(cost.instance_hours, 6),
    }
    return data


# ---- run ---------------------------------------------------------------------------------------


@reports_errors
def run(
    job_file: Annotated[
        str | None,
        typer.Argument(
            help="A job file (YAML: the fields of TrainingEnvVar), or a notebook (.ipynb) to "
            "run with Papermill."
        ),
    ] = None,
    argv: Annotated[
        list[str] | None,
        typer.Argument(help="With --command: the program and its arguments, after `--`."),
    ] = None,
    command: Annotated[
        bool,
        typer.Option(
            "--command",
            help="Run a script as it is: `respot run --command -- python train.py --epochs 3` "
            "(source_dir: this directory; name: its name; --set either). docs/commands.md",
        ),
    ] = False,
    set_: SetOption = None,
    parameter: Annotated[
        list[str] | None,
        typer.Option(
            "--parameter",
            "-p",
            help="A hyperparameter (a notebook's parameter): -p lr=0.01. Repeatable; YAML value.",
        ),
    ] = None,
    rerun: Annotated[
        str | None,
        typer.Option(help="Launch this job again: same spec, same code (same SHA-256)."),
    ] = None,
    wait: Annotated[
        bool, typer.Option(help="Follow the job to its end with a progress bar.")
    ] = False,
    timeout: Annotated[
        float | None, typer.Option(help="With --wait: give up waiting after this many seconds.")
    ] = None,
    check: Annotated[
        bool,
        typer.Option(
            help="Only validate the job file and print its cost estimate by its deadline "
            "(spot and on-demand bounds at today's prices); submit nothing."
        ),
    ] = False,
    pull: Annotated[
        Path | None,
        typer.Option(
            "--pull", help="With --wait: download the results to this directory when it ends."
        ),
    ] = None,
    local: LocalOption = False,
    json_output: JsonOption = False,
) -> None:
    """Submit a job from a YAML file (or --rerun an earlier one); --wait to follow it."""
    from respot.spec.jobfile import load_job_file, load_notebook_job, parameter_override

    overrides = list(set_ or []) + [parameter_override(p) for p in parameter or []]
    job_file, argv = _command_line(command, job_file, argv or [])
    if (job_file is None and not command) == (rerun is None):
        fail("give a job file, or --rerun JOB (not both), or --command -- ARGV")
    if job_file is not None or command:
        if command:
            job = _command_job(job_file, argv, overrides)
        else:
            assert job_file is not None
            load = load_notebook_job if Path(job_file).suffix == ".ipynb" else load_job_file
            job = load(job_file, overrides)
        if not json_output:
            _warn_unsaved(job.spec)
        if check:
            estimate, source = _cost_check(job.spec, local)
            if json_output:
                print_json(
                    {
                        **job.spec.model_dump(mode="json", exclude_none=True),
                        "cost_estimate": estimate_json(estimate, source),
                    }
                )
            else:
                what = job.spec.entry_point or " ".join(job.spec.command or [])
                console().print(f"{job_file or '--command'}: ok ({job.spec.name}, {what})")
                for line in estimate_lines(estimate, source):
                    console().print(line, markup=False)
            return
        conn = connect(local)
        from respot.client.handle import run as submit
        from respot.exceptions import SpecError
        from respot.spec.jobfile import name_overrides

        try:
            handle = submit(job.spec, deployment=conn.deployment, session=conn.session)
        except SpecError as exc:  # the deployment's own checks: name the --set they concern
            raise SpecError(name_overrides(exc.problems, overrides)) from None
    else:
        assert rerun is not None
        if check:
            fail("--check validates a job file; it has nothing to check with --rerun")
        conn = connect(local)
        from respot.client.rerun import rerun as submit_again

        handle = submit_again(
            rerun, deployment=conn.deployment, session=conn.session, overrides=overrides
        )
    flag = " --local" if conn.local else ""
    if pull is not None and not wait:
        fail("--pull downloads the results when the job ends: add --wait")
    if not wait:
        if json_output:
            print_json({"job_id": handle.job_id, "state": "SUBMITTED", "rerun_of": rerun})
        else:
            out = console()
            out.print(
                f"submitted [bold]{handle.job_id}[/]" + (f" (rerun of {rerun})" if rerun else "")
            )
            out.print(f"  respot status {handle.job_id}{flag}")
            out.print(f"  respot logs {handle.job_id}{flag} --follow")
        return
    if not json_output:
        console().print(
            f"submitted [bold]{handle.job_id}[/]" + (f" (rerun of {rerun})" if rerun else "")
        )
    try:
        status = handle.wait(
            timeout, poll_seconds=1.0 if conn.local else 5.0, show_progress=not json_output
        )
    except TimeoutError as exc:
        fail(f"{exc}; it goes on: `respot status {handle.job_id}{flag}`")
    if pull is not None:
        from respot.cli.results import pull_into
        from respot.cli.results import report as report_pull

        pulled = pull_into(conn, handle.job_id, pull, False, json_output)
        if not json_output:
            report_pull(pulled, False)
    _finish(status, json_output)


def _cost_check(spec: Any, local: bool) -> tuple[Any, dict[str, Any]]:
    """The job's cost estimate at today's prices (`--check`): reads prices, spends nothing."""
    from respot.client.costcheck import ON_DEMAND_SOURCE, SPOT_SOURCE, check_cost

    ec2 = None
    region = None
    allowed: tuple[str, ...] | None = None
    unreached: str | None = None
    try:
        conn = connect(local)
        ec2 = conn.client("ec2")
        region = conn.deployment.region or conn.session.region_name
        allowed = conn.deployment.instance_types
    except (Exception, typer.Exit) as exc:  # no deployment: the on-demand bounds still print
        unreached = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    types = list(spec.instance_types or allowed or [])
    estimate, quotes = check_cost(spec, types, ec2, unreached=unreached)
    if not types:
        estimate.notes.insert(
            0, "no instance_types in the job and the deployment publishes none: give some"
        )
    source = {
        "spot_prices": SPOT_SOURCE.format(region=region or "?") if ec2 is not None else None,
        "on_demand_prices": ON_DEMAND_SOURCE,
        "quotes": [q.__dict__ for q in quotes],
    }
    return estimate, source


def estimate_json(estimate: Any, source: dict[str, Any]) -> dict[str, Any]:
    """`run --check --json`'s cost_estimate: the bounds, the prices and where they come from."""

    def usd(value: float | None) -> float | None:
        return None if value is None else round(value, 4)

    return {
        "billed_hours": usd(estimate.billed_hours),
        "hours_to_deadline": usd(estimate.hours_to_deadline),
        "spot_usd": usd(estimate.spot_usd),
        "spot_type": estimate.spot_type,
        "on_demand_usd": usd(estimate.on_demand_usd),
        "on_demand_type": estimate.on_demand_type,
        "worst_by_deadline_usd": usd(estimate.worst_usd),
        "notes": list(estimate.notes),
        **source,
    }


def estimate_lines(estimate: Any, source: dict[str, Any]) -> list[str]:
    """The human lines of `run --check`'s cost estimate."""

    def usd(value: float | None) -> str:
        return "unknown" if value is None else f"${value:,.2f}"

    lines = ["cost estimate (nothing submitted, nothing spent):"]
    if estimate.billed_hours is not None:
        by = (
            f", {estimate.hours_to_deadline:.2f} h to its deadline"
            if estimate.hours_to_deadline is not None
            else ", no deadline"
        )
        lines.append(
            f"  {estimate.billed_hours:.2f} billed hours (estimated_runtime + changeover){by}"
        )
        lines.append(
            f"  spot (never interrupted)       {usd(estimate.spot_usd)}"
            + (f" on {estimate.spot_type}, at today's spot price" if estimate.spot_type else "")
        )
        lines.append(
            f"  on-demand (spot never comes)   {usd(estimate.on_demand_usd)}"
            + (f" on {estimate.on_demand_type}" if estimate.on_demand_type else "")
        )
        how = (
            " (spot through the deadline's slack, then the whole job on on-demand)"
            if estimate.hours_to_deadline is not None
            else " (max_runtime at the dearest price)"
            if estimate.worst_usd is not None
            else ""
        )
        lines.append(f"  at most, by the policy         {usd(estimate.worst_usd)}{how}")
    for note in estimate.notes:
        lines.append(f"  note: {note}")
    lines.append(
        f"  prices: spot from {source['spot_prices'] or 'nowhere (unknown)'}; "
        f"on-demand from {source['on_demand_prices']}"
    )
    return lines


def _command_line(
    command: bool, job_file: str | None, argv: list[str]
) -> tuple[str | None, list[str]]:
    """`run [job.yaml] --command -- ARGV`: click hands ARGV's first word to JOB_FILE when no
    job file comes first; a job file is a file ending .yaml/.yml/.json."""
    if not command:
        if argv:
            fail(f"unexpected arguments {' '.join(argv)!r}: to run a script, add --command")
        return job_file, argv
    if job_file is not None and not (
        job_file.endswith((".yaml", ".yml", ".json")) and Path(job_file).is_file()
    ):
        return None, [job_file, *argv]
    if not argv:
        fail("--command needs the program and its arguments after `--`, e.g. "
             "respot run --command -- python train.py --epochs 3")  # fmt: skip
    return job_file, argv


def _command_job(job_file: str | None, argv: list[str], overrides: list[str]) -> Any:
    import json

    from respot.spec.jobfile import load_command_job, load_job_file

    if job_file is None:
        return load_command_job(argv, overrides)
    return load_job_file(job_file, [*overrides, f"command={json.dumps(argv)}"])


def _warn_unsaved(spec: Any) -> None:
    """`run` says so before submitting when nothing in the job can checkpoint."""
    from respot.spec.static import checkpoint_warnings

    for warning in checkpoint_warnings(spec):
        console().print(f"[yellow]warning[/]: {warning}")


def _finish(status: JobStatus, json_output: bool) -> None:
    record = status.record
    now = datetime.now(UTC)
    if json_output:
        print_json(status_json(record, now) if record else {"job_id": status.job_id})
    elif record is not None:
        from respot.core.cost import job_cost

        cost = job_cost(record, now)
        saved = ""
        if cost.savings_pct is not None:
            saved = f", {cost.savings_pct:.0f}% below on-demand"
        why = ""
        if record.reason and record.state.value != "COMPLETED":
            why = f" — {record.reason}"
        console().print(
            f"{record.job_id} {record.state.value}: step "
            f"{_steps(status.step, status.total_steps)}, {record.interruptions} "
            f"interruption(s), paid ${cost.paid_usd:.4f}{saved}{why}",
            markup=False,
        )
    raise typer.Exit(0 if status.state == "COMPLETED" else 1)


# ---- ls ----------------------------------------------------------------------------------------


@reports_errors
def ls(
    limit: Annotated[int, typer.Option(help="Show at most this many jobs, newest first.")] = 20,
    live: Annotated[bool, typer.Option(help="Only jobs that are not over.")] = False,
    local: LocalOption = False,
    json_output: JsonOption = False,
) -> None:
    """List recent jobs: state, progress, interruptions, cost."""
    from respot.core.cost import job_cost

    conn = connect(local)
    now = datetime.now(UTC)
    records = conn.recent(limit if not live else max(limit, 200))
    if live:
        records = [r for r in records if not r.state.is_terminal()][:limit]
    rows = []
    for r in records:
        cost = job_cost(r, now)
        rows.append(
            {
                "job_id": r.job_id,
                "state": r.state.value,
                "step": r.progress.step,
                "total_steps": r.progress.total_steps,
                "interruptions": r.interruptions,
                "attempts": len(r.attempts),
                "created_at": r.created_at.isoformat(),
                "paid_usd": round(cost.paid_usd, 6),
                "owner": r.submission.submitted_by,
                **({"queue": q} if (q := queue_wait_json(r)) is not None else {}),
            }
        )
    if json_output:
        print_json(rows)
        return
    if not rows:
        if live:
            console().print("no live jobs (`respot ls` lists the finished ones too)")
        else:
            console().print("no jobs yet: `respot run job.yaml` submits one")
        return
    from rich.table import Table

    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("job", "state", "progress", "interr.", "submitted", "paid", "owner"):
        table.add_column(col, justify="right" if col in ("interr.", "paid") else "left")
    for r, row in zip(records, rows, strict=True):
        table.add_row(
            r.job_id,
            _state_text(r.state.value),
            _steps(r.progress.step, r.progress.total_steps),
            str(r.interruptions),
            _ago(r.created_at, now),
            f"${row['paid_usd']:.4f}",
            r.submission.submitted_by or "-",
        )
    console().print(table)
    held = held_lines(records)
    if held:
        out = console()
        out.print("[bold]held in the team's queue[/] (position · waits for · estimated start)")
        for line in held:
            out.print(f"  {line}", markup=False)


def _state_text(state: str) -> str:
    colour = {
        "COMPLETED": "green",
        "FAILED": "red",
        "CANCELLED": "yellow",
        "INTERRUPTED": "red",
        "RUNNING": "cyan",
    }.get(state, "")
    return f"[{colour}]{state}[/]" if colour else state


# ---- status ------------------------------------------------------------------------------------


@reports_errors
def status(
    job_id: Annotated[str, typer.Argument(help="The job id (`respot ls` lists them).")],
    events: Annotated[int, typer.Option(help="How many recent events to show.")] = 12,
    local: LocalOption = False,
    json_output: JsonOption = False,
) -> None:
    """A job's state, progress, attempts, interruptions, checkpoint, cost and provenance."""
    conn = connect(local)
    record = conn.record(job_id)
    now = datetime.now(UTC)
    if json_output:
        print_json(status_json(record, now))
        return
    render_status(record, console(), now, events=events)


def render_status(record: JobRecord, out: Console, now: datetime, *, events: int = 12) -> None:
    """The human view of `respot status`."""
    from rich.table import Table

    from respot.client.progress import format_metrics
    from respot.core.cost import job_cost

    spec = record.spec
    sub = record.submission
    prov = sub.provenance
    attempt = record.current.number if record.current else 0
    out.print(
        f"[bold]{record.job_id}[/]  {_state_text(record.state.value)}  "
        f"(attempt {attempt}, {record.interruptions} interruption(s))"
    )
    if record.reason:
        out.print(f"  reason      {record.reason}", markup=False)
    stopping = record.policy.get("stopping")
    if stopping and not record.state.is_terminal():  # a platform rule's stop (core.lifecycle.stops)
        out.print(f"  stopping    {stopping['reason']} (checkpoints, then stops)", markup=False)
    said = queue_wait_json(record)
    if said is not None:
        from respot.queue.words import wait_line

        out.print(
            "  queue       " + wait_line(said["position"], said["reason"], said["estimated_start"]),
            markup=False,
        )
    prog = record.progress
    metrics = format_metrics(prog.metrics, limit=6)
    out.print(
        f"  progress    step {_steps(prog.step, prog.total_steps)}  {metrics}  "
        f"(reported {_ago(prog.at, now)})",
        markup=False,
    )
    if prog.gpus:
        from respot.wire.gpu import per_gpu_lines, summary

        out.print(f"  gpu         {summary(prog.gpus)}", markup=False)
        if len(prog.gpus) > 1:
            for line in per_gpu_lines(prog.gpus):
                out.print(f"              {line}", markup=False)
    if record.checkpoint:
        cp = record.checkpoint
        out.print(
            f"  checkpoint  step {cp.step:,} from attempt {cp.attempt}, {_ago(cp.at, now)}",
            markup=False,
        )
    elif record.interruptions:  # no silent loss of work (docs/commands.md)
        out.print("  checkpoint  none: restarts from zero: this job never checkpointed")
    else:
        out.print("  checkpoint  none yet")
    deadline = "none"
    if spec.deadline:
        deadline = f"{_when(spec.deadline)} ({_ago(spec.deadline, now)})"
    out.print(
        f"  job         {spec.name} · "
        f"{spec.entry_point or ' '.join(spec.command or []) or spec.image} · seed {spec.seed} · "
        f"deadline {deadline}",
        markup=False,
    )
    out.print(
        f"  submitted   {_when(sub.submitted_at)} by {sub.submitted_by or '?'}"
        + (f" · finished {_when(record.finished_at)}" if record.finished_at else ""),
        markup=False,
    )
    if prov is not None:
        git = "not a git checkout"
        if prov.git_commit:
            git = f"{prov.git_commit[:12]}{' (dirty)' if prov.git_dirty else ''}"
            if prov.git_remote:
                git += f" {prov.git_remote}"
        out.print(f"  code        git {git}", markup=False)
        if sub.code:
            out.print(
                f"              zip sha256 {sub.code.sha256[:16]}… ({sub.code.size_bytes:,} bytes)",
                markup=False,
            )
        packages = ", ".join(f"{k} {v}" for k, v in sorted(prov.packages.items()))
        out.print(
            f"  environment python {prov.python_version or '?'} · {packages or 'no packages'} · "
            f"host {prov.host or '?'}",
            markup=False,
        )
        if spec.image:
            out.print(
                f"  image       {spec.image} · digest {prov.image_digest or 'not pinned'}",
                markup=False,
            )
        if prov.rerun_of:
            out.print(f"  rerun of    {prov.rerun_of}", markup=False)
    cost = job_cost(record, now)
    line = f"  cost        paid ${cost.paid_usd:.4f} over {cost.instance_hours:.3f} instance-h"
    if cost.on_demand_usd is not None:
        line += f" · on-demand ${cost.on_demand_usd:.4f}"
    if cost.savings_pct is not None:
        line += f" · saved {cost.savings_pct:.0f}%"
    out.print(line, markup=False)

    if record.attempts:
        table = Table(title="attempts", title_justify="left", box=None, header_style="bold")
        for col in ("#", "market", "type", "zone", "instance", "$/h", "launched", "ended",
                    "end", "resumed", "last step"):  # fmt: skip
            table.add_column(col)
        for a in record.attempts:
            table.add_row(
                str(a.number),
                a.placement.market.value,
                a.placement.instance_type,
                a.placement.availability_zone,
                a.instance_id or "-",
                f"{a.price_per_hour:.4f}" if a.price_per_hour is not None else "-",
                _short(a.launched_at),
                _short(a.ended_at),
                a.end.value if a.end else "running",
                "-" if a.restored_step is None else f"{a.restored_step:,}",
                "-" if a.last_step is None else f"{a.last_step:,}",
            )
        out.print(table)
    # The newest checkpoint is shown above; the list is the job's story.
    story = [e for e in record.timeline if e.kind not in ("progress", "checkpoint")][-events:]
    if story and events > 0:
        out.print("[bold]events[/]")
        for e in story:
            out.print(f"  {_when(e.at)}  {e.kind:<12} {e.text}", markup=False)


# ---- cancel ------------------------------------------------------------------------------------

# How long `cancel --checkpoint --wait` waits: the save and the agent's stop, which the control
# plane bounds by its heartbeat timeout (10 min by default) and the next reconcile tick (60 s).
CHECKPOINT_WAIT_SECONDS = 15 * 60.0


@reports_errors
def cancel(
    job_id: Annotated[str, typer.Argument(help="The job to cancel.")],
    reason: Annotated[str, typer.Option(help="Why (shown in status and Slack).")] = (
        "cancelled by user"
    ),
    wait: Annotated[bool, typer.Option(help="Wait until the job is CANCELLED.")] = False,
    checkpoint: Annotated[
        bool,
        typer.Option(
            "--checkpoint",
            help="Save a checkpoint first: a training job's agent checkpoints and stops, then "
            "the job is CANCELLED with that checkpoint kept (a job not training: at once).",
        ),
    ] = False,
    local: LocalOption = False,
    json_output: JsonOption = False,
) -> None:
    """Cancel a job: its instances are terminated, its checkpoints kept."""
    conn = connect(local)
    record = conn.record(job_id)
    if record.state.is_terminal():
        if json_output:
            print_json({"job_id": job_id, "state": record.state.value, "cancelled": False})
        else:
            console().print(f"{job_id} is already {record.state.value}; nothing to cancel")
        return
    handle = conn.handle(job_id)
    handle.cancel(reason, checkpoint_first=checkpoint)
    state = "CHECKPOINT AND STOP REQUESTED" if checkpoint else "CANCEL REQUESTED"
    if wait:
        # A checkpoint first takes as long as the save and the agent's stop, which the control
        # plane bounds by its heartbeat timeout (then it terminates the instance).
        limit = CHECKPOINT_WAIT_SECONDS if checkpoint else 60.0
        try:
            state = handle.wait(limit, poll_seconds=0.5 if conn.local else 2.0).state
        except TimeoutError as exc:
            flag = " --local" if conn.local else ""
            fail(f"{exc} after {limit:.0f} s; it goes on: `respot status {job_id}{flag}`")
    if json_output:
        print_json({"job_id": job_id, "state": state, "cancelled": True})
    else:
        console().print(f"{job_id}: {state}")
