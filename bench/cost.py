"""What the control plane costs per job, per job-hour and when idle, at AWS list prices.

    .venv/bin/python -m bench.cost [--interruptions 2] [--json]

Runs the digits example through the local runtime twice (no interruption, then N) with every
AWS request counted at the emulator's door by two counting proxies (bench/proxy.py): one in
front of what the control plane, the laptop and the dispatcher call, one for the agents.
Lambda invocations, durations and log bytes come from the dispatcher; memory from WIRING.

What is priced, and how (prices and sources: bench/prices.py):
- Lambda: one request per invocation, duration (rounded up to 1 ms) x memory; each function's
  cold start is added once per job (its import time, from bench/results/coldstart.json).
- SQS: what handlers and agents send, plus what Lambda's event source mapping does on AWS for
  every SQS-triggered invocation (one ReceiveMessage, one DeleteMessageBatch). The local
  dispatcher's own polling (ReceiveMessage, DeleteMessageBatch, GetQueueAttributes) is left
  out: it stands in for the event source mapping and for EventBridge's direct invocation.
- DynamoDB on-demand: write units from the item size (1 KB each) plus the `live` index's
  writes (two while a live job's sort key changes, one on create or removal); strongly
  consistent reads 1 unit per 4 KB, eventually consistent half that.
- S3 by request class; SNS publishes; CloudWatch Logs ingestion of the handlers' log lines
  (counted, at INFO) plus ~350 bytes of START/END/REPORT lines per invocation.
- KMS: one Decrypt per SecureString read with decryption (the Slack token, SSM GetParameter).
- Free and not counted: EC2 API calls, EC2's own events, SNS -> SQS delivery, SSM standard
  parameters and their API calls.

The local runtime compresses time (1/30): heartbeats (every 60 s simulated) and reconcile ticks
(every 60 s) keep their simulated rate, but checkpoints follow training steps, which run at
real speed. So per job-hour figures are not read off the run: they are computed from the
real intervals (3600/60 = 60 heartbeats, of which the 1 in 3 not coalesced is written, and
60 ticks an hour, checkpoints at `--checkpoints-per-hour`) times the unit cost of one
heartbeat, tick and checkpoint measured in the run; the fixed cost of a job (submit,
placement, starts, completion) and of each interruption is what remains of the run's bill
once its heartbeats, ticks and checkpoints are taken out.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench import _report, prices
from bench.proxy import CountingProxy, Request, dynamodb_item_bytes
from infra.local import cloud
from infra.local.demo import DATA_BUCKET, EXAMPLE, demo_spec
from infra.local.dispatcher import Invocation
from infra.local.market import ChaosSchedule
from infra.local.runtime import HEARTBEAT_SECONDS, LocalRuntime, RuntimeOptions
from infra.wiring import WIRING
from respot.core.lifecycle import CHECKPOINT_NOTES_KEPT, PROGRESS_HISTORY_FRACTION
from respot.core.placement import ControlSettings
from respot.wire.messages import new_job_id

TIME_SCALE = 1.0 / 30.0
RECONCILE_SECONDS = float(WIRING.schedules[0].every_seconds)
SQS_FUNCTIONS = frozenset(q.function for q in WIRING.queues)
DISPATCHER_OPERATIONS = frozenset({"ReceiveMessage", "DeleteMessageBatch", "GetQueueAttributes"})
PLATFORM_LOG_BYTES = 350  # START, END and REPORT lines Lambda writes per invocation
INTERRUPT_AFTER_BOOT = 240.0  # simulated seconds
HYPERPARAMETERS: dict[str, Any] = {"hidden": 512, "checkpoint_every": 300}
DEFAULT_CHECKPOINTS_PER_HOUR = 6.0  # a checkpoint every 10 minutes on a real GPU job
ENTRY_BYTES = 330  # one timeline entry on the job record, about (checkpoint notes)
IDLE_POLLERS = (2, 5)  # Lambda's idle SQS pollers per event source mapping (AWS docs)
LONG_POLL_SECONDS = 20
FREE_ALARMS = 10  # CloudWatch's free tier: 10 standard alarms, every month


@dataclass
class Bill:
    """Billable quantities."""

    lambda_requests: float = 0.0
    lambda_gb_seconds: float = 0.0
    sqs_requests: float = 0.0
    sns_publishes: float = 0.0
    dynamodb_wru: float = 0.0
    dynamodb_rru: float = 0.0
    s3_put_class: float = 0.0
    s3_get_class: float = 0.0
    log_bytes: float = 0.0
    kms_requests: float = 0.0

    def __add__(self, other: Bill) -> Bill:
        return Bill(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )

    def __sub__(self, other: Bill) -> Bill:
        return self + other.scaled(-1)

    def scaled(self, k: float) -> Bill:
        """This bill k times."""
        return Bill(**{f.name: getattr(self, f.name) * k for f in fields(self)})

    def dollars(self) -> dict[str, float]:
        """Dollars per line and in total."""
        lines = {
            "lambda": prices.usd("lambda_request", self.lambda_requests)
            + prices.usd("lambda_gb_second", self.lambda_gb_seconds),
            "sqs": prices.usd("sqs_request", self.sqs_requests),
            "sns": prices.usd("sns_publish", self.sns_publishes),
            "dynamodb": prices.usd("dynamodb_wru", self.dynamodb_wru)
            + prices.usd("dynamodb_rru", self.dynamodb_rru),
            "s3": prices.usd("s3_put_class", self.s3_put_class)
            + prices.usd("s3_get_class", self.s3_get_class),
            "logs": prices.usd("logs_ingest", self.log_bytes / 1e9),
            "kms": prices.usd("kms_request", self.kms_requests),
        }
        lines["total"] = sum(lines.values())
        return lines


# ---- turning requests into billable quantities --------------------------------------------


def dynamodb_units(req: Request) -> tuple[float, float]:
    """(write units, read units) of one DynamoDB request."""
    size = int(req.detail.get("item_bytes", 0))
    if req.operation == "PutItem":
        wru = float(max(1, math.ceil(size / 1024)))
        if req.detail.get("live"):
            # The sparse `live` index (KEYS_ONLY): an update moves the item (delete + put).
            wru += 2 if req.detail.get("conditional_update") else 1
        elif req.detail.get("conditional_update") and req.detail.get("pk", "").startswith("JOB#"):
            wru += 1  # a job leaving the index when it ends
        return wru, 0.0
    if req.operation in ("GetItem", "Query", "Scan"):
        units = max(1, math.ceil(size / 4096))
        return 0.0, float(units if req.detail.get("consistent") else units / 2)
    if req.operation in ("UpdateItem", "DeleteItem"):
        return float(max(1, math.ceil(size / 1024))), 0.0
    return 0.0, 0.0


def bill_requests(requests: list[Request], *, dispatcher_side: bool) -> Bill:
    """Billable quantities of proxied requests (minus the dispatcher's own, if on its side)."""
    bill = Bill()
    for r in requests:
        if r.service == "sqs":
            if dispatcher_side and r.operation in DISPATCHER_OPERATIONS:
                continue
            chunks = max(1, math.ceil(int(r.detail.get("message_bytes", 0)) / 65536))
            bill.sqs_requests += chunks if r.operation == "SendMessage" else 1
        elif r.service == "sns" and r.operation == "Publish":
            bill.sns_publishes += 1
        elif r.service == "ssm" and r.detail.get("kms_decrypt"):
            bill.kms_requests += 1
        elif r.service == "dynamodb":
            wru, rru = dynamodb_units(r)
            bill.dynamodb_wru += wru
            bill.dynamodb_rru += rru
        elif r.service == "s3":
            if r.operation in prices.S3_PUT_CLASS:
                bill.s3_put_class += 1
            elif r.operation in prices.S3_GET_CLASS:
                bill.s3_get_class += 1
    return bill


def bill_invocations(invocations: list[tuple[Invocation, int]]) -> Bill:
    """Lambda requests, GB-seconds, log bytes, and the event source mapping's SQS calls."""
    bill = Bill()
    for inv, log_bytes in invocations:
        memory_gb = WIRING.function(inv.function).memory_mb / 1024
        bill.lambda_requests += 1
        bill.lambda_gb_seconds += math.ceil(inv.seconds * 1000) / 1000 * memory_gb
        bill.log_bytes += log_bytes + PLATFORM_LOG_BYTES
        if inv.function in SQS_FUNCTIONS:
            bill.sqs_requests += 2  # ReceiveMessage + DeleteMessageBatch by the mapping
    return bill


# ---- instrumentation ----------------------------------------------------------------------


class LogCounter:
    """A stream for the handlers' log handler: counts bytes per thread, writes nothing."""

    def __init__(self) -> None:
        self._local = threading.local()
        self.total = 0

    def write(self, text: str) -> int:
        n = len(text.encode())
        self._local.bytes = getattr(self._local, "bytes", 0) + n
        self.total += n
        return len(text)

    def flush(self) -> None:
        return

    def take(self) -> int:
        """Bytes written by this thread since the last take."""
        n = int(getattr(self._local, "bytes", 0))
        self._local.bytes = 0
        return n


@dataclass
class Run:
    """Everything one job's run produced."""

    interruptions: int
    job_id: str
    state: str
    wall_seconds: float
    simulated_hours: float
    control: list[Request]
    agents: list[Request]
    invocations: list[tuple[Invocation, int]]
    idle_ticks: list[tuple[Invocation, int]]
    retained_s3_bytes: int
    retained_dynamodb_bytes: int
    progress_entries: int = 0  # "progress" history lines on the job record at the end
    messages: Counter[str] = field(default_factory=Counter)
    # The activity switch, observed: which switched pollers ran at rest before the job, and
    # after the job how long (simulated) until they were off and how many ticks ran meanwhile.
    idle_pollers_on: dict[str, bool] = field(default_factory=dict)
    off_after_simulated_seconds: float | None = None
    tail_ticks: int = 0
    # Everything the control plane did at rest (before the job), and over how long.
    idle_requests: list[Request] = field(default_factory=list)
    idle_invocations: list[tuple[Invocation, int]] = field(default_factory=list)
    idle_simulated_seconds: float = 0.0


def run_job(interruptions: int, *, time_scale: float, echo: bool = True) -> Run:
    """Run the example job once with `interruptions`, counting everything."""
    holder: dict[str, Any] = {}
    agent_env: dict[str, str] = {}

    def proxy(moto_url: str) -> str:
        holder["moto"] = moto_url
        holder["control"] = CountingProxy(moto_url, name="control").start()
        holder["agents"] = CountingProxy(moto_url, name="agents").start()
        agent_env["AWS_ENDPOINT_URL"] = holder["agents"].url
        return str(holder["control"].url)

    chaos = ChaosSchedule(job_ids=set())
    scratch = Path(tempfile.mkdtemp(prefix="respot-bench-cost-"))
    options = RuntimeOptions(
        time_scale=time_scale,
        chaos=chaos,
        work_root=scratch / "runtime",
        endpoint_proxy=proxy,
        agent_env=agent_env,
        log_level="INFO",  # what the functions log on AWS (Powertools' default level)
    )
    logs = LogCounter()
    invocations: list[tuple[Invocation, int]] = []
    lock = threading.Lock()

    def on_invocation(inv: Invocation) -> None:
        with lock:
            invocations.append((inv, logs.take()))

    with LocalRuntime(options) as rt:
        assert rt.dispatcher is not None and rt.deployment is not None
        for handler in logging.getLogger("respot").handlers:
            if isinstance(handler, logging.StreamHandler):
                handler.setStream(logs)
        rt.dispatcher.on_invocation = on_invocation
        control: CountingProxy = holder["control"]
        agents: CountingProxy = holder["agents"]
        direct = cloud.client("dynamodb", holder["moto"])
        s3_direct = cloud.client("s3", holder["moto"])
        s3_direct.create_bucket(Bucket=DATA_BUCKET)
        sys.path.insert(0, str(EXAMPLE))
        try:
            from prepare_data import write_digits_npz
        finally:
            sys.path.remove(str(EXAMPLE))
        npz = write_digits_npz(scratch / "data")
        s3_direct.upload_file(str(npz), DATA_BUCKET, "digits/digits.npz")
        # Idle: three and a half reconcile periods with no job at all (the switch keeps the
        # schedule and the switched pollers off: no tick is expected). Everything the control
        # plane does meanwhile is counted (provisioning is not: the counts start here).
        with lock:
            invocations.clear()
        control.reset()
        idle_from = time.monotonic()
        time.sleep(rt.scale.real(RECONCILE_SECONDS) * 3.5)
        idle_pollers_on = rt.pollers_on()
        idle_simulated = rt.scale.simulated(time.monotonic() - idle_from)
        with lock:
            idle_ticks = [i for i in invocations if i[0].function == "reconcile"]
            idle_invocations = list(invocations)
            invocations.clear()
        idle_requests = control.snapshot()
        control.reset()
        agents.reset()
        job_id = new_job_id("bench-cost")
        for attempt in range(1, interruptions + 1):
            chaos.add(job_id, attempt, INTERRUPT_AFTER_BOOT)
        spec = demo_spec(seed=11, hyperparameters=HYPERPARAMETERS)
        started = time.monotonic()
        rt.run(spec, job_id=job_id)
        state = "QUEUED"
        table = rt.deployment.table_name
        while time.monotonic() - started < 300:
            item = direct.get_item(
                TableName=table, Key={"pk": {"S": f"JOB#{job_id}"}, "sk": {"S": "JOB"}}
            ).get("Item")
            state = item["state"]["S"] if item else "QUEUED"
            if state in ("COMPLETED", "FAILED", "CANCELLED"):
                break
            time.sleep(0.5)
        wall = time.monotonic() - started
        # Let the last events (instance terminated, the final messages) be handled.
        end = time.monotonic() + 15
        while time.monotonic() < end and (rt.dispatcher.pending_messages() or rt.dispatcher.busy):
            time.sleep(0.3)
        time.sleep(rt.scale.real(10))
        retained_s3 = sum(
            o["Size"]
            for page in s3_direct.get_paginator("list_objects_v2").paginate(
                Bucket=rt.deployment.bucket
            )
            for o in page.get("Contents", [])
        )
        items = direct.scan(TableName=table)["Items"]
        retained_ddb = sum(dynamodb_item_bytes(i) for i in items)
        job_items = [i for i in items if i["pk"]["S"] == f"JOB#{job_id}"]
        timeline = json.loads(job_items[0]["doc"]["S"])["timeline"] if job_items else []
        progress_entries = sum(1 for e in timeline if e.get("kind") == "progress")
        with lock:
            job_invocations = list(invocations)
        run = Run(
            interruptions=interruptions,
            job_id=job_id,
            state=state,
            wall_seconds=wall,
            simulated_hours=rt.scale.simulated(wall) / 3600,
            control=control.snapshot(),
            agents=agents.snapshot(),
            invocations=job_invocations,
            idle_ticks=idle_ticks,
            retained_s3_bytes=retained_s3,
            retained_dynamodb_bytes=retained_ddb,
            progress_entries=progress_entries,
        )
        for r in run.agents:
            if r.operation == "SendMessage" and r.detail.get("kind"):
                run.messages[str(r.detail["kind"])] += 1
        # After the job: until the switch turns the pollers off (grace + drain), the ticks run.
        run.idle_pollers_on = idle_pollers_on
        run.idle_requests, run.idle_invocations = idle_requests, idle_invocations
        run.idle_simulated_seconds = idle_simulated
        tail_from = time.monotonic()
        with lock:
            before = sum(1 for i, _ in invocations if i.function == "reconcile")
        while time.monotonic() - tail_from < rt.scale.real(1800):
            if not any(rt.pollers_on().values()):
                run.off_after_simulated_seconds = round(
                    rt.scale.simulated(time.monotonic() - tail_from + rt.scale.real(10)), 1
                )
                break
            time.sleep(0.3)
        with lock:
            run.tail_ticks = sum(1 for i, _ in invocations if i.function == "reconcile") - before
        control.stop()
        agents.stop()
    if echo:
        print(
            f"{job_id}: {state} in {wall:.1f}s ({run.simulated_hours * 60:.1f} simulated min), "
            f"{len(run.control)} + {len(run.agents)} requests, {len(run.invocations)} invocations",
            flush=True,
        )
    return run


# ---- units and the model ------------------------------------------------------------------


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def job_item_bytes(run: Run) -> float:
    """Mean size of the job item as written."""
    sizes = [
        float(r.detail["item_bytes"])
        for r in run.control
        if r.service == "dynamodb"
        and r.operation == "PutItem"
        and str(r.detail.get("pk", "")).startswith("JOB#")
    ]
    return _mean(sizes)


def invocation_unit(run: Run, function: str, *, single: bool = False) -> tuple[float, float]:
    """(mean seconds, mean log bytes) of a function's invocations (1-record batches if single)."""
    chosen = [
        (inv.seconds, float(b))
        for inv, b in run.invocations
        if inv.function == function and (not single or inv.records == 1)
    ]
    if not chosen:
        chosen = [(inv.seconds, float(b)) for inv, b in run.invocations if inv.function == function]
    return _mean([c[0] for c in chosen]), _mean([c[1] for c in chosen])


def message_unit(run: Run, item_bytes: float, *, written: float = 1.0) -> Bill:
    """One agent message applied: sent, delivered by the mapping, one invocation, a get, and
    a put in `written` of the cases (heartbeats that change nothing are coalesced)."""
    seconds, log_bytes = invocation_unit(run, "agent_events", single=True)
    memory_gb = WIRING.function("agent_events").memory_mb / 1024
    return Bill(
        lambda_requests=1,
        lambda_gb_seconds=math.ceil(seconds * 1000) / 1000 * memory_gb,
        sqs_requests=3,
        dynamodb_rru=max(1, math.ceil(item_bytes / 4096)),
        dynamodb_wru=(max(1, math.ceil(item_bytes / 1024)) + 2) * written,
        log_bytes=log_bytes + PLATFORM_LOG_BYTES,
    )


def heartbeat_written_share() -> float:
    """The share of heartbeats that rewrite the job record: the lifecycle coalesces those
    that change nothing, writing one per `heartbeat_write_interval` (rounded up to whole
    heartbeats)."""
    default = {f.name: f.default for f in fields(ControlSettings)}["heartbeat_write_interval"]
    assert isinstance(default, timedelta)
    interval = default.total_seconds()
    return 1 / max(math.ceil(interval / HEARTBEAT_SECONDS), 1)


def tick_unit(run: Run, item_bytes: float) -> Bill:
    """One reconcile tick while one job is live (the tick's whole cost given to that job)."""
    seconds, log_bytes = invocation_unit(run, "reconcile")
    memory_gb = WIRING.function("reconcile").memory_mb / 1024
    return Bill(
        lambda_requests=1,
        lambda_gb_seconds=math.ceil(seconds * 1000) / 1000 * memory_gb,
        # the live index query, the job's strong read, the activity marker's strong read
        dynamodb_rru=0.5 + max(1, math.ceil(item_bytes / 4096)) + 1,
        log_bytes=log_bytes + PLATFORM_LOG_BYTES,
    )


def checkpoint_unit(run: Run, item_bytes: float) -> Bill:
    """One checkpoint: the agent's S3 requests for it (per checkpoint, measured) + its message."""
    count = max(run.messages.get("checkpoint", 0), 1)
    ckpt = [
        r
        for r in run.agents
        if r.service == "s3"
        and "/checkpoints/" in (str(r.detail.get("key", "")) + str(r.detail.get("prefix", "")))
    ]
    s3 = bill_requests(ckpt, dispatcher_side=False).scaled(1 / count)
    return s3 + message_unit(run, item_bytes)


def cold_starts() -> Bill:
    """Each function's init once per job, from the cold-start benchmark's import times."""
    path = _report.RESULTS / "coldstart.json"
    bill = Bill()
    if not path.exists():
        return bill
    data = json.loads(path.read_text())
    known = {f.name for f in WIRING.functions}
    for row in data.get("handlers", []):
        if row["function"] not in known:  # measured before a function was renamed or merged
            continue
        memory_gb = WIRING.function(row["function"]).memory_mb / 1024
        bill.lambda_gb_seconds += float(row["import_seconds"]) * memory_gb
    return bill


def cold_starts_unmeasured() -> list[str]:
    """The wiring's functions bench/results/coldstart.json has no import time for."""
    path = _report.RESULTS / "coldstart.json"
    rows = json.loads(path.read_text()).get("handlers", []) if path.exists() else []
    measured = {row["function"] for row in rows}
    return [f.name for f in WIRING.functions if f.name not in measured]


@dataclass
class Figures:
    """The priced results of one run."""

    interruptions: int
    counted: dict[str, float]
    counted_usd: dict[str, float]
    heartbeats: int
    ticks: int
    checkpoints: int
    fixed_usd: dict[str, float]
    heartbeat_usd: float
    tick_usd: float
    checkpoint_usd: float
    item_bytes: float


def price_run(run: Run) -> tuple[Figures, Bill, Bill, Bill, Bill]:
    """Price what was counted and split it into fixed and recurring parts."""
    counted = (
        bill_requests(run.control, dispatcher_side=True)
        + bill_requests(run.agents, dispatcher_side=False)
        + bill_invocations(run.invocations)
        + cold_starts()
    )
    item = job_item_bytes(run)
    hb = message_unit(run, item, written=heartbeat_written_share())
    tick, ckpt = tick_unit(run, item), checkpoint_unit(run, item)
    heartbeats = run.messages.get("progress", 0)
    ticks = sum(1 for inv, _ in run.invocations if inv.function == "reconcile")
    checkpoints = run.messages.get("checkpoint", 0)
    recurring = hb.scaled(heartbeats) + tick.scaled(ticks) + ckpt.scaled(checkpoints)
    fixed = counted - recurring
    figures = Figures(
        interruptions=run.interruptions,
        counted={k: round(v, 3) for k, v in asdict(counted).items()},
        counted_usd={k: round(v, 8) for k, v in counted.dollars().items()},
        heartbeats=heartbeats,
        ticks=ticks,
        checkpoints=checkpoints,
        fixed_usd={k: round(v, 8) for k, v in fixed.dollars().items()},
        heartbeat_usd=hb.dollars()["total"],
        tick_usd=tick.dollars()["total"],
        checkpoint_usd=ckpt.dollars()["total"],
        item_bytes=item,
    )
    return figures, fixed, hb, tick, ckpt


def per_hour(
    hb: Bill, tick: Bill, ckpt: Bill, checkpoints_per_hour: float
) -> tuple[Bill, dict[str, float]]:
    """The recurring bill of one job-hour at the real intervals."""
    hour = (
        hb.scaled(3600 / HEARTBEAT_SECONDS)
        + tick.scaled(3600 / RECONCILE_SECONDS)
        + ckpt.scaled(checkpoints_per_hour)
    )
    parts = {
        "heartbeats": hb.scaled(3600 / HEARTBEAT_SECONDS).dollars()["total"],
        "reconcile_ticks": tick.scaled(3600 / RECONCILE_SECONDS).dollars()["total"],
        "checkpoints": ckpt.scaled(checkpoints_per_hour).dollars()["total"],
    }
    return hour, parts


def aged_item_bytes(
    base: float,
    run_checkpoints: int,
    run_progress_entries: int,
    hours: float,
    checkpoints_per_hour: float,
) -> float:
    """The job item late in a long job: the run's item plus the timeline lines the record
    keeps beyond those the run already had: checkpoint lines (CHECKPOINT_NOTES_KEPT at most)
    and the sparse progress history (one line per PROGRESS_HISTORY_FRACTION of the steps)."""
    kept = min(hours * checkpoints_per_hour, CHECKPOINT_NOTES_KEPT)
    extra = max(kept - min(run_checkpoints, CHECKPOINT_NOTES_KEPT), 0)
    extra += max(round(1 / PROGRESS_HISTORY_FRACTION) - run_progress_entries, 0)
    return base + extra * ENTRY_BYTES


def _polls_per_month(mappings: int, pollers: int, hours: float = prices.HOURS_PER_MONTH) -> float:
    """Empty long polls of `mappings` event source mappings with `pollers` pollers each."""
    return mappings * pollers * (60 / LONG_POLL_SECONDS) * 60 * hours


def idle_month(run: Run) -> dict[str, Any]:
    """What bills while no job runs, per month, and while any job is live, per hour.

    At rest only the intake's mappings poll (the activity switch turns the others and the
    reconcile schedule off: observed in the run, `idle_pollers_on` and `idle_ticks`).
    """
    intake = [q.name for q in WIRING.queues if not q.idle_off]
    switched = [q.name for q in WIRING.queues if q.idle_off]
    ticks_at_rest = len(run.idle_ticks)
    switched_on_at_rest = [k for k, v in run.idle_pollers_on.items() if v]
    intake_polls = [_polls_per_month(len(intake), n) for n in IDLE_POLLERS]
    # Measured zero above; if the switch left anything on, price it as the old always-on.
    rest_switched = [
        _polls_per_month(len(switched), n) if switched_on_at_rest else 0.0 for n in IDLE_POLLERS
    ]
    ticks_per_month = prices.HOURS_PER_MONTH * 3600 / RECONCILE_SECONDS
    tick = tick_unit(run, job_item_bytes(run) or 2048.0)
    tick_month = tick.scaled(ticks_per_month).dollars()["total"] if ticks_at_rest else 0.0
    alarms = len(WIRING.queues) + 1  # a dead-letter alarm per queue + the event dead letters
    # What the control plane itself did at rest (handlers, token reads, table reads), scaled
    # from the measured window to a month; the dispatcher's own polling stands in for the
    # mappings' polls, priced above from AWS's poller counts.
    # (The local dispatcher's own polling, which stands in for the mappings, is not billed;
    # nor are free calls such as EventBridge's DescribeRule.)
    billed_at_rest = sum(
        1
        for r in run.idle_requests
        if bill_requests([r], dispatcher_side=True).dollars()["total"] > 0
    )
    rest = bill_requests(run.idle_requests, dispatcher_side=True) + bill_invocations(
        run.idle_invocations
    )
    rest_month = (
        rest.scaled(prices.HOURS_PER_MONTH * 3600 / run.idle_simulated_seconds).dollars()["total"]
        if run.idle_simulated_seconds
        else 0.0
    )
    gb = 1e9
    slack = prices.PRICES["ssm_standard_parameter"].usd
    switched_usd = prices.usd("sqs_request", rest_switched[1])
    # The month at rest, Slack configured, with the high poller estimate; storage apart.
    totals = {
        f"high, alarms within the free {FREE_ALARMS}": prices.usd("sqs_request", intake_polls[1])
        + switched_usd
        + tick_month
        + slack
        + rest_month,
    }
    totals[f"high, alarms beyond the free {FREE_ALARMS}"] = (
        totals[f"high, alarms within the free {FREE_ALARMS}"] + alarms * prices.PRICES["alarm"].usd
    )
    totals[f"low, alarms within the free {FREE_ALARMS}"] = (
        totals[f"high, alarms within the free {FREE_ALARMS}"]
        - prices.usd("sqs_request", intake_polls[1])
        + prices.usd("sqs_request", intake_polls[0])
    )
    lines = {
        f"intake mappings' empty long polls ({', '.join(intake)}), low": prices.usd(
            "sqs_request", intake_polls[0]
        ),
        f"intake mappings' empty long polls ({', '.join(intake)}), high": prices.usd(
            "sqs_request", intake_polls[1]
        ),
        f"switched mappings ({', '.join(switched)}) at rest: on = {switched_on_at_rest}": (
            switched_usd
        ),
        f"reconcile schedule at rest: {ticks_at_rest} ticks seen": tick_month,
        f"{alarms} dead-letter alarms (within CloudWatch's 10 free alarms)": 0.0,
        f"{alarms} dead-letter alarms (if the account's 10 free are used up)": alarms
        * prices.PRICES["alarm"].usd,
        "S3 storage per finished job kept": prices.usd("s3_storage", run.retained_s3_bytes / gb),
        "DynamoDB storage per finished job kept": prices.usd(
            "dynamodb_storage", run.retained_dynamodb_bytes / gb
        ),
        "Slack token: a standard SecureString parameter (aws/ssm key), stored": slack,
        (
            f"measured at rest: {billed_at_rest} billable requests (KMS "
            f"{rest.kms_requests:g}) and {len(run.idle_invocations)} invocations in "
            f"{run.idle_simulated_seconds:.0f} simulated s, per month"
        ): rest_month,
    }
    live_hour = [
        prices.usd("sqs_request", _polls_per_month(len(switched), n, hours=1.0))
        for n in IDLE_POLLERS
    ]
    tail_ticks = run.tail_ticks
    return {
        "usd_per_month": {k: round(v, 6) for k, v in lines.items()},
        "total_usd_per_month_plus_storage": {k: round(v, 6) for k, v in totals.items()},
        "intake_queues": intake,
        "switched_queues": switched,
        "idle_ticks_seen": ticks_at_rest,
        "requests_at_rest": dict(Counter(f"{r.service}.{r.operation}" for r in run.idle_requests)),
        "idle_pollers_on": run.idle_pollers_on,
        "intake_receives_per_month": intake_polls,
        "while_live_usd_per_hour": {
            "switched mappings' empty long polls, low": round(live_hour[0], 6),
            "switched mappings' empty long polls, high": round(live_hour[1], 6),
        },
        "after_the_last_job": {
            "pollers_off_after_simulated_seconds": run.off_after_simulated_seconds,
            "ticks_until_off": tail_ticks,
            "usd": round(
                tick.scaled(tail_ticks).dollars()["total"]
                + live_hour[1] * (run.off_after_simulated_seconds or 0) / 3600,
                6,
            ),
        },
        "retained_s3_bytes_per_job": run.retained_s3_bytes,
        "retained_dynamodb_bytes_per_job": run.retained_dynamodb_bytes,
    }


# Alternatives: a controller VM that runs while jobs run. SkyPilot's jobs controller asks for
# cpus 4+, memory 8x (per CPU), 50 GB disk (sky/jobs/constants.py CONTROLLER_RESOURCES): on
# AWS the cheapest fit is r6i.xlarge (4 vCPU, 32 GiB) at $0.252/h on demand, plus 50 GB gp3.
CONTROLLER_VM_USD_PER_HOUR = 0.252
CONTROLLER_DISK_USD_PER_MONTH = 50 * 0.08


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--interruptions", type=int, default=2)
    parser.add_argument("--time-scale", type=float, default=TIME_SCALE)
    parser.add_argument("--checkpoints-per-hour", type=float, default=DEFAULT_CHECKPOINTS_PER_HOUR)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--name", default="cost", help="results file name (bench/results/)")
    args = parser.parse_args(argv)
    base = run_job(0, time_scale=args.time_scale)
    hit = run_job(args.interruptions, time_scale=args.time_scale)
    f0, fixed0, hb, tick, ckpt = price_run(base)
    f1, fixed1, _, _, _ = price_run(hit)
    per_interruption = (fixed1 - fixed0).scaled(1 / max(args.interruptions, 1))
    hour, hour_parts = per_hour(hb, tick, ckpt, args.checkpoints_per_hour)
    # A job of H hours with N interruptions: fixed + N x per interruption + H x per hour.
    example_hours = hit.simulated_hours
    example = fixed0 + per_interruption.scaled(args.interruptions) + hour.scaled(example_hours)
    day_item = aged_item_bytes(
        f0.item_bytes, f0.checkpoints, base.progress_entries, 24, args.checkpoints_per_hour
    )
    hb_day = message_unit(base, day_item, written=heartbeat_written_share())
    day_hour, _ = per_hour(
        hb_day,
        tick_unit(base, day_item),
        checkpoint_unit(base, day_item),
        args.checkpoints_per_hour,
    )
    idle = idle_month(base)
    payload = {
        "parameters": {
            "interruptions": args.interruptions,
            "time_scale": args.time_scale,
            "checkpoints_per_hour": args.checkpoints_per_hour,
            "heartbeat_seconds": HEARTBEAT_SECONDS,
            "heartbeat_written_share": heartbeat_written_share(),
            "reconcile_seconds": RECONCILE_SECONDS,
            "prices": {k: asdict(v) for k, v in prices.PRICES.items()},
            "prices_checked_on": prices.CHECKED_ON,
            "region": prices.REGION,
        },
        "runs": [asdict(f0), asdict(f1)],
        "request_counts": {
            str(run.interruptions): {
                "control": {
                    f"{s}.{o}": n
                    for (s, o), n in Counter((r.service, r.operation) for r in run.control).items()
                },
                "agents": {
                    f"{s}.{o}": n
                    for (s, o), n in Counter((r.service, r.operation) for r in run.agents).items()
                },
                "invocations": dict(Counter(inv.function for inv, _ in run.invocations)),
                "agent_messages": dict(run.messages),
            }
            for run in (base, hit)
        },
        "per_job_fixed_usd": fixed0.dollars(),
        "cold_starts_not_counted": cold_starts_unmeasured(),
        "per_interruption_usd": per_interruption.dollars(),
        "per_job_hour_usd": hour.dollars(),
        "per_job_hour_parts_usd": hour_parts,
        "per_job_hour_after_24h_usd": day_hour.dollars()["total"],
        "example_job": {
            "hours": example_hours,
            "interruptions": args.interruptions,
            "usd": example.dollars(),
        },
        "idle": idle,
        "alternative_controller_vm": {
            "usd_per_hour_while_jobs_run": CONTROLLER_VM_USD_PER_HOUR,
            "disk_usd_per_month": CONTROLLER_DISK_USD_PER_MONTH,
        },
    }
    md = markdown(payload)
    if not args.no_write:
        command = "python -m bench.cost " + " ".join(argv or sys.argv[1:])
        _report.write(args.name, payload, md, command=command)
    print(json.dumps(payload, indent=1, default=str) if args.json else md)
    return 0 if base.state == hit.state == "COMPLETED" else 1


def _usd(v: float) -> str:
    return f"${v:.6f}" if v < 0.01 else f"${v:.4f}"


def markdown(p: dict[str, Any]) -> str:
    """The results as markdown."""
    lines = ["lambda", "sqs", "sns", "dynamodb", "s3", "logs", "kms", "total"]
    rows = [
        [
            k,
            _usd(p["per_job_fixed_usd"][k]),
            _usd(p["per_interruption_usd"][k]),
            _usd(p["per_job_hour_usd"][k]),
            _usd(p["example_job"]["usd"][k]),
        ]
        for k in lines
    ]
    ex = p["example_job"]
    out = [
        f"AWS list prices, {p['parameters']['region']}, checked "
        f"{p['parameters']['prices_checked_on']}"
        " (bench/prices.py). Per job-hour from the real intervals: heartbeat every "
        f"{p['parameters']['heartbeat_seconds']:.0f} s (1 in "
        f"{1 / p['parameters'].get('heartbeat_written_share', 1):.0f} rewrites the job record), "
        "reconcile every "
        f"{p['parameters']['reconcile_seconds']:.0f} s, {p['parameters']['checkpoints_per_hour']:g}"
        " checkpoints an hour.",
        "",
        _report.table(
            [
                "line",
                "per job (fixed)",
                "per interruption",
                "per job-hour",
                f"example job ({ex['hours'] * 60:.0f} min, {ex['interruptions']} interruptions)",
            ],
            rows,
        ),
        "",
        "Per job-hour by cause: "
        + ", ".join(f"{k} {_usd(v)}" for k, v in p["per_job_hour_parts_usd"].items())
        + "; late in a long job (its record carries a full progress history): "
        + f"{_usd(p['per_job_hour_after_24h_usd'])} an hour.",
        "",
        "Cold starts not counted (bench/results/coldstart.json has no import time for them): "
        + (", ".join(p.get("cold_starts_not_counted", [])) or "none")
        + ".",
        "",
        "Billed while no job runs (per month):",
        "",
        _report.table(
            ["what", "USD / month"], [[k, _usd(v)] for k, v in p["idle"]["usd_per_month"].items()]
        ),
        "",
        "Idle month, Slack configured, storage apart: "
        + ", ".join(
            f"{k} {_usd(v)}" for k, v in p["idle"]["total_usd_per_month_plus_storage"].items()
        )
        + ".",
        "",
        "While any job is live (per hour, shared by every live job; the switched mappings "
        "poll only then): "
        + ", ".join(f"{k} {_usd(v)}" for k, v in p["idle"]["while_live_usd_per_hour"].items())
        + ". After the last job ends, the pollers went off after "
        + f"{p['idle']['after_the_last_job']['pollers_off_after_simulated_seconds']} simulated s "
        + f"({p['idle']['after_the_last_job']['ticks_until_off']} ticks, "
        + f"{_usd(p['idle']['after_the_last_job']['usd'])}).",
        "",
        f"Alternative: a controller VM (SkyPilot's default jobs-controller size, r6i.xlarge) costs "
        f"${p['alternative_controller_vm']['usd_per_hour_while_jobs_run']}/h while jobs run plus "
        f"${p['alternative_controller_vm']['disk_usd_per_month']:.2f}/month of disk.",
    ]
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
