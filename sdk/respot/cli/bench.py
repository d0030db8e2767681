"""`respot bench ...`: benchmarks that run on this machine, no AWS needed."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperCommand

if TYPE_CHECKING:
    from collections.abc import Sequence

    from respot.policy.bench import CellResult
    from respot.policy.placement_bench import PlacementCellResult
    from respot.policy.pools import Pool

app = typer.Typer(no_args_is_help=True)


@app.callback()
def _bench() -> None:
    """Benchmarks of respot's policies and control plane."""


class SpaceSeparatedLists(TyperCommand):
    """Accepts `--opt 1 2 3` for list options, as well as click's `--opt 1 --opt 2 --opt 3`."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # ctx: typer's click Context
        """Repeat the flag of a list option before each further value that follows it."""
        # Duck-typed: typer builds its options on its own copy of click's classes.
        options = {name: param for param in self.params for name in getattr(param, "opts", ())}
        rewritten: list[str] = []
        collecting: str | None = None  # list option whose extra values are being read
        value_expected = False
        for index, arg in enumerate(args):
            if value_expected:
                rewritten.append(arg)
                value_expected = False
            elif arg == "--":
                rewritten.extend(args[index:])
                break
            elif arg.startswith("-") and not _is_number(arg):
                name, has_value, _ = arg.partition("=")
                option = options.get(name)
                collecting = name if getattr(option, "multiple", False) else None
                value_expected = (
                    option is not None and not getattr(option, "is_flag", False) and not has_value
                )
                rewritten.append(arg)
            elif collecting is not None:
                rewritten.extend([collecting, arg])
            else:
                rewritten.append(arg)
        return super().parse_args(ctx, rewritten)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@app.command("policy", cls=SpaceSeparatedLists)
def policy(
    *,
    traces: Annotated[
        Path, typer.Option("--traces", help="Directory of trace files (*.json), any tick length.")
    ],
    work_hours: Annotated[float, typer.Option(help="Compute the job needs, C.")] = 48.0,
    deadline_hours: Annotated[
        list[float] | None,
        typer.Option(help="Deadlines D from the job's start, several (default: 52 60 70)."),
    ] = None,
    changeover_hours: Annotated[
        list[float] | None,
        typer.Option(help="Changeover delays d, several (default: 0.05 0.2)."),
    ] = None,
    windows: Annotated[int, typer.Option(help="Windows per trace.")] = 300,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object per (D, d) cell per line.")
    ] = False,
    workers: Annotated[
        int | None, typer.Option(help="Processes to use (default: all CPUs).")
    ] = None,
) -> None:
    """Cost to finish by the deadline on spot traces (benchmarks/spot-policy.md).

    Example: respot bench policy --traces DIR --work-hours 48 --deadline-hours 52 60 70
    --changeover-hours 0.05 0.2 --windows 300 --json
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from respot.policy.bench import BENCH_POLICIES, Cell, run_bench
    from respot.policy.exceptions import PolicyError
    from respot.policy.model import load_traces

    err = Console(stderr=True)
    cells = [
        Cell(work_hours, deadline, changeover)
        for deadline in deadline_hours or [52.0, 60.0, 70.0]
        for changeover in changeover_hours or [0.05, 0.2]
    ]
    started = time.monotonic()
    try:
        trace_set = load_traces(traces)
        total = len(cells) * len(trace_set) * windows * len(BENCH_POLICIES)
        with Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err,
            transient=True,
            disable=not err.is_terminal,
        ) as progress:
            bar = progress.add_task("policy-windows", total=total)
            results = run_bench(
                trace_set,
                cells,
                windows,
                workers=workers,
                on_progress=lambda n: progress.advance(bar, n),
            )
    except PolicyError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from exc
    elapsed = time.monotonic() - started
    if as_json:
        for result in results:
            sys.stdout.write(json.dumps(result.to_json()) + "\n")
        sys.stdout.flush()
    else:
        Console().print(_table(results, traces, len(trace_set)))
    typer.echo(f"{len(cells)} cell(s) in {elapsed:.0f} s", err=True)


def _table(results: list[CellResult], traces: Path, n_traces: int) -> object:
    from rich.table import Table

    from respot.policy.bench import BENCH_POLICIES

    first = results[0]
    table = Table(
        title=(
            f"Normalized cost to finish by the deadline, C = {first.cell.work_hours:g} h\n"
            f"{traces}: {n_traces} traces x {first.windows_per_trace} windows"
        ),
        caption="gap closed = (UP - respot) / (UP - omniscient), on the means",
    )
    for header in ["D (h)", "d (h)", "policy", "mean", "p75", "missed", "gap closed"]:
        table.add_column(header, justify="left" if header == "policy" else "right")
    for result in results:
        closed = result.gap_closed()
        for name in BENCH_POLICIES:
            r = result.results[name]
            table.add_row(
                f"{result.cell.deadline_hours:g}" if name == BENCH_POLICIES[0] else "",
                f"{result.cell.changeover_hours:g}" if name == BENCH_POLICIES[0] else "",
                name,
                f"{r.mean:.4f}",
                f"{r.p75:.4f}",
                str(r.misses),
                ("n/a" if math.isnan(closed) else f"{closed:.0%}") if name == "respot" else "",
                end_section=name == BENCH_POLICIES[-1],
            )
    return table


