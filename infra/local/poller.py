"""The "wait for termination and poll" baseline: how a polling controller notices a lost spot VM.

Controllers such as SkyPilot's managed-jobs controller do not subscribe to EC2's interruption
warning: they check each job's cluster every `JOB_STATUS_CHECK_GAP_SECONDS` (20 s in
skypilot-org/skypilot `sky/jobs/utils.py`) and relaunch once the VM is gone, from whatever
checkpoint the training code last wrote. `TerminationPoller` plays that controller against
respot's own control plane, so the benchmark can run one interruption schedule both ways:
every `every_seconds` it looks each live job's open instances up in EC2 and reports the
ones that are shutting down or terminated as `InstanceDown`. The runtime turns off the
interruption and state-change rules and the IMDS notice when it runs in this mode.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from respot.control.service import ControlPlane
from respot.core.events import InstanceDown

log = logging.getLogger("respot.local.poller")

GONE_STATES = frozenset({"shutting-down", "terminated", "stopping", "stopped"})


class TerminationPoller:
    """Every `every_seconds` (real), report instances of live jobs that EC2 says are gone."""

    def __init__(
        self,
        control_plane: Callable[[], ControlPlane],
        ec2: Any,
        *,
        every_seconds: float,
    ) -> None:
        self._control_plane = control_plane
        self._ec2 = ec2
        self.every_seconds = every_seconds
        self.polls = 0
        self.detections: list[tuple[str, str]] = []  # (job_id, instance_id)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="local-poller", daemon=True)

    def start(self) -> TerminationPoller:
        """Start polling."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop polling."""
        self._stop.set()
        self._thread.join(timeout=self.every_seconds + 10)

    def _loop(self) -> None:
        while not self._stop.wait(self.every_seconds):
            try:
                self.poll_once()
            except Exception:  # a controller keeps polling whatever one round did
                log.exception("poll failed")

    def poll_once(self) -> int:
        """One round; returns how many lost instances it reported."""
        self.polls += 1
        control = self._control_plane()
        open_attempts: dict[str, tuple[str, int]] = {}
        for job_id in list(control.jobs.live_job_ids()):
            record = control.jobs.get(job_id)
            if record is None:
                continue
            for attempt in record.attempts:
                if attempt.instance_id and attempt.is_open:
                    open_attempts[attempt.instance_id] = (job_id, attempt.number)
        if not open_attempts:
            return 0
        reservations = self._ec2.describe_instances(InstanceIds=sorted(open_attempts))
        found = 0
        for reservation in reservations.get("Reservations", []):
            for instance in reservation.get("Instances", []):
                state = instance["State"]["Name"]
                if state not in GONE_STATES:
                    continue
                instance_id = instance["InstanceId"]
                job_id, number = open_attempts[instance_id]
                control.apply(job_id, InstanceDown(instance_id, number, state))
                self.detections.append((job_id, instance_id))
                found += 1
        return found
