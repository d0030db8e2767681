"""The body of a notifications-queue message: a job's timeline entries of one committed change."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from respot.core.job import TimelineEntry


class JobNotification(BaseModel):
    """What `control.service.Notifications.send` queues after each commit that noted something."""

    model_config = ConfigDict(extra="ignore")

    job_id: str
    state: str
    version: int
    entries: list[TimelineEntry]
