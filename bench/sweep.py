"""A sweep on the local runtime: wall time, trials pruned, the best value, and what the sweep
machinery adds to the control plane's bill per trial.

    python -m bench.sweep [--trials 20] [--parallelism 4] [--interruptions 3]

The example sweep (examples/sweep/sweep.yaml: softmax regression on the digits, TPE, median
pruner) runs through the whole local runtime: moto server, the real handlers and the sweep
Lambda on its FIFO queue, one agent process per trial instance. Interruptions are real
two-minute notices sent to trial instances once they have trained `--interrupt-at` steps.

What "extra cost per trial" includes: the sweep Lambda's invocations (requests, GB-seconds
at its 512 MB, the event source mapping's SQS receive/delete), every SendMessage to the
sweep-events queue, the DynamoDB reads and writes of SWEEP# items (the record and the Optuna
journal; a transactional write counts 2 WRU per item), the S3 copy of the code to each
trial, and the one SNS publish of the sweep. Not included: what each trial costs as a job
(that is `bench/cost.py`'s per-job figure), CloudWatch Logs, and storage. Prices:
`bench/prices.py` (us-east-1 list prices).
"""

from __future__ import annotations

import argparse
import math
import threading
import time
from pathlib import Path
from typing import Any

from bench import _report, prices
from bench.proxy import CountingProxy, Request
from infra.local.dispatcher import Invocation
from infra.local.market import ChaosSchedule
from infra.local.runtime import LocalRuntime, RuntimeOptions
from respot.sweep.client import load_sweep_file
from respot.wire.messages import new_job_id

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "sweep" / "sweep.yaml"
SWEEP_MEMORY_GB = 0.5


def interrupter(
    rt: LocalRuntime, handle: Any, numbers: list[int], step: int, stop: threading.Event
) -> None:
    """Send each listed trial's instance one notice once its record shows `step`.

    Trial job ids carry a random token: each is read from the sweep's record once asked.
    """
    assert rt.fleet is not None
    pending = list(numbers)
    while pending and not stop.is_set():
        sweep = handle.record()
        ids = {t.number: t.job_id for t in (sweep.trials if sweep else [])}
        for number in list(pending):
            if number not in ids:
                continue  # not asked yet
            job_id = ids[number]
            record = rt.job_record(job_id)
            if record is None or record.state.is_terminal():
                if record is not None:
                    pending.remove(number)  # ended before it got that far
                continue
            if (record.progress.step or 0) >= step:
                for inst in rt.fleet.of_job(job_id):
                    rt.fleet.interrupt(inst.instance_id)
                pending.remove(number)
        stop.wait(0.2)


def sweep_bill(requests: list[Request], invocations: list[Invocation]) -> dict[str, float]:
    """Dollars the sweep machinery cost, by service (see the module docstring)."""
    wru = rru = 0.0
    sqs = 0
    s3_put = 0
    sns = 0
    for r in requests:
        if r.service == "dynamodb" and str(r.detail.get("pk", "")).startswith("SWEEP#"):
            size = int(r.detail.get("item_bytes", 0))
            if r.operation == "TransactWriteItems":
                wru += 2 * max(int(r.detail.get("items", 1)), math.ceil(size / 1024))
            elif r.operation in ("PutItem", "UpdateItem", "DeleteItem"):
                wru += max(1, math.ceil(size / 1024))
            elif r.operation in ("GetItem", "Query"):
                units = max(1, math.ceil(size / 4096))
                rru += units if r.detail.get("consistent") else units / 2
        elif r.service == "sqs" and r.operation == "SendMessage":
            if str(r.detail.get("queue", "")).endswith("sweep-events.fifo"):
                sqs += max(1, math.ceil(int(r.detail.get("message_bytes", 0)) / 65536))
        elif r.service == "s3" and r.operation == "CopyObject":
            s3_put += 1
        elif r.service == "sns" and r.operation == "Publish":
            sns += 1
    runs = [i for i in invocations if i.function == "sweep"]
    gb_seconds = sum(math.ceil(i.seconds * 1000) / 1000 * SWEEP_MEMORY_GB for i in runs)
    sqs += 2 * len(runs)  # the mapping's ReceiveMessage and DeleteMessageBatch
    lines = {
        "lambda": prices.usd("lambda_request", len(runs))
        + prices.usd("lambda_gb_second", gb_seconds),
        "sqs": prices.usd("sqs_request", sqs),
        "dynamodb": prices.usd("dynamodb_wru", wru) + prices.usd("dynamodb_rru", rru),
        "s3": prices.usd("s3_put_class", s3_put),
        "sns": prices.usd("sns_publish", sns),
    }
    lines["total"] = sum(lines.values())
    return {**lines, "sweep_invocations": len(runs), "wru": wru, "rru": rru}


