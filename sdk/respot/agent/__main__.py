"""`python -m respot.agent`: run this instance's job attempt, then shut down (or exit)."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
from types import FrameType

from respot.agent.config import AgentConfig
from respot.agent.exceptions import AgentConfigError
from respot.agent.runner import Agent, AgentResult

logger = logging.getLogger("respot.agent")

# After the attempt's last report (AgentCompleted, AgentPreempted or AgentFailed) the control
# plane terminates the instance; if that never comes, power off anyway rather than idle at
# spot prices. Not at once: the instance's shutting-down event reaches the control plane by
# another path (EventBridge) than the report (SQS), so it can be handled first; an attempt
# whose instance goes down before any last report is judged lost and replaced, so a job that
# had just completed got a new instance launched (and an interruption counted) for nothing.
LINGER_SECONDS = 300.0
POWEROFF_ARGV = ["shutdown", "-h", "now"]


def main() -> int:
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("botocore").setLevel(logging.WARNING)
    logging.getLogger("s3transfer").setLevel(logging.WARNING)
    try:
        config = AgentConfig.from_env()
    except AgentConfigError as exc:
        logger.error("cannot start: %s", exc)
        return 2
    agent = Agent(config)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        agent.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    result: AgentResult | None = None
    try:
        result = agent.run()
    except Exception:
        logger.exception("the agent could not run this instance's job")
    code = 0 if result is not None and result.outcome != "failed" else 1
    if result is not None:
        logger.info("attempt ended: %s", result)
    if config.shutdown == "poweroff":
        if result is not None:  # its last report is sent: the control plane ends the instance
            logger.info("waiting up to %.0fs to be terminated", LINGER_SECONDS)
            time.sleep(LINGER_SECONDS)
        logger.info("powering off")
        subprocess.run(POWEROFF_ARGV, check=False)  # noqa: S603 - a fixed argv, no shell
    return code


if __name__ == "__main__":
    sys.exit(main())
