"""Time to react, time paused and work lost per spot interruption: respot against "poll".

    .venv/bin/python -m bench.interruptions [--jobs 3] [--interruptions 2] [--boot ec2] [--json]

`--boot ec2` runs the replacement's boot as modelled from EC2's phases (`infra/local/boot.py`:
17 s to running, 83.5 s to the session's libraries read, each phase with its source) instead
of the tests' 15 + 45 s; the paused time then shows what a boot that outlasts the old
instance's hold costs.

Runs the digits example (the demo's job) through the local runtime, one job after another,
each attempt interrupted when the job's progress passes k/(n+1) of its steps (as `make demo`
does, so that every notice lands mid-training whatever the time scale and the machine's load)
— first with respot as it is, then on the same schedule in the poll-only baseline
(`RuntimeOptions(react_to_notices=False)`: no handler sees the two-minute warning, the
training code is not told, a poller checks every 20 s simulated — SkyPilot's
`JOB_STATUS_CHECK_GAP_SECONDS` — and the job restarts from the last periodic checkpoint).
Per interruption it reads the job record (handler and agent timestamps, the training's own
first and last `report()` of each attempt) and the local fleet (EC2's side: notice, launch,
boot, kill) and reports:

- reaction: notice -> replacement requested, from the EC2 event's own `time` (when EC2 emitted
  it; whole seconds, as AWS writes it), from the exact instant the fleet emitted it, and from
  the handler picking it up;
- notice -> replacement booted; notice -> first training step on the replacement (the
  session's first `report()` after its restore), split into simulated EC2 time (fulfil +
  boot; for the baseline also the notice window and the poll wait) and respot's own share;
- the paused time: the old instance's last training step -> the new one's first, split into
  the part spent waiting for the simulated EC2 boot and respot's own share;
- notice -> the notice checkpoint complete in S3; the restore; steps lost;
- each as it would last on AWS: the simulated parts at their unscaled length plus respot's
  share as measured (real seconds here).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import _report
from infra.local.boot import Ec2BootModel, modelled_ec2_timing
from infra.local.demo import DATA_BUCKET, EXAMPLE, ProgressChaos, demo_spec, interruption_points
from infra.local.fleet import FleetTiming, LocalInstance
from infra.local.runtime import LocalRuntime, RuntimeOptions
from respot.core.job import JobRecord
from respot.wire.messages import new_job_id

TIME_SCALE = 1.0 / 30.0  # the two-minute notice lasts 4 s, a 20 s poll 0.67 s
POLL_SECONDS = 20.0  # SkyPilot: JOB_STATUS_CHECK_GAP_SECONDS = 20 (sky/jobs/utils.py)
JOB_TIMEOUT_SECONDS = 1800.0  # a loaded 2-core machine trains the example 5-10x slower
# The example job at its own defaults (examples/digits/job.yaml: ~35 s of training on one core)
# so that every attempt is interrupted in both modes.
HYPERPARAMETERS: dict[str, Any] = {"hidden": 1024, "checkpoint_every": 300}
# Heartbeats every 0.1 s real in the baseline, so that its last reported step (the work its
# killed session had done) is known to within ~0.1 s of training; respot's agents report the
# time of the last step themselves, and beat every 0.5 s as in the demo (faster beats flood
# the emulator on a loaded machine and the progress-timed notices come late).
HEARTBEAT_REAL_SECONDS = {"poll": 0.1}
DEFAULT_HEARTBEAT_REAL_SECONDS = 0.5
# Per mode: the spec fields it changes and whether the control plane reacts to notices.
# "cold" is respot with warm start turned off: the behaviour before warm start existed.
MODES: dict[str, tuple[dict[str, Any], bool]] = {
    "respot": ({}, True),
    "cold": ({"warm_start": False}, True),
    "poll": ({}, False),
}


@dataclass
class Changeover:
    """One interruption of one job."""

    mode: str
    job_id: str
    attempt: int
    steps_lost: int
    training_lost_s: float | None  # steps lost x the job's seconds per step
    # reaction: -> the replacement requested
    event_time_to_requested_s: float | None  # from the event's `time` (whole seconds)
    notice_to_requested_s: float | None  # from the instant the fleet emitted it
    notice_handled_to_requested_s: float | None  # respot only: from the handler's pick-up
    notice_to_booted_s: float | None  # the replacement's agent process starts
    notice_to_checkpoint_s: float | None  # respot only: notice checkpoint complete in S3
    notice_to_started_s: float | None  # the agent's "started" (the old definition)
    booted_to_first_step_s: float | None
    restore_s: float | None
    notice_to_first_step_s: float | None  # the changeover, real seconds of this run
    simulated_ec2_s: float | None  # of it: EC2 (fulfil + boot; baseline: + notice window)
    simulated_poll_s: float | None  # of it: the baseline's wait for its next poll
    respot_share_s: float | None  # of it: everything else
    aws_changeover_s: float | None  # simulated parts unscaled + respot's share
    paused_s: float | None  # last step on the old instance -> first step on the new one
    paused_simulated_s: float | None  # of it: waiting for simulated EC2 (boot, poll, window)
    paused_share_s: float | None  # of it: respot's own share
    aws_paused_s: float | None  # simulated part unscaled + respot's share
    final_upload_s: float | None  # the old attempt's notice checkpoint upload (agent's timing)
    paused_rest_s: float | None  # paused - final upload - restore: what else the pause holds


def _wall(mono: float | None, offset: float) -> datetime | None:
    return None if mono is None else datetime.fromtimestamp(mono + offset, UTC)


def _secs(a: datetime | None, b: datetime | None) -> float | None:
    return None if a is None or b is None else (b - a).total_seconds()


def _overlap(
    span: tuple[datetime | None, datetime | None], other: tuple[datetime | None, datetime | None]
) -> float:
    """Seconds two intervals share (0 if either end is unknown)."""
    a0, a1 = span
    b0, b1 = other
    if None in (a0, a1, b0, b1):
        return 0.0
    assert a0 and a1 and b0 and b1
    return max((min(a1, b1) - max(a0, b0)).total_seconds(), 0.0)


def _boot_ended(inst: LocalInstance) -> float | None:
    """When EC2's simulated fulfil + boot ended: the boot script (user data) started.

    The fleet's `booted_at` is later for a real boot (when the agent logs "started:", after the
    warm-up and the hand-off wait): that stretch is respot's, not the simulated EC2's.
    """
    for at, what in inst.events:
        if what == "user data":
            return at
    return inst.booted_at


def changeovers(
    mode: str,
    record: JobRecord,
    instances: dict[str, LocalInstance],
    *,
    scale: float,
    mono_to_wall: float,
) -> list[Changeover]:
    """Per interrupted attempt: what the record and the fleet say about its changeover."""
    found = []
    per_step = seconds_per_step(record)
    for old, new in zip(record.attempts, record.attempts[1:], strict=False):
        old_inst = instances.get(old.instance_id or "")
        new_inst = instances.get(new.instance_id or "")
        if old_inst is None or old_inst.noticed_at is None:
            continue
        notice = _wall(old_inst.noticed_at, mono_to_wall)
        killed = _wall(old_inst.ended_at, mono_to_wall)
        launched = _wall(new_inst.launched_at, mono_to_wall) if new_inst else None
        booted = _wall(_boot_ended(new_inst), mono_to_wall) if new_inst else None
        first = new.first_step_at
        # No step reported before the end: the session had not trained yet (still setting up).
        lost = max((old.last_step or 0) - (new.restored_step or 0), 0)
        if (
            new.started_at is None
            and record.finished_at is not None
            and (old.last_step or 0) >= (record.progress.step or 0)
        ):
            # The job finished on the old attempt during its notice hold: the replacement
            # never ran, and nothing was lost.
            lost = 0
        # Simulated stretches: EC2 starting the replacement; for the baseline also the notice
        # window (its session trains on, unaware, until killed) and the wait for the poll.
        simulated = [(launched, booted)]
        if mode == "poll":
            simulated += [(notice, killed), (killed, old.ended_at)]
        # The baseline's session trains until the instance is killed.
        last = old.last_step_at or (killed if mode == "poll" else None)
        total = _secs(notice, first)
        ec2 = _secs(launched, booted)
        poll = window = None
        if mode == "poll":
            window, poll = _secs(notice, killed), _secs(killed, old.ended_at)
            if ec2 is not None and window is not None:
                ec2 += window
        share = aws = None
        if total is not None and ec2 is not None:
            share = total - ec2 - (poll or 0.0)
            aws = share + ec2 / scale + (poll or 0.0) / scale
        paused = _secs(last, first)
        final_upload = next(
            (
                float(e.data["upload_seconds"])
                for e in record.timeline
                if e.kind == "checkpoint"
                and e.data.get("reason") == "notice"
                and e.data.get("attempt") == old.number
                and e.data.get("upload_seconds") is not None
            ),
            None,
        )
        rest = None
        if paused is not None and final_upload is not None and new.restore_seconds is not None:
            rest = paused - final_upload - new.restore_seconds
        paused_sim = paused_share = aws_paused = None
        if paused is not None:
            paused_sim = sum(_overlap((last, first), s) for s in simulated)
            paused_share = paused - paused_sim
            aws_paused = paused_share + paused_sim / scale
        found.append(
            Changeover(
                mode=mode,
                job_id=record.job_id,
                attempt=old.number,
                steps_lost=lost,
                training_lost_s=None if per_step is None else lost * per_step,
                event_time_to_requested_s=_secs(old.notice_sent_at, new.requested_at),
                notice_to_requested_s=_secs(notice, new.requested_at),
                notice_handled_to_requested_s=_secs(old.notice_at, new.requested_at),
                notice_to_booted_s=_secs(notice, booted),
                notice_to_checkpoint_s=_secs(notice, old.notice_checkpoint_at),
                notice_to_started_s=_secs(notice, new.started_at),
                booted_to_first_step_s=_secs(booted, first),
                restore_s=new.restore_seconds,
                notice_to_first_step_s=total,
                simulated_ec2_s=ec2,
                simulated_poll_s=poll,
                respot_share_s=share,
                aws_changeover_s=aws,
                paused_s=paused,
                paused_simulated_s=paused_sim,
                paused_share_s=paused_share,
                aws_paused_s=aws_paused,
                final_upload_s=final_upload,
                paused_rest_s=rest,
            )
        )
    return found


def seconds_per_step(record: JobRecord) -> float | None:
    """Training speed of the job's last attempt (it ran uninterrupted to the end)."""
    last = record.current
    if last is None or record.finished_at is None:
        return None
    began = last.first_step_at or last.started_at
    if began is None:
        return None
    steps = (record.progress.step or 0) - (last.restored_step or 0)
    seconds = (record.finished_at - began).total_seconds()
    return seconds / steps if steps > 0 else None


