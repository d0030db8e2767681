"""The team's queue over simulated time: the real admission planner next to plain FIFO.

    python -m bench.queue --generate heavy-light --quota-vcpus 64 [--jobs-out jobs.jsonl]
    python -m bench.queue --workload my.jsonl --quota-vcpus 64 --researcher-gpus 8

A workload is one JSON object per line: {"at": seconds from start, "researcher", "team",
"instance_type": "g5.xlarge", "hours": compute hours, "priority": "low|normal|high",
"after": [ids], "queue": name or null, "id": optional (default "j<line number>")}.

Two modes run the same workload:
- `respot`: `respot.queue.plan` (the control plane's own planner) decides at every
  submission, every end and every 60-s tick; admitted jobs launch at once;
- `fifo`: today's behaviour, every waiting job asks EC2 on each event and tick, in
  submission order; a launch that does not fit the quota is refused (counted) and retried.

Both honour `after:` (a job waits for those it names) so that makespans compare. Instances
respot did not launch are `--others-vcpus` (constant). Launch and boot take no simulated
time here: a refusal can then only come from the mode's own jobs. The output is JSON (see
docs/queue.md, "The benchmark", for every figure's definition); `--jobs-out` writes one line
per job and mode (its workload line plus submitted, admitted, started, ended) from which
every figure can be recomputed.
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from bench._report import percentile
from respot.core.job import Market, QueueWait
from respot.core.quotas import quota_for
from respot.queue import (
    Lease,
    NamedQueue,
    Preemptions,
    Priority,
    QueueLimits,
    QuotaRoom,
    Usage,
    WaitingJob,
    plan,
    settle,
)
from respot.queue.estimate import estimate_starts
from respot.queue.model import quota_key_of
from respot.queue.preemption import CHANGEOVER_HOURS
from respot.queue.shapes import shape

EPOCH = datetime(2026, 1, 5, tzinfo=UTC)
TICK = 60.0
# A preempted job's agent checkpoints and stops within this many seconds (an assumption of
# the bench; the control plane terminates one that has not within the heartbeat timeout),
# and its next attempt pays the changeover (launch, boot, restore) in work it redoes.
STOP_SECONDS = 60.0


@dataclass
class Job:
    """One workload line and what happened to it in one mode."""

    id: str
    at: float
    researcher: str
    team: str
    instance_type: str
    hours: float
    priority: str = "normal"
    after: tuple[str, ...] = ()
    queue: str | None = None
    vcpus: int = 0
    gpus: int = 0
    key: str = ""
    admitted: float | None = None
    started: float | None = None
    ended: float | None = None
    failed: str | None = None
    refusals: int = 0
    left: float | None = None  # hours of work left after a preemption (None: all of it)
    run_from: float | None = None  # when its current run started
    preempted_at: float | None = None  # its last preemption
    preemptions: int = 0
    loan_for: str | None = None

    def line(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": self.at,
            "researcher": self.researcher,
            "team": self.team,
            "instance_type": self.instance_type,
            "hours": self.hours,
            "priority": self.priority,
            "after": list(self.after),
            "queue": self.queue,
        }


def load(lines: list[dict[str, Any]]) -> list[Job]:
    """Workload lines as jobs, with each type's vCPUs, GPUs and quota key."""
    jobs = []
    for i, raw in enumerate(lines, start=1):
        itype = str(raw.get("instance_type", "g5.xlarge"))
        found = shape(itype)
        if found is None:
            raise SystemExit(f"line {i}: instance_type {itype} is not in respot.queue.shapes")
        quota = quota_for(itype, Market.SPOT)
        jobs.append(
            Job(
                id=str(raw.get("id") or f"j{i}"),
                at=float(raw["at"]),
                researcher=str(raw["researcher"]),
                team=str(raw.get("team", "default")),
                instance_type=itype,
                hours=float(raw["hours"]),
                priority=str(raw.get("priority", "normal")),
                after=tuple(str(a) for a in raw.get("after", []) or []),
                queue=raw.get("queue"),
                vcpus=found[0],
                gpus=found[1],
                key=quota_key_of("spot", quota.quota_class if quota else None, itype),
            )
        )
    return jobs


