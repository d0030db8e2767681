"""`respot selftest`: run the smallest job on the deployment, interrupt it with AWS FIS, and
check that it resumes from its checkpoint and completes; print the changeover figures.

Run it after the first `cdk deploy` (it costs a few minutes of one spot instance). With
`--local` (or RESPOT_LOCAL=1) it runs against `respot local up`, whose FIS stand-in carries
out the experiment (infra/local/fis.py). Exit code 1 unless the self-test passed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from respot.cli.context import (
    JsonOption,
    LocalOption,
    connect,
    console,
    err_console,
    print_json,
    reports_errors,
)

if TYPE_CHECKING:
    from respot.selftest import SelftestResult

# On the local runtime a job's steps are short and EC2's delays are scaled down; the waits
# keep generous real-time bounds for a loaded machine.
LOCAL_TIMEOUT_SECONDS = 120.0


@reports_errors
def selftest(
    local: LocalOption = False,
    instance_type: Annotated[
        list[str] | None,
        typer.Option(
            "--instance-type", help="Run on this type (repeat for more); default: the deployment's."
        ),
    ] = None,
    json_output: JsonOption = False,
) -> None:
    """Prove the deployment: a job interrupted by AWS FIS resumes from its checkpoint."""
    from rich.text import Text

    from respot.selftest import Selftest, SelftestPlan, SelftestTimeouts

    conn = connect(local)
    types = tuple(instance_type) if instance_type else None
    if conn.local:
        plan = SelftestPlan(
            steps=150,
            step_seconds=0.05,
            checkpoint_every=20,
            start_after_step=10,
            instance_types=types,
            max_runtime="10m",
        )
        t = LOCAL_TIMEOUT_SECONDS
        timeouts = SelftestTimeouts(training=t, notice=t / 4, resume=t, finish=t, poll=0.25)
    else:
        plan, timeouts = SelftestPlan(instance_types=types), SelftestTimeouts()
    progress = err_console() if json_output else console()
    result = Selftest(
        conn.deployment,
        conn.session,
        plan=plan,
        timeouts=timeouts,
        echo=lambda line: progress.print(Text(line), soft_wrap=True),
    ).run()
    if json_output:
        print_json(result.to_dict())
    else:
        _print(result)
    raise typer.Exit(0 if result.passed else 1)


def _print(result: SelftestResult) -> None:
    from rich.table import Table
    from rich.text import Text

    out = console()
    c = result.changeover
    if c is not None:
        table = Table(title=Text(f"changeover of {result.job_id}"), show_header=False)
        rows = [
            (
                "interrupted",
                f"attempt {c.interrupted_attempt} ({c.instance_id}) at step {c.step_at_notice}",
            ),
            (
                "resumed from",
                f"step {c.resumed_from_step} (checkpoint {c.checkpoint_step}), "
                f"{c.lost_steps} steps lost",
            ),
            ("notice -> replacement requested", _s(c.notice_to_replacement_requested_s)),
            ("notice -> replacement launched", _s(c.notice_to_replacement_launched_s)),
            ("notice -> training resumed", _s(c.notice_to_training_resumed_s)),
            ("restore", _s(c.restore_s)),
            ("replacement launched -> agent started", _s(c.launched_to_agent_started_s)),
            ("agent started -> first training step", _s(c.agent_started_to_first_step_s)),
            ("training paused (last step -> first step)", _s(c.paused_s)),
            ("FIS experiment", f"{result.experiment_id} ({result.experiment_status})"),
        ]
        for key, value in rows:
            table.add_row(key, Text(value))
        out.print(table)
    verdict = "[green]PASSED[/]" if result.passed else "[bold red]FAILED[/]"
    out.print(
        Text.from_markup(f"{verdict} in {result.wall_seconds:g}s: ") + Text(result.outcome),
        soft_wrap=True,
    )


def _s(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.2f} s"
