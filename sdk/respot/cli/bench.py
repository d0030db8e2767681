"""`respot bench ...`: benchmarks that run on this machine, no AWS needed."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True)


@app.callback()
def _bench() -> None:
    """Benchmarks of respot's policies and control plane."""
