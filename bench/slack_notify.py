"""Slack through the local runtime: how far the thread lags the job, and that Slack never slows it.

    python -m bench.slack_notify [--jobs 3] [--steps 300] [--time-scale 0.0333]

Two phases on one local runtime, each running `--jobs` counting jobs at once:
- healthy: the local Slack is up. Per reply, the lag from the commit that noted the news (the
  timeline entry's time) to the moment the local Slack stored the reply; per job its wall
  time (created -> finished); per control-plane handler invocation its duration.
- outage: the local Slack answers HTTP 500 from before the jobs are submitted until all of
  them are over, then recovers. The same job and handler timings, the time from recovery to
  the last reply, and the replies lost or doubled against the jobs' timelines.
Prints one JSON line. Durations of the jobs themselves are dominated by the simulated EC2
times (boot, fulfilment) scaled by `--time-scale`; compare the two phases with each other.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

from infra.local.runtime import LocalRuntime, RuntimeOptions
from respot.core.job import JobRecord
from respot.notify import REPLY_KINDS
from respot.spec.training import TrainingEnvVar

SESSIONS = Path(__file__).resolve().parents[1] / "tests" / "e2e" / "sessions"


def _spec(name: str, steps: int) -> TrainingEnvVar:
    return TrainingEnvVar(
        name=name,
        entry_point="e2esessions.counting:CountingSession",
        source_dir=str(SESSIONS),
        hyperparameters={"steps": steps, "step_seconds": 0.02, "checkpoint_every": 40},
        instance_types=["g5.xlarge"],
    )


def _stats(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None, "max": None}
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {
        "p50": round(statistics.median(ordered), 3),
        "p95": round(p95, 3),
        "max": round(ordered[-1], 3),
    }


def _phase(rt: LocalRuntime, name: str, jobs: int, steps: int, *, outage: bool) -> dict[str, Any]:
    assert rt.slack is not None and rt.dispatcher is not None
    started = time.monotonic()
    if outage:
        rt.slack.outage(500)
    handles = [rt.run(_spec(f"{name}-{n}", steps)) for n in range(jobs)]
    states = [h.wait(timeout=180, poll_seconds=0.2).state for h in handles]
    recovered = time.time()
    rt.slack.recover()
    drained = rt.wait_notifications(timeout=120)
    invocations = [
        i.seconds
        for i in rt.dispatcher.invocations
        if i.started >= started and i.function != "notify"
    ]
    walls, lags, lost, doubled, last_reply = [], [], 0, 0, 0.0
    for handle in handles:
        record = rt.job_record(handle.job_id)
        assert record is not None
        if record.finished_at is not None:
            walls.append((record.finished_at - record.created_at).total_seconds())
        replies = _replies(rt, record)
        # Progress aside: the timeline keeps a denser history than the notes Slack is sent.
        told = REPLY_KINDS - {"progress"}
        news = Counter((e.kind, e.at.isoformat()) for e in record.timeline if e.kind in told)
        got = Counter(key for key, _ in replies if key[0] in told)
        lost += sum((news - got).values())
        doubled += sum((got - news).values())
        for (_, at), stored in replies:
            lags.append(stored - _epoch(at))
            last_reply = max(last_reply, stored)
    result: dict[str, Any] = {
        "completed": states.count("COMPLETED"),
        "job_wall_s_mean": round(statistics.mean(walls), 2) if walls else None,
        "control_invocation_s": _stats(invocations),
        "control_invocations": len(invocations),
        "replies": len(lags),
        "replies_lost": lost,
        "replies_doubled": doubled,
        "queue_drained": drained,
    }
    if outage:
        result["drain_after_recovery_s"] = round(max(last_reply - recovered, 0.0), 2)
    else:
        result["reply_lag_s"] = _stats(lags)
    return result


def _epoch(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso).timestamp()


def _replies(rt: LocalRuntime, record: JobRecord) -> list[tuple[tuple[str, str], float]]:
    """((kind, entry time), when Slack stored it) for each reply in the job's thread."""
    assert rt.slack is not None
    where = record.notify.get("slack")
    if not where:
        return []
    thread = rt.slack.thread(where["channel"], where["ts"])
    found = []
    for message in thread.replies:
        payload = (message.metadata or {}).get("event_payload", {})
        found.append(((str(payload.get("kind")), str(payload.get("at"))), float(message.ts)))
    return found


def main(argv: list[str] | None = None) -> int:
    """Run both phases and print one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--time-scale", type=float, default=1.0 / 30.0)
    args = parser.parse_args(argv)
    options = RuntimeOptions(time_scale=args.time_scale, notify_progress_seconds=60.0)
    with LocalRuntime(options) as rt:
        healthy = _phase(rt, "healthy", args.jobs, args.steps, outage=False)
        outage = _phase(rt, "outage", args.jobs, args.steps, outage=True)
    print(
        json.dumps(
            {
                "jobs_per_phase": args.jobs,
                "steps": args.steps,
                "time_scale": args.time_scale,
                "healthy": healthy,
                "slack_down_until_jobs_end": outage,
            }
        ),
        flush=True,
    )
    ok = healthy["replies_lost"] == outage["replies_lost"] == 0
    return 0 if ok and outage["completed"] == args.jobs else 1


if __name__ == "__main__":
    raise SystemExit(main())
