"""The `respot` command: launch, watch and account for spot training jobs from a shell."""

from __future__ import annotations

import typer

from respot.cli import (
    bench,
    doctor,
    jobs,
    local,
    notebook,
    observe,
    queue,
    replay,
    results,
    selftest,
    sweep,
)

app = typer.Typer(
    name="respot",
    help="Train on spot GPUs without babysitting. Every command takes --help.",
    no_args_is_help=True,
    add_completion=False,
)
app.command()(jobs.run)
app.command()(jobs.ls)
app.command()(jobs.status)
app.command()(observe.logs)
app.command()(jobs.cancel)
app.command()(queue.queue)
app.command()(queue.budget)
app.command()(results.pull)
app.command()(observe.cost)
app.command()(observe.tensorboard)
app.command()(observe.timeline)
app.command()(doctor.doctor)
app.command()(selftest.selftest)
app.command(cls=bench.SpaceSeparatedLists)(replay.replay)
app.add_typer(bench.app, name="bench", help="Benchmarks: the placement policy on spot traces.")
app.add_typer(sweep.app, name="sweep", help="Optuna sweeps on spot: each trial is a respot job.")
app.add_typer(
    notebook.app, name="notebook", help="JupyterLab workspaces on spot GPUs (docs/notebooks.md)."
)
app.add_typer(local.app, name="local", help="The whole system on this machine, no AWS needed.")


def main() -> None:
    """Console-script entry point."""
    app()
