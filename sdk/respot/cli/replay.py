"""`respot replay`: the live control plane on a trace window, against the simulator's figure."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer


def replay(
    *,
    traces: Annotated[
        list[Path],
        typer.Option("--traces", help="A directory of trace files, or the files: one pool each."),
    ],
    work_hours: Annotated[float, typer.Option(help="Compute the job needs, C (trace time).")],
    deadline_hours: Annotated[float, typer.Option(help="Deadline D from the job's start.")],
    changeover_hours: Annotated[float, typer.Option(help="Changeover d the policy assumes.")],
    window_start: Annotated[
        int | None, typer.Option(help="The window's first tick (or give --window).")
    ] = None,
    window: Annotated[
        int | None, typer.Option(help="Window K of --windows, as `respot bench placement`.")
    ] = None,
    windows: Annotated[int, typer.Option(help="Windows of the set, for --window.")] = 20,
    time_scale: Annotated[
        float | None,
        typer.Option(
            help="Trace seconds per real second; a tick must last whole seconds "
            "(default: 2 s per tick, i.e. G/2)."
        ),
    ] = None,
    tolerance: Annotated[
        float,
        typer.Option(help="Least allowed |live - predicted| (normalized); more per changeover."),
    ] = 0.10,
    predict_only: Annotated[
        bool, typer.Option("--predict-only", help="Print the window and the prediction; no run.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Run the real control plane (handlers, policy, agents) on the local runtime against one
    trace window with compressed time, and compare its cost with the simulator's.

    Exit 1 if live - predicted is outside the tolerance or the live job missed its deadline;
    2 on bad options; 3 if the machine was too busy to play the changeover (inconclusive).

    Example: respot replay --traces bench/traces/aws-2022-10-26/*_1.json --window-start 266
    --work-hours 1 --deadline-hours 2.5 --changeover-hours 0.5
    """
    from respot.policy.exceptions import PolicyError
    from respot.policy.model import Job
    from respot.policy.pools import load_pool_set
    from respot.replay import ReplayPlan, compare, predict

    try:
        plan = ReplayPlan.build(
            load_pool_set(traces),
            Job.from_hours(work_hours, deadline_hours, changeover_hours),
            window_start=window_start,
            window=window,
            windows=windows,
            time_scale=time_scale,
        )
    except PolicyError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from exc
    prediction = predict(plan)
    if predict_only:
        for line in plan.events():
            typer.echo(line)
        for name, outcome in prediction.outcomes.items():
            typer.echo(
                f"{name}: {outcome.normalized_cost:.3f} normalized, "
                + " ".join(str(x) for x in outcome.placements)
            )
        typer.echo(f"omniscient: {prediction.omniscient:.3f}")
        return
    # The local runtime imports the CDK (jsii); infra.local silences Node's banner first.
    from respot.replay.live import run_live

    say = (lambda text: typer.echo(text, err=True)) if not as_json else None
    try:
        live = run_live(plan, on_event=say)
    except TimeoutError as exc:  # the job outlived twice its deadline: stopped, not judged
        typer.echo(f"error: the live run did not finish: {exc}", err=True)
        raise typer.Exit(code=1) from exc
    verdict = compare(plan, live, prediction, tolerance)
    if as_json:
        sys.stdout.write(json.dumps(verdict.to_json()) + "\n")
    else:
        for line in verdict.lines():
            typer.echo(line)
    if verdict.verdict == "INCONCLUSIVE":
        raise typer.Exit(code=3)
    if not verdict.ok:
        raise typer.Exit(code=1)


__all__ = ["replay"]