def _prepare_data(rt: LocalRuntime, scratch: Path) -> None:
    sys.path.insert(0, str(EXAMPLE))
    try:
        from prepare_data import write_digits_npz
    finally:
        sys.path.remove(str(EXAMPLE))
    npz = write_digits_npz(scratch / "data")
    s3 = rt.client("s3")
    s3.create_bucket(Bucket=DATA_BUCKET)
    s3.upload_file(str(npz), DATA_BUCKET, "digits/digits.npz")


def fleet_timing(boot: str) -> FleetTiming:
    """The tests' fast boot ("fast") or the one modelled from EC2's phases ("ec2")."""
    if boot == "ec2":
        return modelled_ec2_timing()
    if boot == "fast":
        return FleetTiming()
    raise ValueError(f"--boot {boot!r}: give fast or ec2")


def run_mode(
    mode: str,
    *,
    jobs: int,
    interruptions: int,
    time_scale: float,
    echo: bool = True,
    boot: str = "fast",
) -> tuple[list[Changeover], list[dict[str, Any]]]:
    """Run `jobs` digits jobs, one after another, each interrupted `interruptions` times."""
    spec_changes, react = MODES[mode]
    scratch = Path(tempfile.mkdtemp(prefix=f"respot-bench-{mode}-"))
    options = RuntimeOptions(
        time_scale=time_scale,
        work_root=scratch / "runtime",
        react_to_notices=react,
        poll_every_seconds=POLL_SECONDS,
        timing=fleet_timing(boot),
        agent_env={
            "RESPOT_HEARTBEAT_SECONDS": str(
                HEARTBEAT_REAL_SECONDS.get(mode, DEFAULT_HEARTBEAT_REAL_SECONDS)
            )
        },
    )
    found: list[Changeover] = []
    outcomes: list[dict[str, Any]] = []
    with LocalRuntime(options) as rt:
        assert rt.fleet is not None
        _prepare_data(rt, scratch)
        mono_to_wall = time.time() - time.monotonic()
        for j in range(jobs):
            spec = demo_spec(seed=7 + j, hyperparameters=HYPERPARAMETERS)
            if spec_changes:
                spec = spec.model_copy(update=spec_changes)
            job_id = new_job_id(f"bench-{mode}")
            started = time.monotonic()
            handle = rt.run(spec, job_id=job_id)
            director = ProgressChaos(rt, handle, interruption_points(interruptions))
            try:
                status = handle.wait(timeout=JOB_TIMEOUT_SECONDS, poll_seconds=0.5)
            finally:
                director.stop()
            record = status.record
            assert record is not None
            instances = {i.instance_id: i for i in rt.fleet.of_job(job_id)}
            mine = changeovers(mode, record, instances, scale=time_scale, mono_to_wall=mono_to_wall)
            found.extend(mine)
            outcomes.append(
                {
                    "job_id": job_id,
                    "state": record.state.value,
                    "interruptions": record.interruptions,
                    "attempts": len(record.attempts),
                    "wall_s": round(time.monotonic() - started, 1),
                    "steps_lost": sum(c.steps_lost or 0 for c in mine),
                    "timeline": [
                        f"{e.at.isoformat(timespec='milliseconds')} {e.kind}: {e.text}"
                        for e in record.timeline
                        if e.kind != "progress"
                    ],
                }
            )
            if echo:
                print(
                    f"[{mode}] {job_id}: {record.state.value}, {record.interruptions} "
                    f"interruptions, lost {[c.steps_lost for c in mine]} steps, paused "
                    f"{[_round(c.paused_s) for c in mine]} s, notice -> first step "
                    f"{[_round(c.notice_to_first_step_s) for c in mine]} s",
                    flush=True,
                )
    return found, outcomes


