"""The local stand-in for AWS FIS: it carries out the experiments started in the emulator.

moto stores FIS experiment templates and experiments (`fis:StartExperiment` answers as AWS
does) but acts on nothing, and moves an experiment's state on each read. In the local
runtime, this stand-in does what FIS would do, and keeps the experiment's state true to it:

- It watches the emulator for experiments of the deployment's template (the self-test's).
- For `aws:ec2:send-spot-instance-interruptions` it resolves the target as FIS does: running
  spot instances carrying every tag of `resourceTags` (selection `ALL` or `COUNT(n)`).
- Each target gets EC2's rebalance recommendation at once, the two-minute interruption
  notice two minutes before `durationBeforeInterruption` ends, and is reclaimed at its end:
  exactly the local spot market's interruption (`InstanceFleet.interrupt`: IMDS
  `spot/instance-action`, the EventBridge warning, then termination).
- The experiment is `running` while it acts, `completed` after, or `failed` when no target
  resolves (FIS's default `emptyTargetResolutionMode` is `fail`); `StopExperiment` (moto
  marks it `stopping`) ends it `stopped`, and notices not yet sent are not sent.

Emulated, not AWS: the role is not assumed (the stand-in acts as the fleet), stop conditions
are not evaluated, and only this one action is carried out (others fail the experiment).
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from typing import Any

from infra.local.clock import Timers, TimeScale
from infra.local.fleet import InstanceFleet, LocalInstance
from respot.selftest.experiment import ACTION_ID, duration_seconds

log = logging.getLogger("respot.local.fis")

NOTICE_SECONDS = 120.0  # the interruption notice comes this long before the interruption
POLL_SECONDS = 0.5  # real seconds between looks for new experiments (FIS itself takes seconds)


class _MotoExperiments:
    """moto's FIS experiments, held still: only the stand-in moves their state."""

    def __init__(self, region: str) -> None:
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.fis.models import fis_backends
        from moto.moto_api import state_manager

        state_manager.set_transition(
            "fis::experiment", {"progression": "manual", "times": sys.maxsize}
        )
        self._backend = fis_backends[DEFAULT_ACCOUNT_ID][region]
        self._lock = threading.Lock()

    def move(
        self,
        experiment_id: str,
        status: str,
        *,
        unless: tuple[str, ...] = (),
        reason: str | None = None,
    ) -> str:
        """Set the status (not if it is one of `unless`); returns the status it has now."""
        from moto.fis.models import Experiment

        with self._lock:
            experiment = self._backend.experiments[experiment_id]
            if experiment.status in unless:
                return str(experiment.status)
            experiment.status = status
            if reason is not None:
                # moto reports the reason from this table; the experiment gets its own copy.
                experiment.STATUS_REASONS = {**Experiment.STATUS_REASONS, status: reason}  # type: ignore[misc]
            return status


def _selected(instances: list[LocalInstance], mode: str) -> list[LocalInstance]:
    if mode == "ALL":
        return instances
    match = re.fullmatch(r"COUNT\((\d+)\)", mode)
    if match:
        return instances[: int(match.group(1))]
    raise ValueError(f"selection mode {mode!r} is not emulated (ALL or COUNT(n))")


class FaultInjection:
    """Carries out the FIS experiments of one local deployment's template."""

    def __init__(
        self,
        *,
        fis: Any,
        region: str,
        template_id: str,
        fleet: InstanceFleet,
        scale: TimeScale,
        timers: Timers,
    ) -> None:
        self.fis = fis
        self.region = region
        self.template_id = template_id
        self.fleet = fleet
        self.scale = scale
        self.timers = timers
        self.carried_out: dict[str, list[str]] = {}  # experiment id -> instance ids
        self._stopped: set[str] = set()
        self._experiments = _MotoExperiments(region)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="local-fis", daemon=True)

    def start(self) -> FaultInjection:
        """Start watching for experiments."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching."""
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            try:
                summaries = self.fis.list_experiments()["experiments"]
                for summary in summaries:
                    if summary.get("experimentTemplateId") != self.template_id:
                        continue
                    experiment_id, status = summary["id"], summary["state"]["status"]
                    if status == "stopping":  # StopExperiment, before or after it acted
                        self.carried_out.setdefault(experiment_id, [])
                        self._stopped.add(experiment_id)
                        self._experiments.move(experiment_id, "stopped")
                    elif experiment_id not in self.carried_out:
                        self.carry_out(experiment_id)
            except Exception:  # keep watching; the failure is in the log
                log.exception("local FIS stand-in")

    def carry_out(self, experiment_id: str) -> None:
        """Do what FIS does for one experiment (once)."""
        experiment = self.fis.get_experiment(id=experiment_id)["experiment"]
        self.carried_out[experiment_id] = []
        longest = 0.0
        for name, action in experiment["actions"].items():
            if action["actionId"] != ACTION_ID:
                self._fail(experiment_id, f"action {name}: {action['actionId']} is not emulated")
                return
            target = experiment["targets"][action["targets"]["SpotInstances"]]
            wanted = target.get("resourceTags", {})
            instances = [
                i
                for i in self.fleet.live()
                if i.market == "spot"
                and i.state == "running"
                and all(i.tags.get(k) == v for k, v in wanted.items())
            ]
            chosen = _selected(instances, target.get("selectionMode", "ALL"))
            if not chosen:
                self._fail(
                    experiment_id,
                    f"target resolution returned no running spot instance tagged {wanted}",
                )
                return
            duration = duration_seconds(
                action.get("parameters", {}).get("durationBeforeInterruption", "PT2M")
            )
            longest = max(longest, duration)
            for inst in chosen:
                self._interrupt(experiment_id, inst, duration)
                self.carried_out[experiment_id].append(inst.instance_id)
        # (StopExperiment may have come first: moto then already says "stopping".)
        self._experiments.move(experiment_id, "running", unless=("stopping", "stopped"))

        def complete() -> None:
            # A stop that came in since wins, even before the watcher saw it.
            if (
                self._experiments.move(experiment_id, "completed", unless=("stopping", "stopped"))
                != "completed"
            ):
                self._stopped.add(experiment_id)
                self._experiments.move(experiment_id, "stopped")

        self.timers.after(self.scale.real(longest), complete)
        log.info("FIS %s: interrupting %s", experiment_id, self.carried_out[experiment_id])

    def _interrupt(self, experiment_id: str, inst: LocalInstance, duration: float) -> None:
        self.fleet.rebalance(inst.instance_id)

        def notice() -> None:
            if experiment_id not in self._stopped:
                self.fleet.interrupt(inst.instance_id)

        self.timers.after(self.scale.real(max(duration - NOTICE_SECONDS, 0.0)), notice)

    def _fail(self, experiment_id: str, reason: str) -> None:
        log.warning("FIS %s failed: %s", experiment_id, reason)
        self._experiments.move(experiment_id, "failed", reason=reason)