def generate(kind: str, seed: int, light: int) -> list[dict[str, Any]]:
    """A synthetic workload: one heavy researcher and `light` bursty light ones."""
    rng = random.Random(seed)
    lines: list[dict[str, Any]] = []
    lengths = [0.5, 1.0, 1.0, 2.0, 2.0, 3.0]
    if kind == "contention":
        return _contention(rng, light)
    if kind != "heavy-light":
        raise SystemExit(f"--generate {kind}: the generator knows heavy-light and contention")
    # The heavy user queues 70 jobs at 6 am (t=0: 50 and more wait behind the quota) and 30
    # more in a burst 8 h later.
    for burst_at, count in ((0.0, 70), (8 * 3600.0, 20)):
        for _ in range(count):
            lines.append(
                {
                    "at": burst_at + rng.uniform(0, 120),
                    "researcher": "heavy",
                    "team": "vision",
                    "instance_type": "g5.xlarge",
                    "hours": rng.choice(lengths),
                    "priority": "normal",
                    "after": [],
                }
            )
    # Light users: bursts of 1-3 jobs, a burst every 2-4 h over 16 h, from 10 minutes on.
    for n in range(light):
        t = 600.0 + rng.uniform(0, 3600)
        while t < 16 * 3600:
            for _ in range(rng.randint(1, 3)):
                lines.append(
                    {
                        "at": t + rng.uniform(0, 60),
                        "researcher": f"light{n + 1}",
                        "team": "vision" if n % 2 == 0 else "nlp",
                        "instance_type": rng.choice(["g5.2xlarge", "g5.12xlarge"])
                        if rng.random() < 0.1
                        else "g5.xlarge",
                        "hours": rng.choice(lengths),
                        "priority": rng.choice(["normal", "normal", "high", "low"]),
                        "after": [],
                    }
                )
            t += rng.uniform(2 * 3600, 4 * 3600)
    lines.sort(key=lambda x: x["at"])
    return lines


def _contention(rng: random.Random, light: int) -> list[dict[str, Any]]:
    """Sustained contention: everyone has work waiting for hours. The heavy user queues 100
    jobs at t=0, each light user 25 within the first 10 minutes; one-GPU jobs of 1-3 h."""
    lines: list[dict[str, Any]] = []
    users = [("heavy", "vision", 100)] + [
        (f"light{n + 1}", "vision" if n % 2 == 0 else "nlp", 25) for n in range(light)
    ]
    for name, team, count in users:
        for _ in range(count):
            lines.append(
                {
                    "at": rng.uniform(0, 600) if name != "heavy" else rng.uniform(0, 60),
                    "researcher": name,
                    "team": team,
                    "instance_type": "g5.xlarge",
                    "hours": rng.choice([1.0, 2.0, 3.0]),
                    "priority": "normal",
                    "after": [],
                }
            )
    lines.sort(key=lambda x: x["at"])
    return lines


def _ts(seconds: float) -> datetime:
    return EPOCH + timedelta(seconds=seconds)


@dataclass
class Trace:
    """Piecewise-constant state between events: (t, running GPUs per researcher,
    researchers with a startable job waiting, anything startable waiting, vCPUs used per key,
    the vCPUs of the smallest startable job waiting (0: none)); and the held jobs' record
    writes a control plane would make (`note_waits`)."""

    points: list[tuple[float, dict[str, int], frozenset[str], bool, dict[str, int], int]] = field(
        default_factory=list
    )
    # Held jobs' record writes (each one a Slack card edit): by `QueueWait.same_as` (news at
    # once, details at most every QUEUE_REFRESH_SECONDS), and as every change was written.
    wait_writes: int = 0
    wait_writes_every_change: int = 0
    most_in_one_pass: int = 0
    most_in_one_pass_every_change: int = 0
    written: dict[str, QueueWait] = field(default_factory=dict)
    written_every_change: dict[str, QueueWait] = field(default_factory=dict)

    def note_waits(self, said: dict[str, QueueWait]) -> None:
        """What a pass says of each job still waiting, written as the control plane would."""
        writes = every_change = 0
        for job_id, wait in said.items():
            if not wait.same_as(self.written.get(job_id)):
                self.written[job_id] = wait
                writes += 1
            last = self.written_every_change.get(job_id)
            if last is None or not _same_every_change(wait, last):
                self.written_every_change[job_id] = wait
                every_change += 1
        self.wait_writes += writes
        self.wait_writes_every_change += every_change
        self.most_in_one_pass = max(self.most_in_one_pass, writes)
        self.most_in_one_pass_every_change = max(self.most_in_one_pass_every_change, every_change)


