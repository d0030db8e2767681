"""The planner: given who waits, who holds what and the account's room, which jobs to admit.

The rules (docs/queue.md says them for the platform team and the researcher):

1. `after:` first. A job waits until every job it names COMPLETED; one FAILED or CANCELLED
   (or unknown) fails it with that reason.
2. A named queue runs its jobs in submission order, at most `max_running` at once: only its
   first waiting jobs are candidates.
3. Within a researcher: priority (high, normal, low; a job gains one level per
   `aging_hours` waited), then submission order. Only the researcher's first candidate may be
   admitted, with one exception that delays no one: when it waits for room reserved in its
   quota (rule 6), by the estimates it cannot start before the reservation's time, so a later
   job of the same researcher in the same quota may take free room if it ends by then (EASY
   backfill within the researcher). A job behind one that waits for a limit or a budget, or
   one without an estimate, waits its turn.
4. Between researchers, fair share: the next pick is the researcher with the least load per
   share, where load = recent GPU-hours (`usage`: decayed with the half-life, including what
   admitted jobs used so far) + one hour per GPU admitted now (`LOOKAHEAD_HOURS`), and the
   share is the team's weight split evenly among its active researchers. A job that waited
   `starve_hours` goes before all others (oldest first), so nothing waits forever.
5. A researcher or team at 100% of its monthly budget (`spent`) is held with the reason.
   A pick is admitted only if it fits: the researcher's, the team's and the named queue's
   GPU limits, and the vCPU quota of its instance class and market, counting what leases hold
   and what instances respot did not admit use (`QuotaRoom.others`). A job larger than its
   quota even when empty is admitted: the launch's quota refusal names the quota and the
   fix (`core.lifecycle.launches`), as without a queue. A job larger than a GPU limit fails.
6. Backfill with a reservation: when the fairest pick does not fit its quota, the quota is
   reserved for it from the time enough leases end (their `ends_at`, from estimated runtimes;
   a lease with none never ends for this count). A job behind it may still take the free room
   only if it ends before that time (its estimate) or fits in what the reservation leaves; so
   smaller jobs keep the quota busy without ever delaying the fairest pick. With preemption
   on, a job that fits the free room but not those tests is admitted on **loan**
   (`Plan.loans`, `Lease.loan_for`) when it would run longer before the reservation's time
   than a changeover: the room would idle until then, and the loan is taken back (the job
   checkpointed and requeued) as soon as the pick could start without it (`loans`).

7. Fair-share preemption (`preemption`, unless the platform team turned it off): when the
   fairest pick does not fit its quota, running jobs of researchers above their share (or,
   to keep idle room from waiting hours, of researchers the order ranks behind the pick) may
   be checkpointed and requeued to make room (`Plan.preempt`); their room is reserved for
   the pick until they have stopped.

`plan` is a function of its arguments only; the control plane makes its result stick with
conditional writes (docs/queue.md, "Why no job is admitted twice").
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from respot.queue.loans import lendable
from respot.queue.model import Lease, QueueLimits, QuotaRoom, WaitingJob
from respot.queue.preemption import Preemptions, Victims, victims
from respot.queue.usage import Usage, decayed, running_usage

# A GPU admitted now counts as this many GPU-hours of use in the fair-share comparison (so
# that one pass does not give one researcher every free GPU before their use shows).
LOOKAHEAD_HOURS = 1.0

# States a job named in `after:` may be in, as the job table says them.
_DONE = "COMPLETED"
_BROKEN = frozenset({"FAILED", "CANCELLED"})


@dataclass(frozen=True)
class Waits:
    """Why a job is not admitted now: `kind` (after, queue, limit, quota, turn), the words,
    and its position among the candidates at the current shares (None: not a candidate)."""

    kind: str
    reason: str
    position: int | None = None


@dataclass
class Plan:
    """What one planning pass decided."""

    admit: list[WaitingJob] = field(default_factory=list)  # in the order picked
    fail: list[tuple[WaitingJob, str]] = field(default_factory=list)
    waits: dict[str, Waits] = field(default_factory=dict)
    # Leased jobs to checkpoint and requeue for fair share, with the reason (`preemption`).
    preempt: list[tuple[str, str]] = field(default_factory=list)
    # Admitted jobs that borrow room reserved for another: job id -> the holder's job id.
    loans: dict[str, str] = field(default_factory=dict)


def _seconds(a: datetime, b: datetime) -> float:
    return (a - b).total_seconds()


class _Tally:
    """What is admitted now, by researcher, team, queue and quota."""

    def __init__(self, leases: Iterable[Lease]) -> None:
        self.researcher: dict[str, int] = defaultdict(int)
        self.team: dict[str, int] = defaultdict(int)
        self.queue_gpus: dict[str, int] = defaultdict(int)
        self.queue_jobs: dict[str, int] = defaultdict(int)
        self.vcpus: dict[str, int] = defaultdict(int)
        for lease in leases:
            self.add(lease.researcher, lease.team, lease.queue, lease.quota_key, lease)

    def add(
        self, researcher: str, team: str, queue: str | None, key: str, job: Lease | WaitingJob
    ) -> None:
        self.researcher[researcher] += job.gpus
        self.team[team] += job.gpus
        self.vcpus[key] += job.vcpus
        if queue is not None:
            self.queue_gpus[queue] += job.gpus
            self.queue_jobs[queue] += 1


def plan(
    waiting: Iterable[WaitingJob],
    leases: Iterable[Lease],
    quotas: Mapping[str, QuotaRoom],
    limits: QueueLimits,
    usage: Mapping[str, Usage],
    states: Mapping[str, str],
    now: datetime,
    spent: Mapping[str, float] | None = None,
    preemptions: Preemptions | None = None,
) -> Plan:
    """Which of `waiting` to admit now, in order; which fail; why each other one waits.

    `spent`: USD spent this month (and committed by admitted jobs), by "researcher:<name>"
    and "team:<name>"; a researcher or team at or over its budget is held (`budget`).

    `leases`: the admitted jobs that have not ended. `quotas`: quota key -> room (a key not
    there is not gated). `usage`: settled recent use per researcher. `states`: the state of
    every job named in an `after:` (a name not there is unknown). `preemptions`: what the
    planner knows of preemptions (None: it preempts nothing, as with `limits.preemption` off).
    """
    leases = list(leases)
    out = Plan()
    tally = _Tally(leases)
    hist: dict[str, float] = defaultdict(float)
    for researcher, u in usage.items():
        hist[researcher] += decayed(u, now, limits.half_life_hours)
    for lease in leases:
        hist[lease.researcher] += running_usage(
            lease.gpus, lease.admitted_at, now, limits.half_life_hours
        )

    # A job that already holds a lease is admitted: a repeated or stale view of it as waiting
    # (a duplicate event, a pass that read the job before the lease) admits nothing twice.
    holding = {lease.job_id for lease in leases}
    fresh = {j.job_id: j for j in waiting if j.job_id not in holding}
    ready = _dependencies(
        sorted(fresh.values(), key=lambda j: (j.submitted_at, j.job_id)), states, out
    )
    ready = _too_large(ready, limits, out)
    ready = _queue_heads(ready, tally, limits, out)

    per: dict[str, list[WaitingJob]] = defaultdict(list)
    for job in ready:
        per[job.researcher].append(job)
    for jobs in per.values():
        jobs.sort(key=lambda j: (-_rank(j, now, limits), j.submitted_at, j.job_id))

    team_of = {j.researcher: j.team for j in ready}
    team_of.update({lease.researcher: lease.team for lease in leases})
    active = set(per) | {lease.researcher for lease in leases}
    share = _shares(active, team_of, limits)

    def load(researcher: str) -> float:
        return (tally.researcher[researcher] * LOOKAHEAD_HOURS + hist[researcher]) / share[
            researcher
        ]

    def aged(job: WaitingJob) -> bool:
        return _seconds(now, job.submitted_at) >= limits.starve_hours * 3600.0

    held: dict[str, _Reservation] = {}  # quota key -> the room reserved for a fairer job
    blocked: set[str] = set()
    gaps: dict[str, _Gap] = {}  # researcher -> their first job that waits for reserved room
    passed: dict[str, list[WaitingJob]] = defaultdict(list)  # waits behind a gap, in order
    while True:
        candidates = [r for r, jobs in per.items() if jobs and r not in blocked]
        if not candidates:
            break
        researcher = min(
            candidates,
            key=lambda r: (not aged(per[r][0]), load(r), per[r][0].submitted_at, per[r][0].job_id),
        )
        job = per[researcher][0]
        gap = gaps.get(researcher)
        if gap is not None and not gap.ends_before(job, now):
            out.waits[job.job_id] = gap.behind(researcher)
            passed[researcher].append(per[researcher].pop(0))
            continue
        why = _over_budget(job, limits, spent or {}) or _misfit(
            job, tally, quotas, limits, held, now
        )
        if (  # room reserved for a fairer job and idle until then: lent, reclaimed for it
            why is not None
            and preemptions is not None
            and limits.preemption
            and why.kind == "quota"
            and job.quota_key in held
            and lendable(
                job,
                _free(quotas[job.quota_key], job.quota_key, tally),
                held[job.quota_key].at,
                now,
                preemptions.changeover_hours,
            )
        ):
            out.loans[job.job_id] = held[job.quota_key].job_id
            why = None
        if why is not None and gap is not None:
            out.waits[job.job_id] = gap.behind(researcher)
            passed[researcher].append(per[researcher].pop(0))
            continue
        if why is None:
            per[researcher].pop(0)
            tally.add(job.researcher, job.team, job.queue, job.quota_key, job)
            out.admit.append(job)
            continue
        out.waits[job.job_id] = why
        if why.kind == "quota" and job.quota_key not in held:
            stopping = preemptions.stopping if preemptions is not None else frozenset()
            room = quotas[job.quota_key]
            held[job.quota_key] = _reserve(job, leases, out.admit, room, tally, now, stopping)
            if preemptions is not None and limits.preemption:
                found = victims(
                    job,
                    leases,
                    room,
                    tally.researcher,
                    tally.vcpus[job.quota_key],
                    share,
                    held[job.quota_key].at,
                    preemptions,
                    now,
                    {r: load(r) for r in active},
                )
                if found is not None:
                    _preempt(job, found, out)
                    held[job.quota_key] = _Reservation(job.job_id, now, found.spare)
        if why.kind == "queue":
            per[researcher].pop(0)  # it waits for its queue; the researcher's next may go
            continue
        if why.kind == "quota" and job.quota_key in held:
            # Its later jobs may still fill room it cannot use before it could start (below).
            gaps[researcher] = _Gap(job.job_id, job.quota_key, held[job.quota_key], why.reason)
            passed[researcher].append(per[researcher].pop(0))
            continue
        blocked.add(researcher)
        for later in per[researcher][1:]:
            out.waits[later.job_id] = Waits(
                "turn", f"behind {researcher}'s job {job.job_id}, which waits: {why.reason}"
            )
    for researcher, jobs in passed.items():
        per[researcher][:0] = jobs  # back in the researcher's order, to be numbered
    _positions(per, tally, load, aged, out)
    return out


def _over_budget(job: WaitingJob, limits: QueueLimits, spent: Mapping[str, float]) -> Waits | None:
    """A researcher or team at 100% of its monthly budget: its new jobs are held."""
    for who, budget in (
        (f"researcher {job.researcher}", limits.budget_of_researcher(job.researcher)),
        (f"team {job.team}", limits.team_budgets.get(job.team)),
    ):
        key = who.replace(" ", ":", 1)
        if budget is not None and spent.get(key, 0.0) >= budget:
            return Waits(
                "budget",
                f"budget: {who} has spent ${spent.get(key, 0.0):.2f} of ${budget:.2f} this month "
                "(UTC); held until the month ends or the platform team raises the budget",
            )
    return None


def _rank(job: WaitingJob, now: datetime, limits: QueueLimits) -> int:
    waited = max(_seconds(now, job.submitted_at), 0.0)
    boost = int(waited // (limits.aging_hours * 3600.0)) if limits.aging_hours > 0 else 0
    return job.priority.rank + boost


def _shares(active: set[str], team_of: Mapping[str, str], limits: QueueLimits) -> dict[str, float]:
    """Each active researcher's share: the team's weight, split evenly among its actives."""
    members: dict[str, int] = defaultdict(int)
    for r in active:
        members[team_of[r]] += 1
    total = sum(limits.weight(t) for t in members) or 1.0
    return {r: max(limits.weight(team_of[r]), 1e-9) / members[team_of[r]] / total for r in active}


def _dependencies(
    waiting: list[WaitingJob], states: Mapping[str, str], out: Plan
) -> list[WaitingJob]:
    ready = []
    for job in waiting:
        broken = next(
            ((a, states.get(a)) for a in job.after if states.get(a) in _BROKEN or a not in states),
            None,
        )
        if broken is not None:
            name, state = broken
            what = "does not exist" if state is None else f"ended {state}"
            out.fail.append((job, f"after: job {name} {what}, so this job cannot start"))
            continue
        pending = [a for a in job.after if states.get(a) != _DONE]
        if pending:
            out.waits[job.job_id] = Waits(
                "after",
                "waits for "
                + ", ".join(f"job {a} ({states.get(a, 'unknown')})" for a in pending)
                + " to complete",
            )
            continue
        ready.append(job)
    return ready


def _too_large(ready: list[WaitingJob], limits: QueueLimits, out: Plan) -> list[WaitingJob]:
    kept = []
    for job in ready:
        caps = [
            ("researcher_gpus", limits.researcher_gpus),
            ("team_gpus", limits.team_limit(job.team)),
        ]
        if job.queue is not None and job.queue in limits.queues:
            caps.append((f"queues.{job.queue}.max_gpus", limits.queues[job.queue].max_gpus))
        over = next(((n, c) for n, c in caps if c is not None and job.gpus > c), None)
        if over is not None:
            out.fail.append(
                (
                    job,
                    f"needs {job.gpus} GPUs at once, more than the limit {over[0]} = {over[1]}: "
                    "choose a smaller instance type or ask the platform team to raise it",
                )
            )
            continue
        kept.append(job)
    return kept


def _queue_heads(
    ready: list[WaitingJob], tally: _Tally, limits: QueueLimits, out: Plan
) -> list[WaitingJob]:
    """A named queue with `max_running` offers only its first (max_running - running) jobs."""
    free: dict[str, int] = {}
    for name, q in limits.queues.items():
        if q.max_running is not None:
            free[name] = max(q.max_running - tally.queue_jobs[name], 0)
    kept = []
    ahead: dict[str, int] = defaultdict(int)
    for job in ready:  # in submission order
        if job.queue is None or job.queue not in free:
            kept.append(job)
            continue
        name = job.queue
        if ahead[name] < free[name]:
            kept.append(job)
        else:
            running = tally.queue_jobs[name]
            out.waits[job.job_id] = Waits(
                "queue",
                f"queue {name} runs {limits.queues[name].max_running} job(s) at a time in "
                f"submission order: {running} running, {ahead[name]} earlier waiting",
            )
        ahead[name] += 1
    return kept


@dataclass
class _Reservation:
    """Room reserved in one quota for a fairer job: from `at` (None: no lease is known to
    end), leaving `spare` vCPUs then for jobs that do not end before `at`."""

    job_id: str
    at: datetime | None
    spare: float


@dataclass(frozen=True)
class _Gap:
    """A researcher's first job that waits for room reserved in quota `key` (for itself or
    for a fairer job): by the estimates it cannot start before `room.at`, so a later job of
    the same researcher may take free room if it ends by then (backfill that delays no
    earlier job of theirs), and otherwise waits its turn."""

    job_id: str
    key: str
    room: _Reservation
    reason: str

    def ends_before(self, job: WaitingJob, now: datetime) -> bool:
        return (
            job.quota_key == self.key
            and job.hours is not None
            and self.room.at is not None
            and now.timestamp() + job.hours * 3600.0 <= self.room.at.timestamp()
        )

    def behind(self, researcher: str) -> Waits:
        return Waits("turn", f"behind {researcher}'s job {self.job_id}, which waits: {self.reason}")


def _reserve(
    job: WaitingJob,
    leases: list[Lease],
    admitted: list[WaitingJob],
    room: QuotaRoom,
    tally: _Tally,
    now: datetime,
    stopping: frozenset[str] = frozenset(),
) -> _Reservation:
    """When `job` will fit its quota as the known ends of leases free room (a lease being
    stopped for a preemption, or borrowing room reserved for `job`, ends now)."""
    free = _free(room, job.quota_key, tally)
    ends = [
        (
            now if lease.job_id in stopping or lease.loan_for == job.job_id else lease.ends_at,
            lease.vcpus,
        )
        for lease in leases
        if lease.quota_key == job.quota_key
        and (lease.ends_at is not None or lease.job_id in stopping or lease.loan_for == job.job_id)
    ]
    ends += [
        (now + timedelta(hours=a.hours), a.vcpus)
        for a in admitted
        if a.quota_key == job.quota_key and a.hours is not None
    ]
    for at, vcpus in sorted(ends):
        free += vcpus
        if free >= job.vcpus:
            return _Reservation(job.job_id, at, free - job.vcpus)
    return _Reservation(job.job_id, None, 0.0)


def _free(room: QuotaRoom, key: str, tally: _Tally) -> float:
    """vCPUs of quota `key` (`room`) that no lease, no admission of this pass and no other
    instance holds now."""
    assert room.limit is not None
    return room.limit - room.others - tally.vcpus[key]


def _preempt(job: WaitingJob, found: Victims, out: Plan) -> None:
    """Record the preemptions for `job` and say so in its wait."""
    for lease in found.chosen:
        if lease.job_id in found.reclaimed:
            out.preempt.append(
                (
                    lease.job_id,
                    f"its room is taken back: it ran on room of quota {job.quota_key} "
                    f"lent until {job.researcher}'s job {job.job_id} could start, and now it can",
                )
            )
            continue
        why = (
            f"{lease.researcher} has had more GPU-hours recently, for its share, than "
            f"{job.researcher}, "
            f"and quota {job.quota_key}'s free room would sit idle while "
            f"{job.researcher}'s job {job.job_id} waits for it to gather"
            if lease.job_id in found.by_use
            else f"{lease.researcher} holds more than its share of quota {job.quota_key} and "
            f"{job.researcher}'s job {job.job_id} needs the room"
        )
        out.preempt.append((lease.job_id, f"preempted for fair share: {why}"))
    out.waits[job.job_id] = Waits(
        "quota",
        f"quota {job.quota_key}: room is being freed for it: {len(found.chosen)} job(s) "
        "running on room lent to them or of researchers ahead of its researcher in fair share "
        "checkpoint and wait in the queue again",
    )


def _misfit(
    job: WaitingJob,
    tally: _Tally,
    quotas: Mapping[str, QuotaRoom],
    limits: QueueLimits,
    held: Mapping[str, _Reservation],
    now: datetime,
) -> Waits | None:
    cap = limits.researcher_gpus
    if cap is not None and tally.researcher[job.researcher] + job.gpus > cap:
        return Waits(
            "limit",
            f"limit researcher_gpus: {job.researcher} has {tally.researcher[job.researcher]} of "
            f"{cap} GPUs running, this job needs {job.gpus}",
        )
    cap = limits.team_limit(job.team)
    if cap is not None and tally.team[job.team] + job.gpus > cap:
        return Waits(
            "limit",
            f"limit team_gpus: team {job.team} has {tally.team[job.team]} of {cap} GPUs "
            f"running, this job needs {job.gpus}",
        )
    if job.queue is not None and job.queue in limits.queues:
        cap = limits.queues[job.queue].max_gpus
        if cap is not None and tally.queue_gpus[job.queue] + job.gpus > cap:
            return Waits(
                "queue",
                f"queue {job.queue}: {tally.queue_gpus[job.queue]} of {cap} GPUs running, "
                f"this job needs {job.gpus}",
            )
    room = quotas.get(job.quota_key)
    if room is None or room.limit is None:
        return None
    if room.limit < job.vcpus:
        return None  # never fits: the launch's refusal names the quota and its fix
    free = _free(room, job.quota_key, tally)
    if job.vcpus <= free and job.quota_key in held:
        r = held[job.quota_key]
        ends_in_time = (
            job.hours is not None
            and r.at is not None
            and now.timestamp() + job.hours * 3600.0 <= r.at.timestamp()
        )
        if ends_in_time:
            return None
        if job.vcpus <= r.spare:
            r.spare -= job.vcpus
            return None
        return Waits(
            "quota",
            f"quota {job.quota_key}: its free room is reserved for job {r.job_id}, which is "
            "ahead in fair share and needs more room than is free",
        )
    if job.vcpus > free:
        return Waits(
            "quota",
            f"quota {job.quota_key}: {max(free, 0):g} of {room.limit:g} vCPUs free "
            f"({tally.vcpus[job.quota_key]} admitted by respot, {room.others} used by other "
            f"instances), this job needs {job.vcpus}",
        )
    return None


def _positions(
    per: Mapping[str, list[WaitingJob]],
    tally: _Tally,
    load: Callable[[str], float],
    aged: Callable[[WaitingJob], bool],
    out: Plan,
) -> None:
    """Number the jobs that wait, in the order the same rules would pick them were there room."""
    order: list[WaitingJob] = []
    lists = {r: list(jobs) for r, jobs in per.items() if jobs}
    while lists:
        r = min(
            lists,
            key=lambda r: (not aged(lists[r][0]), load(r), lists[r][0].submitted_at),
        )
        job = lists[r].pop(0)
        tally.add(job.researcher, job.team, job.queue, job.quota_key, job)
        order.append(job)
        if not lists[r]:
            del lists[r]
    for i, job in enumerate(order, start=1):
        w = out.waits.get(job.job_id)
        if w is not None:
            out.waits[job.job_id] = Waits(w.kind, w.reason, i)
