"""`respot local ...`: the whole system on this machine, with no AWS account."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from dataclasses import asdict
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated

import typer

from respot.cli.context import JsonOption, console, fail, print_json

if TYPE_CHECKING:
    from rich.console import Console

app = typer.Typer(no_args_is_help=True)

STOP_WAIT_SECONDS = 180.0  # the runtime saves its jobs and objects before it stops


@app.callback()
def _local() -> None:
    """The embedded local runtime: moto server, handlers, spot market, local instances."""


@app.command()
def demo(
    interruptions: Annotated[
        int, typer.Option(help="Spot interruptions to inflict on the job.")
    ] = 2,
    time_scale: Annotated[float, typer.Option(help="Real seconds per simulated second.")] = 1 / 30,
    deadline: Annotated[str | None, typer.Option(help="Give the job a deadline, e.g. +3m.")] = None,
    timeline: Annotated[
        Path | None, typer.Option(help="Draw the job's timeline into this PNG.")
    ] = None,
) -> None:
    """Train the digits example, interrupted, to completion; end with one line of JSON."""
    from infra.local.demo import main

    argv = ["--interruptions", str(interruptions), "--time-scale", str(time_scale)]
    if deadline is not None:
        argv += ["--deadline", deadline]
    if timeline is not None:
        argv += ["--timeline", str(timeline)]
    raise typer.Exit(main(argv))


def _scale(text: str) -> float:
    try:
        value = float(Fraction(text.strip()))
    except (ValueError, ZeroDivisionError):
        fail(f"--time-scale {text!r} is not a number; write e.g. 1/30 or 0.05")
    if not 0 < value <= 10:
        fail(f"--time-scale {text!r} must be above 0 and at most 10 (1 is real time)")
    return value


def _extra_regions(text: str) -> tuple[str, ...]:
    """`--extra-regions us-west-2,eu-west-1` as a tuple; a clear error for a bad name."""
    from infra.local.cloud import REGION

    regions = tuple(r.strip() for r in text.split(",") if r.strip())
    for region in regions:
        if not re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d", region):
            fail(f"--extra-regions: {region!r} is not a region name; write e.g. us-west-2")
        if region == REGION:
            fail(f"--extra-regions: {region} is the local runtime's home region; name others")
    if len(set(regions)) != len(regions):
        fail(f"--extra-regions: {text!r} names a region twice")
    return regions


@app.command()
def up(
    time_scale: Annotated[
        str,
        typer.Option(help="Real seconds per simulated second: 1/30 makes a 2-minute notice 4 s."),
    ] = "1/30",
    with_demo_data: Annotated[
        bool,
        typer.Option(help="Upload the digits data to s3://respot-demo-data/digits/ first."),
    ] = False,
    interrupt_after: Annotated[
        float | None,
        typer.Option(
            help="Interrupt each job's first spot instances this many simulated seconds after "
            "they boot (see --interruptions)."
        ),
    ] = None,
    interruptions: Annotated[
        int, typer.Option(help="How many attempts per job --interrupt-after interrupts.")
    ] = 2,
    work_root: Annotated[
        Path | None,
        typer.Option(help="Keep the instances' work directories here (default: a temp dir)."),
    ] = None,
    extra_regions: Annotated[
        str,
        typer.Option(
            help="Satellite regions, as `cdk deploy -c extra_regions=...` (e.g. us-west-2): "
            "their subnets are pools too; the home region is us-east-1."
        ),
    ] = "",
    forget: Annotated[
        bool,
        typer.Option(
            "--forget",
            help="Start empty: delete the jobs, outputs and logs kept from the last run.",
        ),
    ] = False,
) -> None:
    """Run the local runtime in the foreground until Ctrl-C; other shells use it with --local.

    It writes ~/.respot/local.json (or $RESPOT_LOCAL_STATE) so that `respot run/ls/status/
    logs/cancel/cost/tensorboard/timeline --local` (or with RESPOT_LOCAL=1) in another shell
    talk to it over HTTP, exactly as they talk to AWS.

    Its jobs, their outputs, checkpoints and logs are kept across restarts: when it stops,
    live jobs are cancelled and everything is saved next to the state file (local-store/);
    the next `local up` puts it back (infra/local/persist.py). --forget starts empty.
    """
    from infra.local import persist
    from respot.client.localstate import LocalState, live_state, state_path, write_state

    scale = _scale(time_scale)
    running = live_state()
    if running is not None:
        fail(
            f"a local runtime is already up (pid {running.pid}, {running.endpoint_url}); "
            "stop it with `respot local down` first"
        )
    if interruptions < 0:
        fail("--interruptions must be 0 or more")
    regions = _extra_regions(extra_regions)

    from infra.local.market import ChaosSchedule
    from infra.local.runtime import LocalRuntime, RuntimeOptions

    chaos = None
    if interrupt_after is not None:
        chaos = ChaosSchedule(after_boot={n: interrupt_after for n in range(1, interruptions + 1)})
    store = persist.store_directory(state_path())
    if forget:
        persist.forget(store)
    options = RuntimeOptions(
        time_scale=scale,
        chaos=chaos,
        work_root=work_root,
        keep_work_root=work_root is not None,
        extra_regions=regions,
        prefix=persist.saved_prefix(store),  # the same names: the saved records refer to them
    )
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGTERM, on_signal)
    out = console()
    rt = LocalRuntime(options)
    path = state_path()
    requests = None
    started = False
    try:
        rt.start()
        started = True
        kept = persist.restore(rt, store)
        if kept is not None:
            out.print(
                f"kept from the last run: {kept.jobs} job(s), {kept.objects} object(s) "
                f"({store}; `respot local up --forget` starts empty)"
            )
        from infra.local.interrupts import JobInterrupts, RequestBox, requests_dir

        assert rt.fleet is not None  # `respot local interrupt` from other shells
        requests = RequestBox(
            requests_dir(rt.work_root), JobInterrupts(rt.fleet, rt.job_record)
        ).start()
        deployment = rt.sdk_deployment()
        if with_demo_data:
            import tempfile

            from infra.local.demo import DATA_BUCKET, upload_demo_data

            scratch = Path(tempfile.mkdtemp(prefix="respot-local-data-"))
            upload_demo_data(rt, scratch)
            out.print(f"demo data: s3://{DATA_BUCKET}/digits/digits.npz")
        assert deployment.endpoint_url is not None
        state = LocalState(
            pid=os.getpid(),
            endpoint_url=deployment.endpoint_url,
            deployment={k: v for k, v in asdict(deployment).items() if v is not None},
            started_at=datetime.now(UTC).isoformat(),
            time_scale=scale,
            work_root=str(rt.work_root),
            demo_data=with_demo_data,
            extra=rt.state_extra(),
        )
        write_state(state, path)
        out.print(
            f"respot local runtime up: moto at {deployment.endpoint_url}, time x{1 / scale:g} "
            f"(a two-minute spot notice lasts {120 * scale:g}s)"
        )
        out.print(f"state file: {path}")
        out.print("in another shell:  export RESPOT_LOCAL=1")
        out.print("                   respot run examples/digits/job.yaml --wait")
        out.print("Ctrl-C (or `respot local down`) stops it.")
        out.file.flush()
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        from respot.client.localstate import clear_state

        try:
            if started:
                _save(rt, store, out)  # a second Ctrl-C cuts it short; the rest still runs
        finally:
            clear_state(os.getpid(), path)
            if requests is not None:
                requests.stop()
            rt.stop()
            signal.signal(signal.SIGTERM, previous)
            out.print("respot local runtime stopped")


@app.command()
def interrupt(
    job_id: Annotated[str, typer.Argument(help="The job whose current instance to interrupt.")],
    at_step: Annotated[
        int | None,
        typer.Option(help="Wait until the job has reported this step (or a later one)."),
    ] = None,
    rebalance: Annotated[
        bool, typer.Option(help="Send EC2's rebalance recommendation first, as EC2 often does.")
    ] = False,
    wait: Annotated[
        float, typer.Option(help="Give up (sending nothing) after this many seconds.")
    ] = 600.0,
    json_output: JsonOption = False,
) -> None:
    """Give one job's current spot instance its two-minute notice, as EC2 would (the local
    market's notice: IMDS, EventBridge, then reclamation); `--interrupt-after` stays for all."""
    from infra.local.interrupts import ask, requests_dir
    from respot.client.localstate import pid_alive, read_state, state_path

    if at_step is not None and at_step < 0:
        fail("--at-step must be 0 or more")
    if not 0 < wait <= 3600:
        fail("--wait must be above 0 and at most 3600 seconds")
    state = read_state(state_path())
    if state is None or not pid_alive(state.pid):
        fail("no local runtime is running; start one with `respot local up`")
    answer = ask(
        requests_dir(Path(state.work_root)),
        job_id,
        at_step=at_step,
        rebalance=rebalance,
        wait_seconds=wait,
        alive=lambda: pid_alive(state.pid),
    )
    if json_output:
        print_json(answer)
    if not answer.get("ok"):
        fail(str(answer.get("error")))
    if not json_output:
        console().print(
            f"interrupted {answer['instance_id']} (attempt {answer['attempt']} of {job_id}) "
            f"at step {answer['step']}: the notice is out; the job hands off and resumes"
        )