def _same_every_change(wait: QueueWait, last: QueueWait) -> bool:
    """The rule before the bound: kind, reason and position equal, estimates both unknown or
    within 10 minutes."""
    if (wait.kind, wait.reason, wait.position) != (last.kind, last.reason, last.position):
        return False
    if wait.estimate is None or last.estimate is None:
        return wait.estimate is last.estimate
    return abs((wait.estimate - last.estimate).total_seconds()) < 600.0


def simulate(
    jobs: list[Job], mode: str, quota_vcpus: int, others: int, limits: QueueLimits
) -> tuple[list[Job], Trace, int, int]:
    """Run one mode; returns the jobs, the trace, launches refused (all, by own jobs)."""
    jobs = [Job(**{**j.__dict__}) for j in jobs]
    by_id = {j.id: j for j in jobs}
    events: list[tuple[float, int, str, str]] = []  # (t, order, kind, job id)
    for j in jobs:
        heapq.heappush(events, (j.at, 1, "submit", j.id))
    waiting: dict[str, Job] = {}
    running: dict[str, Job] = {}
    states: dict[str, str] = {}
    usage: dict[str, Usage] = {}
    refused = refused_own = 0
    stopping: set[str] = set()  # preempted, checkpointing and stopping
    trace = Trace()
    next_tick: float | None = None
    while events:
        t = events[0][0]
        while events and events[0][0] == t:
            _, _, kind, jid = heapq.heappop(events)
            j = by_id[jid]
            if kind == "stop":
                stopping.discard(jid)
            if kind == "submit":
                waiting[jid] = j
                states[jid] = "QUEUED"
            elif kind == "stop" and jid in running:
                # A preempted job has checkpointed and stopped: back in the queue with the
                # work it had left plus the changeover its next attempt pays.
                del running[jid]
                assert j.run_from is not None
                j.left = max(_left(j) - (t - j.run_from) / 3600.0, 0.0) + CHANGEOVER_HOURS
                usage[j.researcher] = settle(
                    usage.get(j.researcher), j.gpus, _ts(j.run_from), _ts(t), limits.half_life_hours
                )
                waiting[jid] = j
                states[jid] = "HELD"
            elif kind == "end" and jid in running and t == _ends(j):
                del running[jid]
                j.ended = t
                states[jid] = "COMPLETED"
                usage[j.researcher] = settle(
                    usage.get(j.researcher),
                    j.gpus,
                    _ts(j.run_from if j.run_from is not None else t),
                    _ts(t),
                    limits.half_life_hours,
                )
        used: dict[str, int] = defaultdict(int)
        for r in running.values():
            used[r.key] += r.vcpus
        for dep_failed in [w for w in waiting.values() if _broken(w, states)]:
            dep_failed.failed = "after: a job it names failed"
            states[dep_failed.id] = "FAILED"
            del waiting[dep_failed.id]
        if mode == "respot":  # a pass at every event: a requeue runs one too
            for r in running.values():  # a loan whose holder no longer waits is a plain lease
                if r.loan_for is not None and r.loan_for not in waiting:
                    r.loan_for = None
            rooms = {k: QuotaRoom(limit=quota_vcpus, others=others) for k in {j.key for j in jobs}}
            leases = [
                Lease(
                    r.id,
                    r.researcher,
                    r.team,
                    r.key,
                    r.vcpus,
                    r.gpus,
                    _ts(r.run_from if r.run_from is not None else t),
                    r.queue,
                    _ts(_ends(r)),
                    r.loan_for,
                )
                for r in running.values()
            ]
            wjobs = [
                WaitingJob(
                    w.id,
                    w.researcher,
                    w.team,
                    _ts(w.at),
                    w.key,
                    w.vcpus,
                    w.gpus,
                    Priority(w.priority),
                    w.queue,
                    w.after,
                    _left(w),
                )
                for w in waiting.values()
            ]
            known = Preemptions(
                last={r.id: _ts(r.preempted_at) for r in jobs if r.preempted_at is not None},
                stopping=frozenset(stopping),
            )
            p = plan(wjobs, leases, rooms, limits, usage, states, _ts(t), preemptions=known)
            for victim, _reason in p.preempt:
                v = by_id[victim]
                v.preempted_at = t
                v.preemptions += 1
                stopping.add(victim)
                heapq.heappush(events, (t + STOP_SECONDS, 0, "stop", victim))
            for wj, reason in p.fail:
                j = by_id[wj.job_id]
                j.failed = reason
                states[j.id] = "FAILED"
                del waiting[j.id]
            order = [by_id[a.job_id] for a in p.admit]
            for a in p.admit:
                by_id[a.job_id].loan_for = p.loans.get(a.job_id)
            admitted = {a.job_id for a in p.admit}
            rest = [w for w in wjobs if w.job_id not in admitted and w.job_id in waiting]
            new_leases = leases + [
                Lease(a.job_id, a.researcher, a.team, a.quota_key, a.vcpus, a.gpus, _ts(t),
                      a.queue, _ts(t + a.hours * 3600.0) if a.hours else None)
                for a in p.admit
            ]  # fmt: skip
            starts = estimate_starts(rest, p.waits, new_leases, rooms, _ts(t))
            trace.note_waits(
                {
                    w.job_id: QueueWait(
                        kind=p.waits[w.job_id].kind,
                        reason=p.waits[w.job_id].reason,
                        position=p.waits[w.job_id].position,
                        estimate=starts.get(w.job_id),
                        at=_ts(t),
                    )
                    for w in rest
                    if w.job_id in p.waits
                }
            )
        else:
            order = [
                w
                for w in sorted(waiting.values(), key=lambda w: (w.at, w.id))
                if all(states.get(a) == "COMPLETED" for a in w.after)
            ]
        for j in order:
            if used[j.key] + others + j.vcpus > quota_vcpus:
                refused += 1
                j.refusals += 1
                if used[j.key] + j.vcpus > quota_vcpus - others:
                    refused_own += 1
                continue
            used[j.key] += j.vcpus
            del waiting[j.id]
            running[j.id] = j
            if j.started is None:  # a resumed job keeps its first start and admission
                j.admitted = j.started = t
            j.run_from = t
            states[j.id] = "RUNNING"
            heapq.heappush(events, (_ends(j), 0, "end", j.id))
        startable = [
            w for w in waiting.values() if all(states.get(a) == "COMPLETED" for a in w.after)
        ]
        gpus: dict[str, int] = defaultdict(int)
        for r in running.values():
            gpus[r.researcher] += r.gpus
        trace.points.append(
            (
                t,
                dict(gpus),
                frozenset(w.researcher for w in startable),
                bool(startable),
                dict(used),
                min((w.vcpus for w in startable), default=0),
            )
        )
        if waiting and (next_tick is None or next_tick <= t):
            next_tick = t + TICK
            heapq.heappush(events, (next_tick, 2, "tick", next(iter(waiting))))
    return jobs, trace, refused, refused_own


