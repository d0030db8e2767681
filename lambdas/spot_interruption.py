"""Lambda `spot_interruption`: marks a job interrupted and requests its replacement at once.

Triggers: EventBridge `EC2 Spot Instance Interruption Warning` (two minutes before the
instance is reclaimed) and `EC2 Instance Rebalance Recommendation` (noted; the agent
checkpoints on it).
"""

from __future__ import annotations

from typing import Any

from lambdas._ec2 import handle_ec2_event
from lambdas._runtime import logger


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """One EventBridge event."""
    return handle_ec2_event(event)