METRICS = (
    ("steps_lost", "steps lost"),
    ("training_lost_s", "training lost (s: steps lost x seconds per step)"),
    (
        "event_time_to_requested_s",
        "EC2 event `time` -> replacement requested (s, whole-second time)",
    ),
    ("notice_to_requested_s", "EC2 emits the notice -> replacement requested (s, exact instant)"),
    ("notice_handled_to_requested_s", "handler picks the notice up -> replacement requested (s)"),
    ("notice_to_checkpoint_s", "notice -> notice checkpoint complete in S3 (s)"),
    ("notice_to_booted_s", "notice -> replacement booted (s, incl. simulated fulfil + boot)"),
    ("notice_to_started_s", "notice -> agent 'started' (s, the old changeover definition)"),
    ("booted_to_first_step_s", "boot -> first training step (s)"),
    ("restore_s", "checkpoint restore (s)"),
    ("notice_to_first_step_s", "notice -> first training step on the replacement (s)"),
    ("simulated_ec2_s", "  of which simulated EC2 (s)"),
    ("simulated_poll_s", "  of which simulated poll wait (s)"),
    ("respot_share_s", "  of which respot's own share (s)"),
    ("aws_changeover_s", "  on AWS: simulated parts unscaled + share (s)"),
    ("paused_s", "paused: last step on the old instance -> first on the new (s)"),
    ("paused_simulated_s", "  of which waiting for simulated EC2 / poll (s)"),
    ("paused_share_s", "  of which respot's own share (s)"),
    ("aws_paused_s", "  on AWS: simulated part unscaled + share (s)"),
    ("final_upload_s", "the old instance's final (notice) checkpoint upload (s)"),
    ("paused_rest_s", "paused - final upload - restore (s)"),
)