def _left(job: Job) -> float:
    """Hours of work the job has left before its current run (all of it if never preempted)."""
    return job.left if job.left is not None else job.hours


def _ends(job: Job) -> float:
    """When the job's current run ends if nothing stops it."""
    assert job.run_from is not None
    return job.run_from + _left(job) * 3600.0


def _broken(job: Job, states: dict[str, str]) -> bool:
    return any(states.get(a) in ("FAILED", "CANCELLED") for a in job.after)


def jain(values: list[float]) -> float | None:
    """Jain's fairness index of `values` (1: all equal)."""
    if not values or sum(v * v for v in values) == 0:
        return None
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


def figures(
    jobs: list[Job], trace: Trace, quota_vcpus: int, others: int, limits: QueueLimits
) -> dict[str, Any]:
    """Every figure of one mode (definitions: docs/queue.md, "The benchmark")."""
    researchers = sorted({j.researcher for j in jobs})
    team_of = {j.researcher: j.team for j in jobs}
    per: dict[str, Any] = {}
    for r in researchers:
        mine = [j for j in jobs if j.researcher == r]
        delays = [(j.started - j.at) / 3600.0 for j in mine if j.started is not None]
        per[r] = {
            "jobs": len(mine),
            "wait_hours_p50": _r(percentile(delays, 50)),
            "wait_hours_p95": _r(percentile(delays, 95)),
            "wait_hours_max": _r(max(delays) if delays else None),
            "gpu_hours": _r(sum(j.gpus * j.hours for j in mine if j.started is not None)),
        }
    # Shares when everyone is active: the team's weight split among its researchers.
    members: dict[str, int] = defaultdict(int)
    for r in researchers:
        members[team_of[r]] += 1
    total_w = sum(limits.weight(t) for t in members)
    share = {r: limits.weight(team_of[r]) / members[team_of[r]] / total_w for r in researchers}
    # Windows where every researcher has a startable job waiting; utilization while any waits.
    windows: list[tuple[float, float, dict[str, float]]] = []
    cur: tuple[float, dict[str, float]] | None = None
    busy = waited = usable = 0.0
    for (t0, gpus, who, anyone, used, smallest), nxt in zip(
        trace.points, trace.points[1:], strict=False
    ):
        dt = nxt[0] - t0
        if dt <= 0:
            continue
        if anyone:
            waited += dt
            in_use = min((sum(used.values()) + others) / quota_vcpus, 1.0)
            busy += dt * in_use
            # Room no waiting job fits is not charged here: only a preemption could fill it.
            fits = smallest <= quota_vcpus - sum(used.values()) - others
            usable += dt * (in_use if fits else 1.0)
        if who >= set(researchers):
            if cur is None:
                cur = (t0, defaultdict(float))
            for r in researchers:
                cur[1][r] += gpus.get(r, 0) * dt / 3600.0
            end = nxt[0]
        elif cur is not None:
            windows.append((cur[0], t0, dict(cur[1])))
            cur = None
    if cur is not None:
        windows.append((cur[0], end, dict(cur[1])))
    lengths = sorted(j.hours for j in jobs)
    one_job = statistics.median(lengths) if lengths else 0.0
    long_windows = [w for w in windows if (w[1] - w[0]) / 3600.0 >= one_job]
    jains = [
        (jain([w[2].get(r, 0.0) / share[r] for r in researchers]), (w[1] - w[0]) / 3600.0)
        for w in long_windows
    ]
    union: dict[str, float] = defaultdict(float)
    for w in windows:
        for r, v in w[2].items():
            union[r] += v
    ended = [j.ended for j in jobs if j.ended is not None]
    light = _light_wait(jobs)
    return {
        "researchers": per,
        "fair_share": {
            "windows_everyone_waits": len(windows),
            "hours_everyone_waits": _r(sum(w[1] - w[0] for w in windows) / 3600.0),
            "windows_at_least_one_median_job": len(long_windows),
            "median_job_hours": one_job,
            "jain_min": _r(min((j for j, _ in jains if j is not None), default=None)),
            "jain_time_weighted": _r(
                sum(j * h for j, h in jains if j is not None) / sum(h for _, h in jains)
                if jains
                else None
            ),
            "jain_all_windows_together": _r(
                jain([union[r] / share[r] for r in researchers]) if windows else None
            ),
            "gpu_hours_in_windows": {r: _r(union[r]) for r in researchers},
            "shares": {r: _r(share[r]) for r in researchers},
        },
        "quota_utilization_while_waiting": _r(busy / waited if waited else None),
        "quota_utilization_while_waiting_of_room_a_waiting_job_fits": _r(
            usable / waited if waited else None
        ),
        "hours_anything_waits": _r(waited / 3600.0),
        "makespan_hours": _r((max(ended) - min(j.at for j in jobs)) / 3600.0 if ended else None),
        "failed": sum(1 for j in jobs if j.failed),
        "light_users": light,
    }