def run(trials: int, parallelism: int, interruptions: int, interrupt_at: int) -> dict[str, Any]:
    holder: dict[str, CountingProxy] = {}

    def proxy(moto_url: str) -> str:
        holder["control"] = CountingProxy(moto_url, name="control").start()
        return str(holder["control"].url)

    spec = load_sweep_file(EXAMPLE)
    job = spec.job.model_copy(
        update={"hyperparameters": {**spec.job.hyperparameters, "step_sleep": 0.01}}
    )
    spec = spec.model_copy(update={"n_trials": trials, "parallelism": parallelism, "job": job})
    invocations: list[Invocation] = []
    lock = threading.Lock()

    def on_invocation(inv: Invocation) -> None:
        with lock:
            invocations.append(inv)

    options = RuntimeOptions(
        time_scale=1.0 / 30.0, chaos=ChaosSchedule(job_ids=set()), endpoint_proxy=proxy
    )
    with LocalRuntime(options) as rt:
        assert rt.dispatcher is not None
        rt.dispatcher.on_invocation = on_invocation
        sweep_id = new_job_id(spec.name)
        # Interrupt trials spread over the sweep: the 2nd, then every few after it.
        numbers = [1 + i * max(1, trials // (interruptions + 1)) for i in range(interruptions)]
        stop = threading.Event()
        started = time.monotonic()
        handle = rt.sweep(spec, sweep_id=sweep_id)
        watcher = threading.Thread(
            target=interrupter, args=(rt, handle, numbers, interrupt_at, stop), daemon=True
        )
        watcher.start()
        final = handle.wait(timeout=1800, poll_seconds=1.0)
        wall = time.monotonic() - started
        stop.set()
        watcher.join()
        time.sleep(2)
        interrupted = []
        ids = {t.number: t.job_id for t in final.trials}
        targets = [ids[n] for n in numbers if n in ids]
        for job_id in targets:
            record = rt.job_record(job_id)
            if record is not None and record.interruptions:
                interrupted.append(
                    {
                        "job_id": job_id,
                        "interruptions": record.interruptions,
                        "state": record.state.value,
                        "resumed_from": [a.restored_step for a in record.attempts[1:]],
                    }
                )
        requests = holder["control"].snapshot()
        with lock:
            bill = sweep_bill(requests, list(invocations))
    states: dict[str, int] = {}
    for t in final.trials:
        states[t.state.value] = states.get(t.state.value, 0) + 1
    best = final.best
    return {
        "trials": trials,
        "parallelism": parallelism,
        "sweep_state": final.state,
        "wall_seconds": round(wall, 1),
        "trial_states": states,
        "best": None
        if best is None
        else {"trial": best.number, "val_loss": best.value, "params": best.params},
        "interrupted_trials": interrupted,
        "extra_cost_usd": {k: round(v, 8) for k, v in bill.items()},
        "extra_cost_per_trial_usd": round(bill["total"] / max(1, len(final.trials)), 8),
    }


def markdown(r: dict[str, Any]) -> str:
    best = r["best"] or {}
    cost = r["extra_cost_usd"]
    return "\n".join(
        [
            f"- sweep: {r['trials']} trials, {r['parallelism']} at a time -> {r['sweep_state']}",
            f"- wall time: {r['wall_seconds']} s",
            f"- trials: {r['trial_states']}",
            f"- best: trial {best.get('trial')}, val_loss {best.get('val_loss')}, "
            f"{best.get('params')}",
            f"- interrupted and resumed: {len(r['interrupted_trials'])} trials "
            f"{r['interrupted_trials']}",
            f"- extra control-plane cost: ${cost['total']:.6f} in all, "
            f"${r['extra_cost_per_trial_usd']:.7f} per trial "
            f"(lambda ${cost['lambda']:.6f}, sqs ${cost['sqs']:.6f}, "
            f"dynamodb ${cost['dynamodb']:.6f}, s3 ${cost['s3']:.6f}, sns ${cost['sns']:.7f}; "
            f"{cost['sweep_invocations']} sweep invocations, {cost['wru']} WRU, {cost['rru']} RRU)",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--parallelism", type=int, default=4)
    parser.add_argument("--interruptions", type=int, default=3)
    parser.add_argument("--interrupt-at", type=int, default=150, help="step of the notice")
    args = parser.parse_args(argv)
    result = run(args.trials, args.parallelism, args.interruptions, args.interrupt_at)
    command = (
        f"python -m bench.sweep --trials {args.trials} --parallelism {args.parallelism} "
        f"--interruptions {args.interruptions} --interrupt-at {args.interrupt_at}"
    )
    path = _report.write("sweep", result, markdown(result), command=command)
    print(markdown(result))
    print(f"wrote {path}")
    return 0 if result["sweep_state"] == "COMPLETED" else 1


if __name__ == "__main__":
    raise SystemExit(main())
