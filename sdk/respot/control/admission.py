"""The team's queue in the control plane: read who waits and what is held, plan (the pure
`respot.queue.plan`), commit the admissions to the ledger (compare-and-set), then admit.

A pass runs after a submission that was held, after a held-then-admitted job ends, on the
reconcile tick, and after an admin changes the limits. Its order is fixed:
1. read the ledger (leases, recent use, the admin's limits) and every live job;
2. release the leases of jobs that ended (their GPU-time goes into recent use);
3. read the account: the quotas' values (Service Quotas, cached) and every pending or
   running instance (respot's and others'), so room is counted as EC2 will count it;
4. plan; write the ledger with the new leases if its version is the one read (else go to 1);
5. only then apply `Admitted` to each job whose lease is written and which is still HELD
   (also one a crashed pass left), and `AdmissionRefused` to those the plan fails;
6. record on each job that still waits why it waits, its position and estimated start
   (`QueueWaitNoted`, written only when that changed), for `respot ls`/`status` and Slack;
7. checkpoint and stop each job the plan preempts for fair share (`PlatformStop`, cause
   `preempt`): recorded in the ledger by the write of step 4 first, so a rival pass re-plans
   with it counted, and applied again by a later pass if this one stopped before applying it.
   A preempted job's lease is released (step 2) only once it is HELD again, its instance
   stopped, so its room counts as held until then.
Why this never admits a job twice nor exceeds a quota: docs/queue.md, "Why no job is
admitted twice".
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from respot.aws.jobs import JobTable
from respot.aws.queueledger import AccountUse, LedgerState, QueueLedger
from respot.core.cost import attempt_cost, attempt_hours, on_demand_price
from respot.core.events import AdmissionRefused, Admitted, JobEvent, PlatformStop, QueueWaitNoted
from respot.core.job import JobRecord, Market, QueueWait
from respot.core.lifecycle.stops import PREEMPT, PREEMPTED, STOPPING
from respot.core.quotas import quota_for
from respot.core.states import JobState
from respot.exceptions import ConcurrentUpdateError
from respot.queue import (
    Lease,
    Preemptions,
    Priority,
    QueueLimits,
    QuotaRoom,
    WaitingJob,
    plan,
    settle,
    settle_loans,
)
from respot.queue.admission import Plan
from respot.queue.budgets import (
    AlertsSent,
    BudgetAction,
    BudgetAlert,
    Running,
    due_alerts,
    hard_stops,
)
from respot.queue.estimate import estimate_starts
from respot.queue.model import quota_key_of
from respot.queue.settings import parse_settings, team_of
from respot.queue.shapes import shape

log = logging.getLogger("respot.control.admission")

LEDGER_ATTEMPTS = 6  # compare-and-set tries of one pass


@dataclass
class PassResult:
    """What one admission pass did (for logs, tests and `respot queue`)."""

    admitted: list[str] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    noted: list[str] = field(default_factory=list)  # held jobs whose recorded wait changed
    plan: Plan | None = None
    leases: dict[str, Lease] = field(default_factory=dict)
    # Budget alerts this pass recorded in the ledger (its write won): the caller sends them.
    alerts: list[BudgetAlert] = field(default_factory=list)
    budget_action: BudgetAction = BudgetAction.HOLD
    stopped: list[tuple[str, str]] = field(default_factory=list)  # `hard`: (job, reason)
    preempted: list[tuple[str, str]] = field(default_factory=list)  # fair share: (job, reason)


def _has_budgets(limits: QueueLimits) -> bool:
    return bool(
        limits.researcher_budget is not None or limits.researcher_budgets or limits.team_budgets
    )


def _moved(before: dict[str, float], after: dict[str, float]) -> bool:
    """True if a spend moved by a cent or more (a ledger write per such change, no more)."""
    keys = set(before) | set(after)
    return any(abs(before.get(k, 0.0) - after.get(k, 0.0)) >= 0.01 for k in keys)


def _committed(record: JobRecord, now: datetime, prices: dict[str, float]) -> float:
    """What a live job's open attempt will still bill by its estimated runtime (0 if none)."""
    att = record.current
    estimate = record.spec.estimated_runtime
    if att is None or att.end is not None or estimate is None:
        return 0.0
    price = att.price_per_hour or on_demand_price(att.placement.instance_type, prices) or 0.0
    ran = sum(attempt_hours(a, now) for a in record.attempts)
    return price * max(estimate.total_seconds() / 3600.0 - ran, 0.0)


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None