def _light_wait(jobs: list[Job]) -> dict[str, Any]:
    """Jobs of researchers other than the heaviest, submitted while the heaviest had 50 or
    more jobs waiting and their own researcher none: their wait against one job length (the
    longest job running when it was submitted: the longest any slot takes to free)."""
    counts: dict[str, float] = defaultdict(float)
    for j in jobs:
        counts[j.researcher] += j.gpus * j.hours
    heavy = max(counts, key=lambda r: counts[r])
    checked = []
    for j in jobs:
        if j.researcher == heavy or j.started is None:
            continue
        ahead = sum(
            1
            for h in jobs
            if h.researcher == heavy and h.at <= j.at and (h.started is None or h.started > j.at)
        )
        own = any(
            h.researcher == j.researcher
            and h is not j
            and (h.at, h.id) < (j.at, j.id)
            and (h.started is None or h.started > j.at)
            for h in jobs
        )
        if ahead < 50 or own:
            continue
        running = [
            h.hours for h in jobs if h.started is not None and h.started <= j.at < (h.ended or 1e18)
        ]
        bound = max(running) if running else j.hours
        checked.append(((j.started - j.at) / 3600.0, bound))
    return {
        "heavy": heavy,
        "jobs_submitted_behind_50_or_more": len(checked),
        "started_within_one_job_length": sum(1 for w, b in checked if w <= b + 1e-9),
        "max_wait_hours": _r(max((w for w, _ in checked), default=None)),
    }


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def parse_limits(args: argparse.Namespace) -> QueueLimits:
    queues = {}
    for q in args.queue or []:
        name, _, rest = q.partition(":")
        parts = rest.split(":") if rest else []
        queues[name] = NamedQueue(
            max_running=int(parts[0]) if parts and parts[0] else None,
            max_gpus=int(parts[1]) if len(parts) > 1 and parts[1] else None,
        )
    weights = {}
    for w in args.team_weight or []:
        team, _, value = w.partition("=")
        weights[team] = float(value)
    return QueueLimits(
        researcher_gpus=args.researcher_gpus,
        team_gpus=args.team_gpus,
        queues=queues,
        team_weights=weights,
        half_life_hours=args.half_life,
        aging_hours=args.aging_hours,
        starve_hours=args.starve_hours,
        preemption=args.preemption == "on",
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.queue", description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--workload", help="a workload file, one JSON object per line")
    src.add_argument("--generate", help="a synthetic workload: heavy-light or contention")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--light", type=int, default=4, help="light researchers (--generate)")
    ap.add_argument("--quota-vcpus", type=int, required=True)
    ap.add_argument("--others-vcpus", type=int, default=0, help="vCPUs other instances use")
    ap.add_argument("--researcher-gpus", type=int)
    ap.add_argument("--team-gpus", type=int)
    ap.add_argument("--queue", action="append", help="name:max_running[:max_gpus]")
    ap.add_argument("--team-weight", action="append", help="team=weight")
    ap.add_argument("--half-life", type=float, default=QueueLimits().half_life_hours)
    ap.add_argument("--aging-hours", type=float, default=QueueLimits().aging_hours)
    ap.add_argument("--starve-hours", type=float, default=QueueLimits().starve_hours)
    ap.add_argument(
        "--preemption",
        choices=("on", "off"),
        default="on",
        help="fair-share preemption (the stack setting queue.preemption; default on)",
    )
    ap.add_argument("--jobs-out", help="write one line per job and mode here")
    ap.add_argument("--workload-out", help="write the (generated) workload here")
    args = ap.parse_args(argv)
    if args.workload:
        with open(args.workload) as f:
            lines = [json.loads(x) for x in f if x.strip()]
    else:
        lines = generate(args.generate, args.seed, args.light)
    if args.workload_out:
        with open(args.workload_out, "w") as f:
            f.writelines(json.dumps(x) + "\n" for x in lines)
    limits = parse_limits(args)
    jobs = load(lines)
    result: dict[str, Any] = {
        "command": "python -m bench.queue " + " ".join(argv if argv is not None else sys.argv[1:]),
        "jobs": len(jobs),
        "quota_vcpus": args.quota_vcpus,
        "others_vcpus": args.others_vcpus,
        "limits": {
            "researcher_gpus": limits.researcher_gpus,
            "team_gpus": limits.team_gpus,
            "queues": {k: v.__dict__ for k, v in limits.queues.items()},
            "team_weights": limits.team_weights,
            "half_life_hours": limits.half_life_hours,
            "aging_hours": limits.aging_hours,
            "starve_hours": limits.starve_hours,
            "preemption": limits.preemption,
        },
    }
    out_lines = []
    for mode in ("respot", "fifo"):
        done, trace, refused, refused_own = simulate(
            jobs, mode, args.quota_vcpus, args.others_vcpus, limits
        )
        fig = figures(done, trace, args.quota_vcpus, args.others_vcpus, limits)
        fig["preemptions"] = sum(j.preemptions for j in done)
        fig["jobs_preempted"] = sum(1 for j in done if j.preemptions)
        fig["most_preemptions_of_one_job"] = max((j.preemptions for j in done), default=0)
        fig["launches_refused_for_quota"] = refused
        fig["launches_refused_for_quota_by_own_jobs"] = refused_own
        if mode == "respot":
            fig["held_job_record_writes"] = {
                "news_at_once_details_every_10_min": trace.wait_writes,
                "every_change": trace.wait_writes_every_change,
                "most_in_one_pass": trace.most_in_one_pass,
                "most_in_one_pass_every_change": trace.most_in_one_pass_every_change,
            }
        fig["max_vcpus_used"] = (
            max((sum(p[4].values()) for p in trace.points), default=0) + args.others_vcpus
        )
        result[mode] = fig
        for j in done:
            out_lines.append(
                {
                    **j.line(),
                    "mode": mode,
                    "submitted": j.at,
                    "admitted": j.admitted,
                    "started": j.started,
                    "ended": j.ended,
                    "failed": j.failed,
                    "refusals": j.refusals,
                    "preemptions": j.preemptions,
                }
            )
    if args.jobs_out:
        with open(args.jobs_out, "w") as f:
            f.writelines(json.dumps(x) + "\n" for x in out_lines)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
