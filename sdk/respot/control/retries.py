"""The lifecycle's delayed work: a job's tick applied again later, through SQS `DelaySeconds`.

A paced launch (`respot.aws.pacing`) holds a reserved launch token due in a few seconds; the
lifecycle dates its attempt so that the job's tick launches it again from then on, and asks
for a look then (`LookAgainLater`). This sends it: one message on the standard queue
`launch-retries` (FIFO queues have no per-message delay), `{"job_id", "attempt", "reason"}`,
delayed by `delay_seconds` (SQS: at most 900), which the `launch_retries` function reads
and answers with that job's tick (`lambdas.launch_retries`). At least once: a duplicate tick changes
nothing (the launch carries its client token, the pacing its marker); a lost or failed send
costs the wait until the minute's tick, which does the same. Never raises.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from respot.core.effects import LookAgainLater

log = logging.getLogger("respot.control.retries")

MAX_DELAY_SECONDS = 900  # SQS's largest DelaySeconds


class LaunchRetries:
    """Sends `LookAgainLater` effects to the launch-retries queue (None: the tick does it)."""

    def __init__(self, queue_url: str | None, client: Any = None) -> None:
        self.queue_url = queue_url
        self.client = client

    def send(self, effect: LookAgainLater) -> bool:
        """Queue the look, delayed; False (logged) if not queued: the tick does it then."""
        if not self.queue_url or self.client is None:
            return False
        body = {"job_id": effect.job_id, "attempt": effect.attempt, "reason": effect.reason}
        try:
            self.client.send_message(
                QueueUrl=self.queue_url,
                MessageBody=json.dumps(body),
                DelaySeconds=min(max(int(effect.delay_seconds), 0), MAX_DELAY_SECONDS),
            )
        except Exception:  # a look is an optimisation of the tick: never fail the decision
            log.exception(
                "could not queue job %s's look in %ds; the next tick does it",
                effect.job_id,
                effect.delay_seconds,
            )
            return False
        return True


def look_of(body: str) -> tuple[str, int]:
    """(job id, attempt) of a launch-retries message; `ValueError` naming what is wrong."""
    try:
        doc = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ValueError(f"a launch-retries message that is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError("a launch-retries message that is not a JSON object")
    job_id, attempt = doc.get("job_id"), doc.get("attempt")
    if not isinstance(job_id, str) or not job_id:
        raise ValueError("a launch-retries message without a job_id")
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1:
        raise ValueError(f"a launch-retries message with attempt {attempt!r}: give a number >= 1")
    return job_id, attempt
