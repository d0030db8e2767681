"""`make demo`: the digits example through the local runtime, interrupted twice, to completion.

It prints the job's timeline as it happens, then the job's Slack thread as the team sees it
in the local Slack (the status card in its final state, then the replies), and ends with
one line of JSON:
    {"job_id", "state", "interruptions", "resumed_from_steps", "lost_steps",
     "weights_identical_to_uninterrupted", "wall_seconds", "slack_replies", ...}
`weights_identical_to_uninterrupted` compares the job's final weights with those of the same
job trained once more, uninterrupted, in a separate process at the same time.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.local.fleet import FleetTiming
from infra.local.runtime import LocalRuntime, RuntimeOptions
from respot.client.handle import JobHandle
from respot.core.job import AttemptEnd, JobRecord, TimelineEntry
from respot.spec.training import DataSourceEnvVar, TrainingEnvVar, parse_deadline
from respot.storage import layout

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "digits"
DATA_BUCKET = "respot-demo-data"
TIME_SCALE = 1.0 / 30.0  # the two-minute notice lasts 4 s, a one-minute tick 2 s
HYPERPARAMETERS: dict[str, Any] = {"hidden": 512}  # ~13 s of training alone on one core


@dataclass
class Interruption:
    """What one interruption cost, from the job record."""

    attempt: int
    step_at_stop: int | None
    resumed_from: int | None
    lost_steps: int | None
    notice_to_replacement_requested_s: float | None
    notice_to_resumed_s: float | None  # to the first training step on the replacement
    simulated_ec2_s: float
    respot_share_s: float | None
    paused_s: float | None = None  # last training step on the old instance -> first on the new
    # The old attempt was replaced on its notice (EC2's event or the agent's report of it,
    # whichever reached the control plane first), not once its instance was gone.
    replaced_on_notice: bool = False


@dataclass
class DemoResult:
    """The demo's outcome."""

    job_id: str
    state: str
    interruptions: int
    resumed_from_steps: list[int]
    lost_steps: int
    weights_identical_to_uninterrupted: bool
    wall_seconds: float
    details: list[Interruption] = field(default_factory=list)
    slack_thread: str = ""  # the job's thread in the local Slack, rendered as text
    slack_replies: int = 0


def interruption_points(count: int) -> list[float]:
    """Fractions of the job's steps at which to interrupt it: evenly spread before the last
    stretch, e.g. 1/4, 2/4.

    With warm start an instance trains on through its notice until the replacement is warm
    (the notice hold, `docs/agent.md`), a few seconds of the scaled demo: at 1/3 and 2/3 the
    second hold could finish the job, leaving nothing to resume.
    """
    return [(k + 1) / (count + 2) for k in range(count)]


class ProgressChaos:
    """Interrupts the job's spot instance when its progress passes each given fraction.

    Timing interruptions by progress rather than by the clock makes the demo show the same
    story on a fast machine and on a loaded one: each interruption lands mid-training, after
    a checkpoint, however long the instance took to start.
    """

    def __init__(self, rt: LocalRuntime, handle: JobHandle, fractions: list[float]) -> None:
        self.rt, self.handle = rt, handle
        self.pending = sorted(fractions)
        self.done: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="demo-chaos", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        assert self.rt.fleet is not None
        while self.pending and not self._stop.wait(0.1):
            record = self.handle.record()
            if record is None or record.state.value != "RUNNING":
                continue
            step, total = record.progress.step, record.progress.total_steps
            current = record.current
            if not step or not total or current is None or current.instance_id is None:
                continue
            due = step / total >= self.pending[0] and record.checkpoint is not None
            if due and self.rt.fleet.interrupt(current.instance_id):
                self.done.append((self.pending.pop(0), step))

    def stop(self) -> None:
        """Stop watching."""
        self._stop.set()
        self._thread.join(timeout=5)


def demo_spec(seed: int = 7, hyperparameters: dict[str, Any] | None = None) -> TrainingEnvVar:
    """The job the demo runs."""
    return TrainingEnvVar(
        name="digits-demo",
        entry_point="digits.train:DigitsSession",
        source_dir=str(EXAMPLE),
        hyperparameters=HYPERPARAMETERS if hyperparameters is None else hyperparameters,
        data=[DataSourceEnvVar(s3_uri=f"s3://{DATA_BUCKET}/digits/", local_path="digits")],
        instance_types=["g5.xlarge"],
        seed=seed,
        max_spot_wait="30m",
        tags={"project": "demo"},
    )