def _changed(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """True if the waits differ in more than their estimates' drift (a write per change)."""

    def strip(w: dict[str, Any]) -> dict[str, Any]:
        return {k: {f: v for f, v in d.items() if f != "estimate"} for k, d in w.items()}

    return strip(before) != strip(after)


def _admitted_because(holder: str | None) -> str:
    """The words of an admission: its turn, or a loan of room reserved for `holder`."""
    if holder is None:
        return "its turn: it fits the quotas and the limits"
    return (
        f"on loan: it runs on room reserved for job {holder}, which cannot start yet; when "
        "it can, this job is checkpointed and waits in the queue again (docs/queue.md, rule 6)"
    )


def _wait_event(said: dict[str, Any]) -> QueueWaitNoted:
    """The ledger's words for one held job as the event that records them on the job."""
    estimate = said.get("estimate")
    return QueueWaitNoted(
        kind=str(said["kind"]),
        reason=str(said["reason"]),
        position=said.get("position"),
        estimate=datetime.fromisoformat(estimate) if estimate else None,
    )


def _follow_instances(
    leases: dict[str, Lease], instances: list[tuple[str, str | None, str, int]]
) -> dict[str, Lease]:
    """Each lease moved to the quota its job's instances are in, when none is in its own and
    all are in one other (a spot job fallen back to on-demand, or back on spot after its
    return): the room it held in its old quota is free for others. A job with no instance
    now (between attempts) keeps its lease where it is."""
    keys: dict[str, set[str]] = {}
    for _, job_id, key, _ in instances:
        if job_id is not None and job_id in leases:
            keys.setdefault(job_id, set()).add(key)
    moved = dict(leases)
    for job_id, found in keys.items():
        if len(found) == 1 and leases[job_id].quota_key not in found:
            moved[job_id] = replace(leases[job_id], quota_key=found.pop())
    return moved


def _requeued_at(record: JobRecord | None, lease: Lease) -> datetime | None:
    """When a leased job was preempted and requeued (HELD again) since its lease; else None."""
    if record is None or record.state is not JobState.HELD:
        return None
    preempted = record.policy.get(PREEMPTED)
    if not preempted:
        return None
    at = datetime.fromisoformat(preempted["at"])
    return at if at >= lease.admitted_at else None


def _training(record: JobRecord) -> bool:
    att = record.current
    return (
        record.state is JobState.RUNNING
        and att is not None
        and att.instance_id is not None
        and att.end is None
    )


def _preempting(
    decided: dict[str, dict[str, str]], leases: dict[str, Lease], by_id: dict[str, JobRecord]
) -> dict[str, dict[str, str]]:
    """The preemptions still under way: the job leased and either stopping for one or still
    training (decided, its stop not applied yet). A job that stopped training otherwise (it
    ended, was interrupted, is held again) is no longer preempted: the pass plans again."""
    kept = {}
    for job_id, said in decided.items():
        record = by_id.get(job_id)
        if job_id not in leases or record is None:
            continue
        stop = record.policy.get(STOPPING)
        if (stop and stop.get("cause") == PREEMPT) or (not stop and _training(record)):
            kept[job_id] = said
    return kept


def _preemptions(
    preempting: dict[str, dict[str, str]], leases: dict[str, Lease], by_id: dict[str, JobRecord]
) -> Preemptions:
    """What the planner needs: each leased job's last preemption, those stopping now, and
    those that may be preempted (training, not stopping for any rule)."""
    last = {}
    for job_id in leases:
        record = by_id.get(job_id)
        said = record.policy.get(PREEMPTED) if record is not None else None
        if said:
            last[job_id] = datetime.fromisoformat(said["at"])
    for job_id, said in preempting.items():
        last[job_id] = datetime.fromisoformat(said["at"])
    running = frozenset(
        job_id
        for job_id in leases
        if (record := by_id.get(job_id)) is not None
        and _training(record)
        and STOPPING not in record.policy
        and job_id not in preempting
    )
    return Preemptions(last=last, stopping=frozenset(preempting), running=running)


class Admission:
    """Runs admission passes over the job table and the account."""

    def __init__(
        self,
        *,
        jobs: JobTable,
        ledger: QueueLedger,
        account: AccountUse | None,
        default_instance_types: tuple[str, ...],
        enabled: bool = False,
        limits: QueueLimits | None = None,
        prices: dict[str, float] | None = None,
    ) -> None:
        self.jobs = jobs
        self.ledger = ledger
        self.account = account
        self.default_instance_types = default_instance_types
        self.enabled = enabled
        self.limits = limits or QueueLimits()
        self.prices = dict(prices or {})  # on-demand list prices (the cost ledger's fallback)
        self.enabled_seen = enabled  # the effective switch as the last ledger read said
        self.limits_seen = self.limits  # and the limits in force

    def enabled_now(self) -> bool:
        """The effective switch: an admin's setting in the ledger, else the stack's."""
        return self.current(self.ledger.read())[0]

    def current(self, state: LedgerState) -> tuple[bool, QueueLimits]:
        """(enabled, limits): the admin's, when one set them, else the stack's."""
        found = parse_settings(state.settings) if state.settings is not None else None
        enabled, limits = found or (self.enabled, self.limits)
        self.enabled_seen, self.limits_seen = enabled, limits
        return enabled, limits

    def queue_names(self) -> set[str]:
        """The named queues a spec may name now."""
        return set(self.current(self.ledger.read())[1].queues)

    def set_settings(self, settings: dict[str, Any]) -> None:
        """Store an admin's settings in the ledger (checked first; compare-and-set)."""
        parse_settings(settings)  # raises QueueSettingsError naming the field
        for _ in range(LEDGER_ATTEMPTS):
            state = self.ledger.read()
            try:
                self.ledger.write(replace(state, settings=dict(settings)))
                return
            except ConcurrentUpdateError:
                continue
        raise ConcurrentUpdateError("the queue ledger kept changing; try again")

    def run(self, apply: Callable[[str, JobEvent], Any], now: datetime) -> PassResult:
        """One pass: plan, commit to the ledger, then admit (`apply` applies a job event)."""
        result = PassResult()
        live: list[JobRecord] = []
        waits: dict[str, dict[str, Any]] = {}
        for _ in range(LEDGER_ATTEMPTS):
            state = self.ledger.read()
            _, limits = self.current(state)
            live = [r for r in (self.jobs.get(i) for i in self.jobs.live_job_ids()) if r]
            by_id = {r.job_id: r for r in live}
            new = replace(state, leases=dict(state.leases), usage=dict(state.usage))
            result.released = []
            new.preempting = dict(state.preempting)
            for job_id, lease in state.leases.items():
                requeued = _requeued_at(by_id.get(job_id), lease)
                if job_id in by_id and requeued is None:
                    continue
                ended = by_id.get(job_id) or self.jobs.get(job_id)
                end = requeued or (ended.finished_at if ended else None) or now
                new.leases.pop(job_id)
                new.usage[lease.researcher] = settle(
                    new.usage.get(lease.researcher),
                    lease.gpus,
                    lease.admitted_at,
                    max(end, lease.admitted_at),
                    limits.half_life_hours,
                )
                result.released.append(job_id)
            new.preempting = _preempting(new.preempting, new.leases, by_id)
            held = [r for r in live if r.state is JobState.HELD]
            types: dict[str, str] = {}  # quota key -> an instance type of its class
            waiting = [self._waiting(r, limits, types) for r in held if r.job_id not in new.leases]
            states = self._after_states(waiting, by_id)
            # DescribeInstances only when a job waits for room (a lease's quota matters then)
            instances = self.account.instances() if self.account is not None and types else []
            new.leases = settle_loans(
                _follow_instances(new.leases, instances), (w.job_id for w in waiting)
            )
            rooms = self._rooms(types, new.leases, instances)
            spent, paid, budgets = (
                self._spend(limits, live, now) if _has_budgets(limits) else ({}, {}, {})
            )
            new.spend, new.budgets = spent, budgets
            alerts, sent = due_alerts(spent, budgets, AlertsSent.from_doc(state.alerts), now)
            new.alerts = sent.to_doc() if (alerts or state.alerts) else {}
            new.queues = sorted(limits.queues)
            known = _preemptions(new.preempting, new.leases, by_id)
            p = plan(
                waiting, new.leases.values(), rooms, limits, new.usage, states, now, spent, known
            )
            for job_id, reason in p.preempt:
                new.preempting[job_id] = {"at": now.isoformat(), "reason": reason}
            for job in p.admit:
                new.leases[job.job_id] = Lease(
                    job_id=job.job_id,
                    researcher=job.researcher,
                    team=job.team,
                    quota_key=job.quota_key,
                    vcpus=job.vcpus,
                    gpus=job.gpus,
                    admitted_at=now,
                    queue=job.queue,
                    ends_at=now + timedelta(hours=job.hours) if job.hours else None,
                    loan_for=p.loans.get(job.job_id),
                )
            result.plan = p
            starts = estimate_starts(waiting, p.waits, new.leases.values(), rooms, now)
            new.waits = {
                job_id: {
                    "kind": w.kind,
                    "reason": w.reason,
                    "position": w.position,
                    "estimate": _iso(starts.get(job_id)),
                }
                for job_id, w in p.waits.items()
            }
            if (
                p.admit
                or result.released
                or _changed(state.waits, new.waits)
                or _moved(state.spend, new.spend)
                or state.budgets != new.budgets
                or state.queues != new.queues
                or state.alerts != new.alerts
                or state.preempting != new.preempting
            ):
                new.planned_at = now.isoformat()
                try:
                    self.ledger.write(new)
                except ConcurrentUpdateError:
                    continue  # another pass wrote first: read again, plan again
            result.leases = new.leases
            preempting = new.preempting
            result.alerts = alerts  # recorded by the write above (or nothing new to say)
            result.budget_action = limits.budget_action
            waits = new.waits
            break
        else:
            log.warning("admission pass gave up after %d ledger conflicts", LEDGER_ATTEMPTS)
            return result
        assert result.plan is not None
        # Every held job with a lease: this pass's in the plan's order (a researcher's jobs by
        # priority, then submission, so the records' admission times follow it, not the order
        # the table listed them in), then any an earlier pass leased but never got to admit.
        planned = [job.job_id for job in result.plan.admit]
        rest = [r.job_id for r in held if r.job_id not in planned]
        held_ids = {record.job_id for record in held}
        for job_id in planned + rest:
            if job_id in held_ids and job_id in result.leases:
                holder = result.leases[job_id].loan_for
                apply(job_id, Admitted(_admitted_because(holder)))
                result.admitted.append(job_id)
        for job, reason in result.plan.fail:
            apply(job.job_id, AdmissionRefused(reason))
            result.refused.append((job.job_id, reason))
        for job_id, decided in preempting.items():  # this pass's, and any one left unapplied
            victim = by_id.get(job_id)
            if victim is not None and STOPPING not in victim.policy:
                apply(job_id, PlatformStop(decided["reason"], PREEMPT))
                result.preempted.append((job_id, decided["reason"]))
        if limits.budget_action is BudgetAction.HARD and paid:
            result.stopped = self._hard_stops(live, limits, paid, budgets, apply)
        failed = {job.job_id for job, _ in result.plan.fail}
        for record in held:
            said = waits.get(record.job_id)
            if record.job_id in result.leases or record.job_id in failed or said is None:
                continue
            event = _wait_event(said)
            wait = QueueWait(
                kind=event.kind,
                reason=event.reason,
                position=event.position,
                estimate=event.estimate,
                at=now,
            )
            if not wait.same_as(record.queue_wait):  # one job write per change, no more
                apply(record.job_id, event)
                result.noted.append(record.job_id)
        return result

    def _spend(
        self, limits: QueueLimits, live: list[JobRecord], now: datetime
    ) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
        """USD spent this calendar month (UTC) by each researcher and team, from every job's
        attempts (the cost ledger: an attempt running into this month counts whole), plus
        what admitted live jobs will spend by their estimated runtime; what they paid (the
        bill alone, for `budget_action: hard`); and the budgets."""
        month = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        spent: dict[str, float] = {}
        billed: dict[str, float] = {}
        for record in self.jobs.recent(limit=1_000_000):
            owner = record.submission.submitted_by or "unidentified"
            paid = sum(
                attempt_cost(a, now, self.prices)
                for a in record.attempts
                if (a.ended_at or now) >= month
            )
            bill = paid
            if not record.state.is_terminal() and record.state is not JobState.HELD:
                paid += _committed(record, now, self.prices)
            if paid <= 0:
                continue
            for key in (f"researcher:{owner}", f"team:{team_of(owner, limits, record.team)}"):
                spent[key] = spent.get(key, 0.0) + paid
                billed[key] = billed.get(key, 0.0) + bill
        budgets: dict[str, float] = {f"team:{t}": b for t, b in limits.team_budgets.items()}
        owners = {r.submission.submitted_by or "unidentified" for r in live}
        owners |= {k.split(":", 1)[1] for k in spent if k.startswith("researcher:")}
        for owner in owners:
            budget = limits.budget_of_researcher(owner)
            if budget is not None:
                budgets[f"researcher:{owner}"] = budget
        return (
            {k: round(v, 4) for k, v in spent.items()},
            {k: round(v, 4) for k, v in billed.items()},
            budgets,
        )

    def _hard_stops(
        self,
        live: list[JobRecord],
        limits: QueueLimits,
        paid: dict[str, float],
        budgets: dict[str, float],
        apply: Callable[[str, JobEvent], Any],
    ) -> list[tuple[str, str]]:
        """`budget_action: hard`: checkpoint and stop the admitted jobs of each researcher or
        team that has paid its whole budget (`PlatformStop`; a job already stopping is left)."""
        running = []
        for r in live:
            if r.state.is_terminal() or r.state is JobState.HELD or STOPPING in r.policy:
                continue
            owner = r.submission.submitted_by or "unidentified"
            running.append(Running(r.job_id, owner, team_of(owner, limits, r.team)))
        stops = hard_stops(running, paid, budgets)
        for job_id, reason in stops:
            apply(job_id, PlatformStop(reason, "budget"))
        return stops

    def _waiting(self, record: JobRecord, limits: QueueLimits, types: dict[str, str]) -> WaitingJob:
        spec = record.spec
        allowed = list(spec.instance_types or self.default_instance_types) or ["g5.xlarge"]
        sizes = [(self._shape(t), t) for t in allowed]
        (vcpus, gpus), largest = max(sizes, key=lambda s: s[0])
        market = Market(spec.market)  # the quota it launches under: spot, or `market: on-demand`
        quota = quota_for(largest, market)
        key = quota_key_of(market.value, quota.quota_class if quota else None, largest)
        types.setdefault(key, largest)
        owner = record.submission.submitted_by
        return WaitingJob(
            job_id=record.job_id,
            researcher=owner or "unidentified",
            team=team_of(owner, limits, record.team),
            submitted_at=record.created_at,
            quota_key=key,
            vcpus=vcpus,
            gpus=gpus,
            priority=Priority(spec.priority),
            queue=spec.queue,
            after=tuple(spec.after),
            hours=spec.estimated_runtime.total_seconds() / 3600.0
            if spec.estimated_runtime
            else None,
        )

    def _shape(self, instance_type: str) -> tuple[int, int]:
        known = shape(instance_type)
        if known is not None:
            return known
        vcpus = self.account.type_vcpus(instance_type) if self.account else None
        return (vcpus or 0, 1)  # a type the table does not know counts one GPU

    def _after_states(
        self, waiting: list[WaitingJob], by_id: dict[str, JobRecord]
    ) -> dict[str, str]:
        states: dict[str, str] = {}
        for job in waiting:
            for name in job.after:
                if name in states:
                    continue
                record = by_id.get(name) or self.jobs.get(name)
                if record is not None:
                    states[name] = record.state.value
        return states

    def _rooms(
        self,
        types: dict[str, str],
        leases: dict[str, Lease],
        instances: list[tuple[str, str | None, str, int]],
    ) -> dict[str, QuotaRoom]:
        """Each waiting quota's value and what instances no lease covers use of it.

        A lease covers its job's instances in its own quota only, up to its vCPUs: a job's
        instance in another quota (a spot job fallen back to on-demand, a return to spot's
        overlap) or beyond them (a warm replacement beside the instance it replaces) is
        counted there, as EC2 counts it."""
        if self.account is None or not types:
            return {}
        others: dict[str, int] = {}
        covers = {job_id: lease.vcpus for job_id, lease in leases.items()}
        for _, job_id, key, vcpus in instances:
            lease = leases.get(job_id) if job_id is not None else None
            if lease is not None and lease.quota_key == key and vcpus <= covers[lease.job_id]:
                covers[lease.job_id] -= vcpus  # its lease counts it
                continue
            others[key] = others.get(key, 0) + vcpus
        return {
            key: QuotaRoom(
                limit=self.account.quota_value(instance_type, Market(key.split("/", 1)[0])),
                others=others.get(key, 0),
            )
            for key, instance_type in types.items()
        }
