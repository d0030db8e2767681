"""What the admission planner reads: waiting jobs, leases of admitted jobs, quotas and limits."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime

from respot.queue.budgets import BudgetAction


class Priority(enum.StrEnum):
    """A job's priority among its own researcher's jobs (`priority:` in the spec)."""

    LOW = "low"
    NORMAL = "normal"
    HIGH = "high"

    @property
    def rank(self) -> int:
        """0, 1, 2: higher goes first."""
        return {Priority.LOW: 0, Priority.NORMAL: 1, Priority.HIGH: 2}[self]


@dataclass(frozen=True)
class WaitingJob:
    """A job that is submitted and not admitted yet (QUEUED or HELD in its queue entry).

    `quota_key` is the quota the job counts against ("spot/G and VT", `quota_key_of`);
    `vcpus` and `gpus` are those of the largest instance type it may be placed on (so that
    whichever pool it lands in, it fits what admission reserved)."""

    job_id: str
    researcher: str
    team: str
    submitted_at: datetime
    quota_key: str
    vcpus: int
    gpus: int
    priority: Priority = Priority.NORMAL
    queue: str | None = None
    after: tuple[str, ...] = ()
    hours: float | None = None  # its estimated runtime (spec `estimated_runtime`), if given


@dataclass(frozen=True)
class Lease:
    """What an admitted job holds until it ends: vCPUs of one quota and GPUs of its owners."""

    job_id: str
    researcher: str
    team: str
    quota_key: str
    vcpus: int
    gpus: int
    admitted_at: datetime
    queue: str | None = None
    ends_at: datetime | None = None  # admitted_at + its estimated runtime, if given
    loan_for: str | None = None  # admitted into room reserved for this job, reclaimed for it


@dataclass(frozen=True)
class QuotaRoom:
    """One vCPU quota of the account: its value and what instances respot did not admit use.

    `limit`: the quota's value in vCPUs (Service Quotas); None: unknown, admission does not
    gate on it (EC2's refusal is the existing path, `core.lifecycle.launches`).
    `others`: vCPUs of running or pending instances in this quota that no lease covers
    (other tools' instances, a colleague's console launch)."""

    limit: float | None
    others: int = 0


@dataclass(frozen=True)
class NamedQueue:
    """A queue the platform team names: GPUs it may run at once, jobs it may run at once.

    `max_running: 1` runs its jobs one after another, in submission order."""

    max_gpus: int | None = None
    max_running: int | None = None


@dataclass(frozen=True)
class QueueLimits:
    """The platform team's limits and fair-share knobs (stack setting `queue`, admin command).

    - `researcher_gpus` / `team_gpus`: GPUs one researcher / one team may have admitted at
      once (None: no limit); `team_gpus_by_team` overrides `team_gpus` per team.
    - `queues`: the named queues; a spec naming any other queue is refused.
    - `team_weights`: a team's weight in fair share (default 1); `teams`: researcher -> team
      where the identity carries no team tag.
    - `half_life_hours`: how fast recent use is forgotten (see `usage`).
    - `researcher_budget(s)`, `team_budgets`: monthly USD; at 100% new jobs are held, and
      with `budget_action` "hard" admitted ones are checkpointed and stopped.
    - `aging_hours`: a waiting job gains one priority level per this many hours waited,
      and a job that waited `starve_hours` goes before every job that did not (oldest first),
      its quota held for it so smaller jobs cannot keep overtaking it.
    """

    researcher_gpus: int | None = None
    team_gpus: int | None = None
    team_gpus_by_team: dict[str, int] = field(default_factory=dict)
    queues: dict[str, NamedQueue] = field(default_factory=dict)
    team_weights: dict[str, float] = field(default_factory=dict)
    teams: dict[str, str] = field(default_factory=dict)
    half_life_hours: float = 8.0
    aging_hours: float = 4.0
    starve_hours: float = 24.0
    # Monthly budgets in USD (calendar month, UTC): per researcher (by principal ARN or last
    # name, else `researcher_budget`) and per team. At 100% the owner's new jobs are held.
    researcher_budget: float | None = None
    researcher_budgets: dict[str, float] = field(default_factory=dict)
    team_budgets: dict[str, float] = field(default_factory=dict)
    budget_action: BudgetAction = BudgetAction.HOLD
    # Fair-share preemption (`respot.queue.preemption`): on unless the platform team turns
    # it off (stack setting `queue.preemption: false`).
    preemption: bool = True

    def budget_of_researcher(self, researcher: str) -> float | None:
        """The researcher's monthly budget in USD, or None."""
        if researcher in self.researcher_budgets:
            return self.researcher_budgets[researcher]
        short = researcher.rsplit("/", 1)[-1]
        return self.researcher_budgets.get(short, self.researcher_budget)

    @property
    def has_budgets(self) -> bool:
        """True if any monthly budget is set (then the tick runs a pass, queue on or off)."""
        return bool(
            self.researcher_budget is not None or self.researcher_budgets or self.team_budgets
        )

    def weight(self, team: str) -> float:
        """The team's fair-share weight (default 1)."""
        return float(self.team_weights.get(team, 1.0))

    def team_limit(self, team: str) -> int | None:
        """GPUs the team may have admitted at once, or None."""
        return self.team_gpus_by_team.get(team, self.team_gpus)

    @property
    def configured(self) -> bool:
        """True if any limit is set (otherwise only the quotas gate admission)."""
        return bool(
            self.researcher_gpus is not None
            or self.team_gpus is not None
            or self.team_gpus_by_team
            or self.queues
        )


def quota_key_of(market: str, quota_class: str | None, instance_type: str) -> str:
    """The key admission counts vCPUs under: "<market>/<quota class>" (the type if unknown)."""
    return f"{market}/{quota_class or instance_type}"
