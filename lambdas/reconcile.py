"""Lambda `reconcile`: every minute, a look at every live job (placement, stuck launches,
lost heartbeats, limits).

Trigger: EventBridge schedule.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from lambdas import _activity
from lambdas._runtime import control_plane, logger


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """One tick."""
    control = control_plane()
    results = control.reconcile()
    outcomes = Counter(r.outcome for r in results)
    switch = _activity.switch()
    activity = None
    if switch is not None:  # at rest, turn the pollers (this schedule included) off
        # A job whose tick failed is not in `results` but is still live: count the index.
        live = len(results) or sum(1 for _ in control.jobs.live_job_ids())
        activity = switch.tick(
            live, instances=lambda: len(control.capacity.managed_instances())
        ).value
    logger.info(
        "reconciled",
        extra={"jobs": len(results), "outcomes": dict(outcomes), "activity": activity},
    )
    return {"jobs": len(results), "outcomes": dict(outcomes), "activity": activity}