@app.command("placement", cls=SpaceSeparatedLists)
def placement(
    *,
    traces: Annotated[
        list[Path],
        typer.Option(
            "--traces",
            help="A directory of trace files (*.json), or the files: one pool per file.",
        ),
    ],
    work_hours: Annotated[float, typer.Option(help="Compute the job needs, C.")] = 48.0,
    deadline_hours: Annotated[
        list[float] | None,
        typer.Option(help="Deadlines D from the job's start, several (default: 52 60 70)."),
    ] = None,
    changeover_hours: Annotated[
        list[float] | None,
        typer.Option(help="Changeover delays d, several (default: 0.05 0.2)."),
    ] = None,
    windows: Annotated[int, typer.Option(help="Windows of the set (each spans every pool).")] = 20,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object per (D, d) cell per line.")
    ] = False,
    workers: Annotated[
        int | None, typer.Option(help="Processes to use (default: all CPUs).")
    ] = None,
) -> None:
    """Cost to finish by the deadline when spot can be chased across pools (multi-zone.md).

    respot is the policy as the control plane runs it for one job (its own sightings);
    respot-omniscient-view is the same policy seeing every pool at every tick.

    Example: respot bench placement --traces DIR --work-hours 48 --deadline-hours 52 60 70
    --changeover-hours 0.05 0.2 --windows 20 --json
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from respot.policy.bench import Cell
    from respot.policy.exceptions import PolicyError
    from respot.policy.placement_bench import PLACEMENT_POLICIES, run_placement_bench
    from respot.policy.pools import load_pool_set

    err = Console(stderr=True)
    cells = [
        Cell(work_hours, deadline, changeover)
        for deadline in deadline_hours or [52.0, 60.0, 70.0]
        for changeover in changeover_hours or [0.05, 0.2]
    ]
    started = time.monotonic()
    try:
        pool_set = load_pool_set(traces)
        total = len(cells) * windows * len(PLACEMENT_POLICIES)
        with Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err,
            transient=True,
            disable=not err.is_terminal,
        ) as progress:
            bar = progress.add_task("policy-windows", total=total)
            results = run_placement_bench(
                pool_set,
                cells,
                windows,
                workers=workers,
                on_progress=lambda n: progress.advance(bar, n),
            )
    except PolicyError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from exc
    elapsed = time.monotonic() - started
    if as_json:
        for result in results:
            sys.stdout.write(json.dumps(result.to_json()) + "\n")
        sys.stdout.flush()
    else:
        Console().print(_placement_table(results, pool_set.pools))
    typer.echo(f"{len(cells)} cell(s) in {elapsed:.0f} s", err=True)


def _placement_table(results: list[PlacementCellResult], pools: Sequence[Pool]) -> object:
    from rich.table import Table

    from respot.policy.placement_bench import PLACEMENT_POLICIES

    first = results[0]
    table = Table(
        title=(
            f"Normalized cost to finish by the deadline across pools, "
            f"C = {first.cell.work_hours:g} h\n"
            f"{len(pools)} pools ({', '.join(p.name for p in pools)}) x "
            f"{first.windows_per_trace} windows"
        ),
        caption=(
            "respot: the policy as the control plane runs it for one job (its own "
            "sightings); respot-omniscient-view: the same policy seeing every pool (an upper "
            "bound)\nsaving = (RR - respot) / RR; gap closed = (RR - respot) / "
            "(RR - omniscient), on the means; RR = up-round-robin"
        ),
    )
    for header in ["D (h)", "d (h)", "policy", "mean", "p75", "missed", "saving", "gap closed"]:
        table.add_column(header, justify="left" if header == "policy" else "right")
    for result in results:
        for name in PLACEMENT_POLICIES:
            r = result.results[name]
            is_respot = name.startswith("respot")
            closed = result.gap_closed(name) if is_respot else math.nan
            table.add_row(
                f"{result.cell.deadline_hours:g}" if name == PLACEMENT_POLICIES[0] else "",
                f"{result.cell.changeover_hours:g}" if name == PLACEMENT_POLICIES[0] else "",
                name,
                f"{r.mean:.4f}",
                f"{r.p75:.4f}",
                str(r.misses),
                f"{result.saving(name):.2%}" if is_respot else "",
                ("n/a" if math.isnan(closed) else f"{closed:.0%}") if is_respot else "",
                end_section=name == PLACEMENT_POLICIES[-1],
            )
    return table