def summarize(found: list[Changeover]) -> dict[str, dict[str, dict[str, Any]]]:
    """Median / p95 / max of every metric, per mode."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for mode in sorted({c.mode for c in found}):
        rows = [c for c in found if c.mode == mode]
        out[mode] = {key: _report.summary(getattr(c, key) for c in rows) for key, _ in METRICS}
    return out


def markdown(
    stats: dict[str, dict[str, dict[str, Any]]], found: list[Changeover], args: Any
) -> str:
    """The results as markdown."""
    modes = [m for m in MODES if m in stats]
    headers = ["metric"] + [f"{m} median / p95" for m in modes]
    rows = []
    for key, label in METRICS:
        cells = []
        for m in modes:
            s = stats[m][key]
            cells.append("-" if s["n"] == 0 else f"{s['median']} / {s['p95']}")
        rows.append([label, *cells])
    per = _report.table(
        [
            "mode",
            "job",
            "attempt",
            "lost",
            "req s",
            "ckpt s",
            "first step s",
            "share s",
            "paused s",
            "paused share s",
        ],
        [
            [
                c.mode,
                c.job_id[-6:],
                c.attempt,
                c.steps_lost,
                _round(c.event_time_to_requested_s),
                _round(c.notice_to_checkpoint_s),
                _round(c.notice_to_first_step_s),
                _round(c.respot_share_s),
                _round(c.paused_s),
                _round(c.paused_share_s),
            ]
            for c in found
        ],
    )
    return (
        f"{args.jobs} digits jobs x {args.interruptions} interruptions per mode, time scale "
        f"1/{1 / args.time_scale:.0f} (notice {120 * args.time_scale:.1f} s, poll "
        f"{POLL_SECONDS * args.time_scale:.2f} s real). 'poll' is the wait-for-termination "
        f"baseline (poll every {POLL_SECONDS:.0f} s simulated, no notice handling, periodic "
        "checkpoints only). Boot: "
        + (
            "modelled from EC2's phases (infra/local/boot.py): "
            + ", ".join(f"{k} {v:g} s" for k, v in Ec2BootModel().phases().items())
            if getattr(args, "boot", "fast") == "ec2"
            else "the tests' 15 s fulfilment + 45 s boot (simulated)"
        )
        + ".\n\n"
        + _report.table(headers, rows)
        + "\n\nPer interruption:\n\n"
        + per
    )


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--interruptions", type=int, default=2)
    parser.add_argument("--time-scale", type=float, default=TIME_SCALE)
    parser.add_argument(
        "--modes", default="respot,poll", help=f"comma-separated, of {', '.join(MODES)}"
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--no-write", action="store_true", help="do not write bench/results")
    parser.add_argument(
        "--results-name", default="interruptions", help="bench/results/<name>.json and .md"
    )
    parser.add_argument(
        "--boot", default="fast", choices=("fast", "ec2"), help="infra/local/boot.py for ec2"
    )
    args = parser.parse_args(argv)
    found: list[Changeover] = []
    outcomes: list[dict[str, Any]] = []
    for mode in args.modes.split(","):
        f, o = run_mode(
            mode,
            jobs=args.jobs,
            interruptions=args.interruptions,
            time_scale=args.time_scale,
            boot=args.boot,
        )
        found += f
        outcomes += o
    stats = summarize(found)
    payload = {
        "parameters": {
            "jobs": args.jobs,
            "interruptions": args.interruptions,
            "time_scale": args.time_scale,
            "poll_seconds_simulated": POLL_SECONDS,
            "fleet_timing_simulated": asdict(fleet_timing(args.boot)),
            "boot": args.boot,
            **({"ec2_boot_phases": Ec2BootModel().phases()} if args.boot == "ec2" else {}),
        },
        "summary": stats,
        "jobs": outcomes,
        "changeovers": [asdict(c) for c in found],
    }
    if not args.no_write:
        command = "python -m bench.interruptions " + " ".join(argv or sys.argv[1:])
        _report.write(args.results_name, payload, markdown(stats, found, args), command=command)
    if args.json:
        print(json.dumps(payload, indent=1, default=str))
    else:
        print(markdown(stats, found, args))
    ok = all(o["state"] == "COMPLETED" for o in outcomes)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
