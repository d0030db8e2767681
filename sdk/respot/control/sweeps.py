"""The control plane's side of sweeps: tell the sweep Lambda what a trial job just did.

After each commit, `SweepFeed.offer` looks at the job: if it runs a trial of a sweep
(`submission.sweep`), a new value of any metric from the agent, or the job's end, is put on
the FIFO queue `sweep-events` with the sweep as message group, so one sweep's news is
handled one message at a time and in order. The deduplication id makes a repeated send (a
redelivered report, a retried handler) one message. Like notifications, a failure to send
is logged and never fails a transition: the sweep only hears of it later (the end of a job
is offered again by any later event of that job).
"""

from __future__ import annotations

import logging
from typing import Any

from respot.core.events import AgentReport, JobEvent
from respot.core.job import JobRecord
from respot.wire.messages import AgentProgress

log = logging.getLogger("respot.control")


class SweepFeed:
    """Sends a trial job's news to the sweep queue; never raises."""

    def __init__(self, queue_url: str | None, client: Any = None) -> None:
        self.queue_url = queue_url
        self.client = client

    def offer(self, record: JobRecord | None, event: JobEvent) -> None:
        """Send the sweep what `event` did to `record`, if the job is a trial and it matters."""
        if record is None or not self.queue_url or self.client is None:
            return
        ref = record.submission.sweep
        if ref is None:
            return
        body: dict[str, Any] = {
            "kind": "trial",
            "sweep_id": ref.sweep_id,
            "job_id": record.job_id,
            "trial": ref.trial,
            "state": record.state.value,
        }
        if record.state.is_terminal():
            body.update(
                step=record.progress.step,
                metrics=dict(record.progress.metrics),
                reason=record.reason,
            )
            dedup = f"{record.job_id}-end"
        elif (
            isinstance(event, AgentReport)
            and isinstance(event.message.body, AgentProgress)
            and event.message.body.step is not None
            and event.message.body.metrics
        ):
            progress = event.message.body
            body.update(step=progress.step, metrics=dict(progress.metrics))
            dedup = f"{record.job_id}-a{event.message.attempt}-s{progress.step}"
        else:
            return
        import json

        try:
            self.client.send_message(
                QueueUrl=self.queue_url,
                MessageBody=json.dumps(body),
                MessageGroupId=ref.sweep_id,
                MessageDeduplicationId=dedup[:128],
            )
        except Exception:  # a sweep's news must never block or fail a transition
            log.exception("could not queue sweep news for job %s", record.job_id)
