"""`respot local ...`: the whole system on this machine, with no AWS account."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True)


@app.callback()
def _local() -> None:
    """The embedded local runtime: moto server, handlers, spot market, local instances."""


@app.command()
def demo(
    interruptions: int = typer.Option(2, help="Spot interruptions to inflict on the job."),
    time_scale: float = typer.Option(1 / 30, help="Real seconds per simulated second."),
) -> None:
    """Train the digits example, interrupted, to completion; end with one line of JSON."""
    from infra.local.demo import main

    code = main(["--interruptions", str(interruptions), "--time-scale", str(time_scale)])
    raise typer.Exit(code)
