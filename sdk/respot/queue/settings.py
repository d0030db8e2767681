"""The queue's settings as the platform team writes them (stack setting `queue`, the admin
command `respot queue limits`), checked with errors that name the field and the fix.

    {"enabled": true, "researcher_gpus": 8, "team_gpus": 16, "team_gpus_by_team": {"nlp": 8},
     "queues": {"serial": {"max_running": 1}, "big": {"max_gpus": 16}},
     "team_weights": {"vision": 2}, "teams": {"arn:aws:iam::1:user/ann": "vision"},
     "half_life_hours": 2, "aging_hours": 4, "starve_hours": 24,
     "researcher_budget": 500, "team_budgets": {"nlp": 5000}, "budget_action": "hold"}
"""

from __future__ import annotations

import re
from typing import Any

from respot.queue.budgets import BudgetAction
from respot.queue.model import NamedQueue, QueueLimits

_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
_KEYS = {
    "enabled",
    "researcher_gpus",
    "team_gpus",
    "team_gpus_by_team",
    "queues",
    "team_weights",
    "teams",
    "half_life_hours",
    "aging_hours",
    "starve_hours",
    "researcher_budget",
    "researcher_budgets",
    "team_budgets",
    "budget_action",
    "preemption",
}


class QueueSettingsError(ValueError):
    """A queue setting that cannot be used; the message names the field and the fix."""


def _count(name: str, value: Any, *, optional: bool = True) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise QueueSettingsError(f"{name}: {value!r} is not a whole number of GPUs >= 0")
    return value


def _hours(name: str, value: Any, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 24 * 365:
        raise QueueSettingsError(f"{name}: {value!r} is not a number of hours above 0")
    return float(value)


def _usd(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e9:
        raise QueueSettingsError(
            f"{name}: {value!r} is not a budget in USD >= 0 (a budget below zero cannot be "
            "spent; 0 holds every new job)"
        )
    return float(value)


def _budgets(name: str, value: Any) -> dict[str, float]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise QueueSettingsError(f'{name}: give {{"<name>": <USD per month>, ...}}')
    return {str(k): _usd(f"{name}.{k}", v) for k, v in value.items()}


def parse_settings(data: dict[str, Any] | None) -> tuple[bool, QueueLimits]:
    """(enabled, limits) from the settings' JSON object; `QueueSettingsError` if malformed."""
    data = dict(data or {})
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise QueueSettingsError(
            f"unknown queue setting(s) {', '.join(unknown)}; known: {', '.join(sorted(_KEYS))}"
        )
    queues: dict[str, NamedQueue] = {}
    for name, q in (data.get("queues") or {}).items():
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise QueueSettingsError(
                f"queues: {name!r} is not a queue name (1-64 lowercase letters, digits, '-', '_')"
            )
        if not isinstance(q, dict) or set(q) - {"max_gpus", "max_running"}:
            raise QueueSettingsError(
                f"queues.{name}: give an object with max_gpus and/or max_running, e.g. "
                '{"max_running": 1}'
            )
        queues[name] = NamedQueue(
            max_gpus=_count(f"queues.{name}.max_gpus", q.get("max_gpus")),
            max_running=_count(f"queues.{name}.max_running", q.get("max_running")),
        )
    weights = {}
    for team, w in (data.get("team_weights") or {}).items():
        if isinstance(w, bool) or not isinstance(w, int | float) or not 0 < w <= 1000:
            raise QueueSettingsError(f"team_weights.{team}: {w!r} is not a weight in (0, 1000]")
        weights[str(team)] = float(w)
    by_team = {
        str(t): int(_count(f"team_gpus_by_team.{t}", v, optional=False) or 0)
        for t, v in (data.get("team_gpus_by_team") or {}).items()
    }
    teams = data.get("teams") or {}
    if not isinstance(teams, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in teams.items()
    ):
        raise QueueSettingsError('teams: give {"<principal ARN or name>": "<team>", ...}')
    enabled = data.get("enabled", False)
    if not isinstance(enabled, bool):
        raise QueueSettingsError(f"enabled: {enabled!r} is not true or false")
    action = data.get("budget_action", BudgetAction.HOLD.value)
    if not isinstance(action, str) or action not in {a.value for a in BudgetAction}:
        raise QueueSettingsError(
            f"budget_action: {action!r} is not hold or hard (hold: at 100% of a budget new "
            "jobs are held; hard: running ones are also checkpointed and stopped)"
        )
    preemption = data.get("preemption", True)
    if not isinstance(preemption, bool):
        raise QueueSettingsError(
            f"preemption: {preemption!r} is not true or false (true, the default: the queue "
            "may checkpoint and requeue running jobs of researchers ahead in fair share)"
        )
    defaults = QueueLimits()
    return enabled, QueueLimits(
        researcher_gpus=_count("researcher_gpus", data.get("researcher_gpus")),
        team_gpus=_count("team_gpus", data.get("team_gpus")),
        team_gpus_by_team=by_team,
        queues=queues,
        team_weights=weights,
        teams=dict(teams),
        half_life_hours=_hours(
            "half_life_hours", data.get("half_life_hours"), defaults.half_life_hours
        ),
        aging_hours=_hours("aging_hours", data.get("aging_hours"), defaults.aging_hours),
        starve_hours=_hours("starve_hours", data.get("starve_hours"), defaults.starve_hours),
        researcher_budget=None
        if data.get("researcher_budget") is None
        else _usd("researcher_budget", data.get("researcher_budget")),
        researcher_budgets=_budgets("researcher_budgets", data.get("researcher_budgets")),
        team_budgets=_budgets("team_budgets", data.get("team_budgets")),
        budget_action=BudgetAction(action),
        preemption=preemption,
    )


def settings_dict(enabled: bool, limits: QueueLimits) -> dict[str, Any]:
    """The JSON object `parse_settings` reads back to the same (enabled, limits)."""
    return {
        "enabled": enabled,
        "researcher_gpus": limits.researcher_gpus,
        "team_gpus": limits.team_gpus,
        "team_gpus_by_team": dict(limits.team_gpus_by_team),
        "queues": {
            n: {
                k: v
                for k, v in (("max_gpus", q.max_gpus), ("max_running", q.max_running))
                if v is not None
            }
            for n, q in limits.queues.items()
        },
        "team_weights": dict(limits.team_weights),
        "teams": dict(limits.teams),
        "half_life_hours": limits.half_life_hours,
        "aging_hours": limits.aging_hours,
        "starve_hours": limits.starve_hours,
        "researcher_budget": limits.researcher_budget,
        "researcher_budgets": dict(limits.researcher_budgets),
        "team_budgets": dict(limits.team_budgets),
        "budget_action": limits.budget_action.value,
        "preemption": limits.preemption,
    }


def mapped_team(principal: str | None, limits: QueueLimits) -> str | None:
    """The platform team's mapping for a submitter: by full ARN, then by its last name (the
    user, or the role's session name); None if it names neither."""
    if not principal:
        return None
    if principal in limits.teams:
        return limits.teams[principal]
    return limits.teams.get(principal.rsplit("/", 1)[-1])


def team_of(principal: str | None, limits: QueueLimits, tagged: str | None = None) -> str:
    """The team of a submitter: the platform team's mapping (`mapped_team`) wins, then the
    team the submitter's IAM principal tag `respot:team` named at submission (`tagged`,
    respot.aws.teamtags), else "default"."""
    return mapped_team(principal, limits) or tagged or "default"