def upload_demo_data(rt: LocalRuntime, scratch: Path) -> Path:
    """Write the digits data under `scratch` and upload it to s3://respot-demo-data/digits/."""
    sys.path.insert(0, str(EXAMPLE))
    try:
        from prepare_data import write_digits_npz
    finally:
        sys.path.remove(str(EXAMPLE))
    data_dir = scratch / "data" / "digits"
    data_dir.mkdir(parents=True, exist_ok=True)
    npz = write_digits_npz(data_dir)
    s3 = rt.client("s3")
    s3.create_bucket(Bucket=DATA_BUCKET)
    s3.upload_file(str(npz), DATA_BUCKET, "digits/digits.npz")
    return scratch / "data"


def _baseline(spec: TrainingEnvVar, data_dir: Path, scratch: Path, out: dict[str, Any]) -> None:
    from respot.agent.standalone import run_standalone

    try:
        output_dir = run_standalone(
            spec, code_dir=EXAMPLE, data_dir=data_dir, work_dir=scratch / "baseline"
        )
        out["weights"] = (Path(output_dir) / "weights.sha256").read_text().strip()
    except Exception as exc:  # reported in the result, never swallowed silently
        out["error"] = repr(exc)


def _stamp(t0: float) -> str:
    return f"[{time.monotonic() - t0:6.1f}s]"


def interruptions_of(
    record: JobRecord, timing: FleetTiming, time_scale: float
) -> list[Interruption]:
    """Per interrupted attempt: steps lost and how long the changeover took."""
    found = []
    simulated_ec2 = (timing.fulfil_seconds + timing.boot_seconds) * time_scale
    for old, new in zip(record.attempts, record.attempts[1:], strict=False):
        if old.notice_at is None and old.end is None:
            continue
        lost = None
        if old.end is AttemptEnd.COMPLETED:
            lost = 0  # it finished the job during its notice: nothing to resume
        elif new.restored_step is not None or old.last_step is not None:
            lost = max((old.last_step or 0) - (new.restored_step or 0), 0)
        gone = old.notice_at or old.ended_at
        to_request = (new.requested_at - gone).total_seconds() if gone else None
        first = new.first_step_at
        to_resume = (first - gone).total_seconds() if gone and first else None
        paused = (first - old.last_step_at).total_seconds() if first and old.last_step_at else None
        found.append(
            Interruption(
                attempt=old.number,
                step_at_stop=old.last_step,
                resumed_from=new.restored_step,
                lost_steps=lost,
                notice_to_replacement_requested_s=to_request,
                notice_to_resumed_s=to_resume,
                simulated_ec2_s=simulated_ec2,
                respot_share_s=None if to_resume is None else max(to_resume - simulated_ec2, 0.0),
                paused_s=paused,
                replaced_on_notice=any(
                    e.kind == "interrupted"
                    and e.data.get("attempt") == old.number
                    and e.data.get("noticed") is True
                    for e in record.timeline
                ),
            )
        )
    return found