def _save(rt: object, store: Path, out: Console) -> None:
    """Keep the runtime's jobs and objects for the next `local up`; say what was kept."""
    from infra.local import persist

    try:
        saved = persist.save(rt, store)
    except Exception as exc:  # the runtime still stops; what it held is lost, and said so
        out.print(f"could not keep the jobs for the next run: {exc}", markup=False)
        return
    if saved.cancelled:
        out.print(f"cancelled the live job(s) {', '.join(saved.cancelled)}", markup=False)
    if saved.dropped:
        out.print(
            f"not kept (still live after the cancel): {', '.join(saved.dropped)}", markup=False
        )
    out.print(
        f"kept {saved.jobs} job(s) and {saved.objects} object(s) in {store} for the next "
        "`respot local up`",
        markup=False,
    )


@app.command()
def down() -> None:
    """Stop the local runtime that `respot local up` runs (it gets SIGTERM, like Ctrl-C)."""
    from respot.client.localstate import pid_alive, read_state, state_path

    path = state_path()
    state = read_state(path)
    if state is None:
        console().print("no local runtime is running")
        return
    if not pid_alive(state.pid):
        path.unlink(missing_ok=True)
        console().print(f"the local runtime (pid {state.pid}) was already gone; removed {path}")
        return
    os.kill(state.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_WAIT_SECONDS
    while pid_alive(state.pid) and time.monotonic() < deadline:
        if read_state(path) is None:  # it removes the file as it stops
            break
        time.sleep(0.1)
    while pid_alive(state.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if pid_alive(state.pid):
        fail(f"the local runtime (pid {state.pid}) did not stop in {STOP_WAIT_SECONDS:.0f}s")
    from infra.local.persist import saved_prefix, store_directory

    store = store_directory(path)
    kept = (
        f"; its jobs, outputs and logs are kept in {store} for the next `respot local up` "
        "(`--forget` starts empty)"
        if saved_prefix(store) is not None
        else "; nothing was kept (see its own output)"
    )
    console().print(f"stopped the local runtime (pid {state.pid}){kept}", markup=False)


@app.command()
def status(json_output: JsonOption = False) -> None:
    """Is a local runtime up, where, and which jobs does it hold."""
    from respot.client.localstate import endpoint_answers, pid_alive, read_state, state_path

    path = state_path()
    state = read_state(path)
    alive = state is not None and pid_alive(state.pid) and endpoint_answers(state.endpoint_url)
    jobs: list[dict[str, object]] = []
    if state is not None and alive:
        from respot.aws.jobs import JobTable

        deployment = state.sdk_deployment()
        table = JobTable(deployment.table_name, deployment.client("dynamodb", state.session()))
        jobs = [{"job_id": r.job_id, "state": r.state.value} for r in table.recent(20)]
    if json_output:
        print_json(
            {
                "state_file": str(path),
                "running": alive,
                "pid": state.pid if state else None,
                "endpoint_url": state.endpoint_url if state else None,
                "time_scale": state.time_scale if state else None,
                "started_at": state.started_at if state else None,
                "jobs": jobs,
            }
        )
        raise typer.Exit(0 if alive else 1)
    out = console()
    if state is None:
        out.print(f"no local runtime is running (no {path}); start one with `respot local up`")
        raise typer.Exit(1)
    if not alive:
        out.print(f"the local runtime in {path} (pid {state.pid}) is not running any more")
        raise typer.Exit(1)
    out.print(
        f"up since {state.started_at}: pid {state.pid}, moto at {state.endpoint_url}, "
        f"time x{1 / state.time_scale:g}"
    )
    for job in jobs:
        out.print(f"  {job['job_id']}  {job['state']}")
