"""`respot sweep FILE | status | plot | stop`: Optuna sweeps whose trials are respot jobs.

respot sweep sweep.yaml            start a sweep (same as `respot sweep start sweep.yaml`)
respot sweep status SWEEP          the trials and the best so far
respot sweep plot SWEEP --png F    optimization history and parameter importances
respot sweep stop SWEEP            no new trials; running trials are cancelled
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from respot.cli.context import JsonOption, LocalOption, connect, console, print_json, reports_errors

if TYPE_CHECKING:
    from respot.sweep.client import SweepHandle, SweepStatus


class _FileMeansStart(TyperGroup):
    """`respot sweep sweep.yaml` is `respot sweep start sweep.yaml`."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:  # typer vendors click
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["start", *args]
        return super().resolve_command(ctx, args)


app = typer.Typer(
    cls=_FileMeansStart,
    no_args_is_help=True,
    help="Optuna sweeps on spot: every trial is a respot job; the control plane runs the study.",
)


def _handle(sweep_id: str, local: bool) -> SweepHandle:
    from respot.sweep.client import SweepHandle

    conn = connect(local)
    return SweepHandle(sweep_id, conn.deployment, conn.session)


@app.command("start")
@reports_errors
def start(
    file: Annotated[Path, typer.Argument(help="The sweep file (YAML): search space, metric, job.")],
    local: LocalOption = False,
    wait: Annotated[bool, typer.Option("--wait", help="Show the trials until it ends.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Start a sweep. Checked here first: nothing is spent if the file has a problem."""
    from respot.sweep.client import load_sweep_file, sweep

    spec = load_sweep_file(file)
    conn = connect(local)
    handle = sweep(spec, deployment=conn.deployment, session=conn.session)
    if as_json:
        print_json({"sweep_id": handle.sweep_id})
    else:
        console().print(
            f"sweep [bold]{handle.sweep_id}[/]: {spec.n_trials} trials, {spec.parallelism} at a "
            f"time, {spec.direction} {_esc(spec.metric)}\n"
            f"  respot sweep status {handle.sweep_id}"
        )
    if wait:
        # A line per change as it happens, on a terminal or not (a CI log, `| tee`): nothing
        # is held back until the end.
        final = handle.wait(poll_seconds=5.0, on_change=_print_progress)
        _print_status(final)


def progress_lines(before: SweepStatus | None, now: SweepStatus) -> list[str]:
    """Plain lines saying what changed between two polls of a sweep (`--wait`)."""

    def plain(value: Any) -> str:
        return f"{value:.6g}" if isinstance(value, float) else str(value)

    seen = {t.number: t.state.value for t in before.trials} if before else {}
    metric = now.record.spec.metric if now.record is not None else "value"
    lines = []
    for trial in now.trials:
        state = trial.state.value
        if seen.get(trial.number) == state:
            continue
        if state == "RUNNING":
            params = ", ".join(f"{k}={plain(v)}" for k, v in trial.params.items())
            lines.append(f"trial {trial.number} started ({params}) as job {trial.job_id}")
        else:
            value = f" {metric}={plain(trial.value)}" if trial.value is not None else ""
            why = f": {trial.reason}" if trial.reason else ""
            lines.append(f"trial {trial.number} {state}{value}{why}")
    ended = sum(1 for t in now.trials if t.state.value != "RUNNING")
    running = len(now.trials) - ended
    best = now.best
    best_text = f"; best trial {best.number} ({plain(best.value)})" if best else ""
    lines.append(
        f"sweep {now.sweep_id} {now.state}: {ended}/{now.n_trials} trials ended, "
        f"{running} running{best_text}"
    )
    return lines


def _print_progress(before: SweepStatus | None, now: SweepStatus) -> None:
    out = console()
    for line in progress_lines(before, now):
        out.print(_esc(line), soft_wrap=True)


@app.command("status")
@reports_errors
def status(
    sweep_id: Annotated[str, typer.Argument(help="The sweep's id (printed when it started).")],
    local: LocalOption = False,
    as_json: JsonOption = False,
) -> None:
    """The sweep's trials (state, parameters, value) and the best so far."""
    from respot.sweep.exceptions import SweepNotFoundError

    current = _handle(sweep_id, local).status()
    if current.record is None:
        raise SweepNotFoundError(
            f"no sweep {sweep_id!r} in this deployment (just started? try again in a moment)"
        )
    if as_json:
        print_json(current.record.model_dump(mode="json", exclude_none=True))
        return
    _print_status(current)


@app.command("plot")
@reports_errors
def plot(
    sweep_id: Annotated[str, typer.Argument(help="The sweep's id.")],
    png: Annotated[Path, typer.Option("--png", help="Where to write the picture.")] = Path(
        "sweep.png"
    ),
    local: LocalOption = False,
) -> None:
    """Optimization history and parameter importances, as one PNG."""
    from respot.sweep.plot import plot_study

    handle = _handle(sweep_id, local)
    written = plot_study(handle.study(), png, title=f"sweep {sweep_id}")
    console().print(f"wrote {_esc(str(written))}")


@app.command("stop")
@reports_errors
def stop(
    sweep_id: Annotated[str, typer.Argument(help="The sweep's id.")],
    local: LocalOption = False,
) -> None:
    """Stop the sweep: no new trials; running trials are cancelled (checkpoints kept)."""
    _handle(sweep_id, local).stop()
    console().print(f"asked to stop sweep {_esc(sweep_id)}")


def _esc(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def _value(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.6g}" if isinstance(value, float) else _esc(str(value))


def _print_status(current: SweepStatus) -> None:
    from rich.table import Table

    record = current.record
    assert record is not None
    spec = record.spec
    table = Table(title=f"sweep {_esc(current.sweep_id)}: {current.state.lower()}")
    table.add_column("#", justify="right")
    table.add_column("state")
    table.add_column(_esc(spec.metric), justify="right")
    table.add_column("params")
    table.add_column("job / reason")
    best = current.best
    for trial in current.trials:
        mark = " *" if best is not None and trial.number == best.number else ""
        params = ", ".join(f"{k}={_value(v)}" for k, v in trial.params.items())
        note = _esc(trial.reason) if trial.reason else _esc(trial.job_id)
        table.add_row(f"{trial.number}{mark}", trial.state.value, _value(trial.value), params, note)
    out = console()
    out.print(table)
    ended = sum(1 for t in current.trials if t.state.value != "RUNNING")
    out.print(f"{ended}/{current.n_trials} trials ended")
    if best is not None:
        params = ", ".join(f"{k}={_value(v)}" for k, v in best.params.items())
        out.print(f"best: trial {best.number}, {_esc(spec.metric)}={_value(best.value)} ({params})")
    if record.reason and current.is_terminal:
        out.print(_esc(record.reason))