def run_demo(
    *,
    time_scale: float = TIME_SCALE,
    interruptions: int = 2,
    timeout_seconds: float = 170.0,
    echo: bool = True,
    hyperparameters: dict[str, Any] | None = None,
    deadline: str | None = None,
    timeline_png: Path | None = None,
) -> DemoResult:
    """Run the demo and return its result.

    `deadline` ("+3m", or ISO time) is given to the job; `timeline_png` gets the picture of
    the job's life (`respot timeline --png`) once it is over.
    """
    t0 = time.monotonic()
    timing = FleetTiming()
    scratch = Path(tempfile.mkdtemp(prefix="respot-demo-"))
    options = RuntimeOptions(
        time_scale=time_scale,
        timing=timing,
        work_root=scratch / "runtime",
        # ProgressChaos times the notices by the progress on the job record: heartbeats at
        # real speed (not EC2's 60 s scaled to 2 s) keep it from landing a notice late, at the
        # end of training, on a loaded machine.
        agent_env={"RESPOT_HEARTBEAT_SECONDS": "0.5"},
    )

    def say(text: str) -> None:
        if echo:
            print(f"{_stamp(t0)} {text}", flush=True)

    with LocalRuntime(options) as rt:
        say(
            f"local runtime up: moto at {rt.sdk_deployment().endpoint_url}, "
            f"time x{1 / time_scale:.0f} (a two-minute spot notice lasts "
            f"{120 * time_scale:.0f}s)"
        )
        data_dir = upload_demo_data(rt, scratch)
        spec = demo_spec(hyperparameters=hyperparameters)
        if deadline is not None:
            spec = spec.model_copy(update={"deadline": parse_deadline(deadline)})
        baseline: dict[str, Any] = {}
        worker = threading.Thread(
            target=_baseline, args=(spec, data_dir, scratch, baseline), daemon=True
        )
        worker.start()
        say("training the same job uninterrupted in a separate process, for comparison")
        handle = rt.run(spec)
        say(f"submitted {handle.job_id}")
        director = ProgressChaos(rt, handle, interruption_points(interruptions))

        def on_event(entry: TimelineEntry) -> None:
            if entry.kind == "progress":
                return
            say(f"{entry.kind:<12} {entry.text}")

        try:
            status = handle.wait(timeout=timeout_seconds, poll_seconds=0.2, on_event=on_event)
        finally:
            director.stop()
        record = status.record
        assert record is not None
        weights = ""
        if status.state == "COMPLETED":
            key = f"{layout.outputs_prefix(handle.job_id)}weights.sha256"
            body = rt.client("s3").get_object(Bucket=rt.sdk_deployment().bucket, Key=key)["Body"]
            weights = body.read().decode().strip()
        worker.join(timeout=timeout_seconds)
        if "error" in baseline:
            say(f"the uninterrupted run failed: {baseline['error']}")
        details = interruptions_of(record, timing, time_scale)
        if timeline_png is not None:
            from respot.client.plot import draw_timeline

            say(f"timeline picture: {draw_timeline(record, timeline_png)}")
        # Slack hears of the end a moment after the job record does: let the queue drain.
        if not rt.wait_notifications(timeout=30):
            say("the notifications queue did not drain within 30 s")
        slack_thread = rt.slack_thread(handle.job_id)
        final = rt.job_record(handle.job_id)
        slack_replies = 0
        if rt.slack is not None and final is not None and final.notify.get("slack"):
            where = final.notify["slack"]
            slack_replies = len(rt.slack.thread(where["channel"], where["ts"]).replies)
        for d in details:
            say(
                f"interruption of attempt {d.attempt}: stopped at step {d.step_at_stop}, resumed "
                f"from {d.resumed_from} ({d.lost_steps} lost); notice -> replacement requested "
                f"{d.notice_to_replacement_requested_s:.2f}s, notice -> first training step "
                f"{d.notice_to_resumed_s or float('nan'):.2f}s (simulated EC2 boot "
                f"{d.simulated_ec2_s:.2f}s); training paused {d.paused_s or float('nan'):.2f}s"
            )
        say(f"the job's Slack thread in {options.slack_channel}, as the team sees it:")
        if echo:
            print(slack_thread, flush=True)
    result = DemoResult(
        job_id=record.job_id,
        state=record.state.value,
        interruptions=record.interruptions,
        resumed_from_steps=[
            a.restored_step for a in record.attempts if a.restored_step is not None
        ],
        lost_steps=sum(d.lost_steps or 0 for d in details),
        weights_identical_to_uninterrupted=bool(weights) and weights == baseline.get("weights"),
        wall_seconds=round(time.monotonic() - t0, 1),
        details=details,
        slack_thread=slack_thread,
        slack_replies=slack_replies,
    )
    return result


def summary_json(result: DemoResult) -> str:
    """The one line of JSON the demo ends with."""
    return json.dumps(
        {
            "job_id": result.job_id,
            "state": result.state,
            "interruptions": result.interruptions,
            "resumed_from_steps": result.resumed_from_steps,
            "lost_steps": result.lost_steps,
            "weights_identical_to_uninterrupted": result.weights_identical_to_uninterrupted,
            "wall_seconds": result.wall_seconds,
            "slack_replies": result.slack_replies,
            "changeovers": [
                {
                    "attempt": d.attempt,
                    "notice_to_replacement_requested_s": _round(
                        d.notice_to_replacement_requested_s
                    ),
                    "notice_to_resumed_s": _round(d.notice_to_resumed_s),
                    "simulated_ec2_s": _round(d.simulated_ec2_s),
                    "respot_share_s": _round(d.respot_share_s),
                    "paused_s": _round(d.paused_s),
                    "replaced_on_notice": d.replaced_on_notice,
                }
                for d in result.details
            ],
        }
    )


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (`respot local demo`)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--interruptions", type=int, default=2)
    parser.add_argument("--time-scale", type=float, default=TIME_SCALE)
    parser.add_argument("--deadline", help="a deadline for the job, e.g. +3m")
    parser.add_argument("--timeline", type=Path, help="draw the job's timeline into this PNG")
    args = parser.parse_args(argv)
    result = run_demo(
        time_scale=args.time_scale,
        interruptions=args.interruptions,
        deadline=args.deadline,
        timeline_png=args.timeline,
    )
    print(summary_json(result), flush=True)
    return 0 if result.state == "COMPLETED" and result.weights_identical_to_uninterrupted else 1


if __name__ == "__main__":
    raise SystemExit(main())
