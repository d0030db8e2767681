"""Lambda `instance_state`: an instance that runs binds; one that goes away unfinished resumes.

Trigger: EventBridge `EC2 Instance State-change Notification`.
"""

from __future__ import annotations

from typing import Any

from lambdas._ec2 import handle_ec2_event
from lambdas._runtime import logger


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """One EventBridge event."""
    return handle_ec2_event(event)
