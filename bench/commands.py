"""A command job's notice: notice -> checkpoint committed in S3, and steps lost (issue 25).

    .venv/bin/python -m bench.commands [--example plain|huggingface|huggingface-jit|lightning]
        [--interruptions 5] [--steps 1500] [--time-scale 0.0333] [--json]

Runs `examples/<example>/train.py` (plain: a PyTorch script with a SIGTERM handler that saves
at the next step boundary, says so, and exits 0; huggingface / lightning: the framework's
Trainer with respot.integrations' callback; huggingface-jit: the Hugging Face example with
`TrainingArguments(enable_jit_checkpoint=True)` alone, no respot callback: HF saves 3 s after
SIGTERM, the script exits 0, respot uploads the directory at the exit; it reports its step with
`respot.report` only) as a command job on the local runtime, and interrupts
its current attempt `--interruptions` times with `LocalRuntime.interrupt_job` (what
`respot local interrupt` calls), once the job has reported k/(n+1) of its steps. Per
interruption, from the job record:

- notice -> checkpoint committed: from the instant the local market sent the notice (IMDS
  and the EventBridge warning; taken right after `interrupt_job` returned) to the agent's
  send time of its notice `AgentCheckpoint`, which it sends after the manifest is written;
  as a fraction of the notice (two minutes, scaled: 4 s at time scale 1/30, 24 s at 1/5);
- steps lost: the step the attempt stopped at minus the step its successor restored.

It also checks that the final weights equal an uninterrupted run's (the script run once,
outside respot, on this machine).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import _report
from infra.local.market import ChaosSchedule
from infra.local.runtime import LocalRuntime, RuntimeOptions
from respot.spec.training import TrainingEnvVar
from respot.storage import layout
from respot.wire.messages import new_job_id

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
# example -> (its directory, its periodic-save flag, its extra arguments)
EXAMPLE_RUNS: dict[str, tuple[str, str, list[str]]] = {
    "plain": ("plain", "--save-every", []),
    "huggingface": ("huggingface", "--save-steps", []),
    "huggingface-jit": ("huggingface", "--save-steps", ["--jit-checkpoint"]),
    "lightning": ("lightning", "--save-every", []),
}
TIME_SCALE = 1.0 / 30.0
NOTICE_SECONDS = 120.0
STEP_SECONDS = 0.02


def uninterrupted(example: Path, steps: int, extra: list[str]) -> str:
    with tempfile.TemporaryDirectory() as scratch:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RESPOT_")}
        env |= {"RESPOT_CHECKPOINT_DIR": f"{scratch}/c", "RESPOT_OUTPUT_DIR": f"{scratch}/o"}
        subprocess.run(
            [sys.executable, str(example / "train.py"), "--steps", str(steps), *extra],
            env=env,
            check=True,
            capture_output=True,
            timeout=900,
        )
        return Path(scratch, "o", "weights.sha256").read_text()


def run(
    interruptions: int,
    steps: int,
    keep: Path | None = None,
    example: str = "plain",
    time_scale: float = TIME_SCALE,
) -> dict[str, Any]:
    directory, save_flag, extra = EXAMPLE_RUNS[example]
    options = RuntimeOptions(
        time_scale=time_scale,
        chaos=ChaosSchedule(job_ids=set()),
        work_root=keep,
        keep_work_root=keep is not None,
    )
    argv = ["python", "train.py", "--steps", str(steps), save_flag, str(steps // 4)]
    argv += ["--step-seconds", str(STEP_SECONDS), *extra]
    source = EXAMPLES / directory
    spec = TrainingEnvVar(name=f"{example}-bench", command=argv, source_dir=str(source))
    sent: list[datetime] = []
    with LocalRuntime(options) as rt:
        job_id = new_job_id(spec.name)
        handle = rt.run(spec, job_id=job_id)
        for k in range(1, interruptions + 1):
            rt.interrupt_job(job_id, at_step=k * steps // (interruptions + 1), wait_seconds=900)
            sent.append(datetime.now(UTC))
        status = handle.wait(timeout=1800, poll_seconds=0.5)
        record = status.record
        assert record is not None
        body = rt.client("s3").get_object(
            Bucket=rt.sdk_deployment().bucket,
            Key=layout.outputs_prefix(job_id) + "weights.sha256",
        )["Body"]
        weights = body.read().decode() if status.state == "COMPLETED" else None
    rows = []
    for n, (old, new) in enumerate(zip(record.attempts, record.attempts[1:], strict=False)):
        at = sent[n] if n < len(sent) else None
        committed = old.notice_checkpoint_at
        seconds = (committed - at).total_seconds() if at and committed else None
        lost = None
        if old.last_step is not None:
            lost = old.last_step - (new.restored_step or 0)
        rows.append(
            {
                "attempt": old.number,
                "stopped_at_step": old.last_step,
                "restored_step": new.restored_step,
                "steps_lost": lost,
                "notice_to_committed_s": None if seconds is None else round(seconds, 3),
                "share_of_notice": None
                if seconds is None
                else round(seconds / (NOTICE_SECONDS * time_scale), 3),
            }
        )
    return {
        "state": status.state,
        "interruptions": record.interruptions,
        "example": example,
        "weights_equal_uninterrupted": weights == uninterrupted(source, steps, extra),
        "per_interruption": rows,
        "notice_to_committed_s": _report.summary(r["notice_to_committed_s"] for r in rows),
        "steps_lost": _report.summary(r["steps_lost"] for r in rows),
        "notice_real_seconds": NOTICE_SECONDS * time_scale,
        "time_scale": time_scale,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.commands")
    parser.add_argument("--example", choices=sorted(EXAMPLE_RUNS), default="plain")
    parser.add_argument("--interruptions", type=int, default=5)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument(
        "--time-scale",
        type=float,
        default=TIME_SCALE,
        help="real seconds per simulated one (the notice lasts 120 s times this)",
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep", type=Path, help="keep the instances' work directories here")
    args = parser.parse_args(argv)
    began = time.monotonic()
    result = run(args.interruptions, args.steps, args.keep, args.example, args.time_scale)
    result["wall_seconds"] = round(time.monotonic() - began, 1)
    command = (
        f"python -m bench.commands --example {args.example} --interruptions "
        f"{args.interruptions} --steps {args.steps} --time-scale {args.time_scale:g}"
    )
    rows = [
        [
            r["attempt"],
            r["stopped_at_step"],
            r["restored_step"],
            r["steps_lost"],
            r["notice_to_committed_s"],
            r["share_of_notice"],
        ]
        for r in result["per_interruption"]
    ]
    c, lost = result["notice_to_committed_s"], result["steps_lost"]
    markdown = (
        f"The {args.example} example (`examples/{EXAMPLE_RUNS[args.example][0]}/train.py`"
        f"{' ' + ' '.join(EXAMPLE_RUNS[args.example][2]) if EXAMPLE_RUNS[args.example][2] else ''}"
        f", {args.steps} steps of "
        f"{STEP_SECONDS} s) as a command job, interrupted {args.interruptions} times by "
        f"`LocalRuntime.interrupt_job`; the notice lasts {result['notice_real_seconds']:g} s "
        f"(two minutes at time scale {args.time_scale:g}). Job {result['state']}, "
        f"{result['interruptions']} interruption(s); final weights equal to an uninterrupted "
        f"run's: **{result['weights_equal_uninterrupted']}**.\n\n"
        + _report.table(
            [
                "attempt",
                "stopped at",
                "restored",
                "steps lost",
                "notice -> committed (s)",
                "share of the notice",
            ],
            rows,
        )
        + f"\n\nnotice -> committed: median {c['median']} s, max {c['max']} s (n={c['n']}); "
        f"steps lost: median {lost['median']}, max {lost['max']}.\n"
    )
    name = "commands" if args.example == "plain" else f"commands-{args.example}"
    if args.time_scale != TIME_SCALE:  # e.g. commands-huggingface-jit-scale5 at 1/5
        name += f"-scale{1 / args.time_scale:g}"
    _report.write(name, result, markdown, command=command)
    if args.json:
        print(json.dumps(result, indent=1, default=str))
    else:
        print(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
