"""Lambda `reconcile`: every minute, a look at every live job (placement, stuck launches,
lost heartbeats, limits).

Trigger: EventBridge schedule.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from lambdas._runtime import control_plane, logger


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """One tick."""
    results = control_plane().reconcile()
    outcomes = Counter(r.outcome for r in results)
    logger.info("reconciled", extra={"jobs": len(results), "outcomes": dict(outcomes)})
    return {"jobs": len(results), "outcomes": dict(outcomes)}
