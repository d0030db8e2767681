"""Local instances: one process running the real agent, plus its own IMDS server, per instance.

The fleet plays EC2's part after a launch: the instance is pending, then (after the simulated
fulfilment delay) running — with the `EC2 Spot Instance Request Fulfillment` and
`EC2 Instance State-change Notification` events put on the emulator's EventBridge bus —
then boots: the user data the launch template carries runs in a directory laid out like the
AMI (`infra/local/sandbox.py`), and it is the user data that installs and starts the agent
(through a stand-in systemd), exactly as on EC2. It delivers interruptions the EC2 way: the
IMDS `spot/instance-action` answers and the two-minute warning event is put on the bus, then
the machine's processes are killed and the instance terminated. A machine that powers itself
off (the boot script after a failure, the agent at its end) is terminated (the launch
template says shutdown terminates).
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from infra.local.clock import Timers, TimeScale
from infra.local.cloud import CREDENTIALS, LocalDeployment
from infra.local.imds import ImdsServer
from infra.local.sandbox import AGENT_JOURNAL, InstanceRoot
from respot.aws.ec2events import REBALANCE, SPOT_FULFILLMENT, SPOT_INTERRUPTION, STATE_CHANGE

log = logging.getLogger("respot.local.fleet")

NOTICE_SECONDS = 120  # EC2 warns two minutes before it reclaims a spot instance


@dataclass(frozen=True)
class FleetTiming:
    """Simulated durations of EC2's steps (scaled to real time by the runtime's TimeScale)."""

    fulfil_seconds: float = 15.0  # spot request open -> instance running
    boot_seconds: float = 45.0  # running -> the boot script starts the agent
    notice_seconds: float = NOTICE_SECONDS
    terminate_seconds: float = 5.0  # shutting-down -> terminated


class InstanceAgent(Protocol):
    """Stands in for the agent process of every instance (the scale benchmark's simulator)."""

    def boot(self, inst: LocalInstance) -> None:
        """The instance booted: start the agent's work."""

    def notice(self, inst: LocalInstance, reclaim_at: datetime) -> None:
        """EC2 gave the two-minute warning (what IMDS `spot/instance-action` would say)."""

    def kill(self, inst: LocalInstance) -> None:
        """The instance is going away: stop at once, send nothing more."""


@dataclass
class LocalInstance:
    """One emulated EC2 instance."""

    instance_id: str
    instance_type: str
    availability_zone: str
    market: str
    tags: dict[str, str]
    spot_request_id: str | None
    launched_at: float
    work_dir: Path
    state: str = "pending"
    imds: ImdsServer | None = None
    process: subprocess.Popen[bytes] | None = None
    booted_at: float | None = None
    noticed_at: float | None = None
    ended_at: float | None = None
    end_reason: str | None = None
    log_path: Path | None = None  # the agent's journal (its stdout and stderr)
    # The launch template it came from (None: the deployment's) and its region: a satellite
    # region's instances boot that region's user data (infra/local/satellite.py).
    launch_template_id: str | None = None
    region: str | None = None
    root: InstanceRoot | None = None  # the machine's "/"
    events: list[tuple[float, str]] = field(default_factory=list)

    @property
    def job_id(self) -> str | None:
        """The job the control plane launched this instance for."""
        return self.tags.get("respot:job-id")

    @property
    def attempt(self) -> int | None:
        """The attempt number of the job."""
        value = self.tags.get("respot:attempt", "")
        return int(value) if value.isdigit() else None

    @property
    def alive(self) -> bool:
        """True until the instance is shutting down."""
        return self.state in ("pending", "running")


class InstanceFleet:
    """Every local instance, and the EC2 events that come with their lives."""

    def __init__(
        self,
        deployment: LocalDeployment,
        *,
        scale: TimeScale,
        timers: Timers,
        work_root: Path,
        timing: FleetTiming = FleetTiming(),
        agent_env: dict[str, str] | None = None,
        duplicate_events: bool = False,
        reorder_events: bool = False,
        imds_notices: bool = True,
        agent: InstanceAgent | None = None,
    ) -> None:
        self.deployment = deployment
        # False: IMDS never shows the interruption notice (the poll-only baseline, whose
        # training code learns nothing before the instance dies).
        self.imds_notices = imds_notices
        # Set: no process and no IMDS server per instance; this object plays every agent.
        self.agent = agent
        self.scale = scale
        self.timers = timers
        self.work_root = work_root
        self.timing = timing
        self.agent_env = agent_env or {}
        self.duplicate_events = duplicate_events
        self.reorder_events = reorder_events
        self.emitted = 0
        # Every EC2 event the bus accepted: (EventBridge event id, detail-type, detail).
        self.put_events: list[tuple[str, str, dict[str, Any]]] = []
        self.instances: dict[str, LocalInstance] = {}
        self.on_boot: list[Callable[[LocalInstance], None]] = []
        # instance id -> the credentials its instance profile gives it (None: the emulator's)
        self.credentials: Callable[[str], dict[str, str]] | None = None
        # A broken boot, for tests and bench.failures: (reason, report). The machine reaches
        # no S3, so the real boot script fails to fetch the agent package; it reports
        # `boot_failed` on the agent queue if `report`, else it cannot reach SQS either (a
        # private subnet without endpoints). `reason` is only a label: the report carries the
        # script's own reason.
        self.broken_boot: tuple[str, bool] | None = None
        self._lock = threading.RLock()
        self._events = deployment.client("events")
        self._ec2 = deployment.client("ec2")
        self._user_data: str | None = None
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="local-fleet", daemon=True)
        self._watcher.start()

    # ---- EC2's side of a launch --------------------------------------------------------------

    def launched(
        self,
        *,
        instance_id: str,
        instance_type: str,
        availability_zone: str,
        market: str,
        tags: dict[str, str],
        spot_request_id: str | None,
        launch_template_id: str | None = None,
        region: str | None = None,
    ) -> LocalInstance:
        """A RunInstances call returned this instance: play its start."""
        inst = LocalInstance(
            launch_template_id=launch_template_id,
            region=region,
            instance_id=instance_id,
            instance_type=instance_type,
            availability_zone=availability_zone,
            market=market,
            tags=tags,
            spot_request_id=spot_request_id,
            launched_at=time.monotonic(),
            work_dir=self.work_root / instance_id,
        )
        with self._lock:
            self.instances[instance_id] = inst
        self._emit(STATE_CHANGE, {"instance-id": instance_id, "state": "pending"}, inst)
        self.timers.after(self.scale.real(self.timing.fulfil_seconds), lambda: self._run(inst))
        return inst

    def _run(self, inst: LocalInstance) -> None:
        with self._lock:
            if inst.state != "pending":
                return
            inst.state = "running"
        if inst.market == "spot":
            self._emit(
                SPOT_FULFILLMENT,
                {"spot-instance-request-id": inst.spot_request_id, "instance-id": inst.instance_id},
                inst,
            )
        self._emit(STATE_CHANGE, {"instance-id": inst.instance_id, "state": "running"}, inst)
        self.timers.after(self.scale.real(self.timing.boot_seconds), lambda: self._boot(inst))

    def _boot(self, inst: LocalInstance) -> None:
        if self.agent is not None:
            with self._lock:
                if inst.state != "running":
                    return
                inst.booted_at = time.monotonic()
                inst.events.append((inst.booted_at, "booted"))
            self.agent.boot(inst)
            if inst.noticed_at is not None:
                self.agent.notice(inst, datetime.now(UTC))
            for callback in self.on_boot:
                callback(inst)
            return
        with self._lock:
            if inst.state != "running":
                return
            inst.imds = ImdsServer(
                instance_id=inst.instance_id,
                instance_type=inst.instance_type,
                availability_zone=inst.availability_zone,
                tags=inst.tags,
            )
            inst.imds.start()
            if inst.noticed_at is not None and self.imds_notices:
                inst.imds.schedule_interruption("terminate", datetime.now(UTC))
            inst.work_dir.mkdir(parents=True, exist_ok=True)
            assert self.deployment.image is not None, "provision(image_dir=...) builds the AMI"
            inst.root = InstanceRoot.create(inst.work_dir / "root", self.deployment.image)
            inst.log_path = inst.root.path / AGENT_JOURNAL
            # What differs between this machine and an EC2 instance: where AWS and IMDS answer,
            # and the credentials (the instance profile's, on EC2). The deployment's values
            # come from the launch template's user data, as on EC2.
            env = inst.root.machine_environment(
                {
                    "AWS_ACCESS_KEY_ID": CREDENTIALS["aws_access_key_id"],
                    "AWS_SECRET_ACCESS_KEY": CREDENTIALS["aws_secret_access_key"],
                    # With IAM on: the instance role's, as an instance profile gives them.
                    **(self.credentials(inst.instance_id) if self.credentials else {}),
                    # agent_env may point agents elsewhere (the cost benchmark counts them).
                    "AWS_ENDPOINT_URL": self.deployment.endpoint_url,
                    "AWS_EC2_METADATA_SERVICE_ENDPOINT": inst.imds.url,
                    **self.agent_env,
                    **self._broken_endpoints(),
                }
            )
            inst.process = inst.root.run_user_data(self.user_data(inst), env)
            inst.events.append((time.monotonic(), "user data"))
        # Booted (on_boot, chaos timing) once the agent the user data started is up (its
        # journal says it sent AgentStarted): the boot script's real seconds vary with the
        # machine's load, and chaos means to interrupt a training instance.

    def _booted(self, inst: LocalInstance) -> None:
        with self._lock:
            if not inst.alive or inst.booted_at is not None:
                return
            inst.booted_at = time.monotonic()
            inst.events.append((inst.booted_at, "booted"))
        for callback in self.on_boot:
            callback(inst)

    def user_data(self, inst: LocalInstance | None = None) -> str:
        """The user data of the launch template the instance was launched from."""
        if inst is not None and inst.region not in (None, self.deployment.region):
            return self._template_user_data(self._ec2_in(inst.region), inst.launch_template_id)
        if self._user_data is None:
            self._user_data = self._template_user_data(
                self._ec2, self.deployment.launch_template_id
            )
        return self._user_data

    @staticmethod
    def _template_user_data(ec2: Any, template_id: str | None) -> str:
        versions = ec2.describe_launch_template_versions(
            LaunchTemplateId=template_id, Versions=["$Latest"]
        )["LaunchTemplateVersions"]
        encoded = versions[0]["LaunchTemplateData"].get("UserData", "")
        if not encoded:
            raise RuntimeError("the launch template carries no user data")
        return base64.b64decode(encoded).decode()

    def _ec2_in(self, region: str | None) -> Any:
        """The emulator's EC2 in `region` (the deployment's own client for its region)."""
        if region in (None, self.deployment.region):
            return self._ec2
        from infra.local.satellite import regional_client

        return regional_client("ec2", region, self.deployment.endpoint_url)

    def _broken_endpoints(self) -> dict[str, str]:
        """`broken_boot`: the machine reaches no S3 (and, unreported, no SQS): the real boot
        script fails to fetch the agent package, reports `boot_failed` (or cannot), powers off."""
        if self.broken_boot is None:
            return {}
        nowhere = "http://127.0.0.1:9"  # the discard port: connection refused
        broken = {"AWS_ENDPOINT_URL_S3": nowhere, "AWS_MAX_ATTEMPTS": "2"}
        if not self.broken_boot[1]:
            broken["AWS_ENDPOINT_URL_SQS"] = nowhere
        return broken

    # ---- interruptions and the end of instances ----------------------------------------------

    def interrupt(self, instance_id: str) -> bool:
        """Give a spot instance its two-minute warning, then reclaim it. False if not running."""
        with self._lock:
            inst = self.instances.get(instance_id)
            if inst is None or not inst.alive or inst.noticed_at is not None:
                return False
            inst.noticed_at = time.monotonic()
            inst.events.append((inst.noticed_at, "notice"))
            reclaim_at = datetime.now(UTC) + timedelta(
                seconds=self.scale.real(self.timing.notice_seconds)
            )
            if inst.imds is not None and self.imds_notices:
                inst.imds.schedule_interruption("terminate", reclaim_at)
        if self.agent is not None and inst.booted_at is not None:
            self.agent.notice(inst, reclaim_at)
        self._emit(
            SPOT_INTERRUPTION, {"instance-id": instance_id, "instance-action": "terminate"}, inst
        )
        self.timers.after(
            self.scale.real(self.timing.notice_seconds),
            lambda: self.terminate(instance_id, "reclaimed by EC2"),
        )
        return True

    def rebalance(self, instance_id: str) -> bool:
        """Send a rebalance recommendation (IMDS and EventBridge)."""
        with self._lock:
            inst = self.instances.get(instance_id)
            if inst is None or not inst.alive:
                return False
            if inst.imds is not None:
                inst.imds.recommend_rebalance(datetime.now(UTC))
        self._emit(REBALANCE, {"instance-id": instance_id}, inst)
        return True

    def terminate(
        self, instance_id: str, reason: str, *, via_api: bool = False, by_its_os: bool = False
    ) -> bool:
        """End an instance: kill its processes, terminate it in EC2, emit the state changes.

        `by_its_os`: the machine powered itself off; EC2 then gives the instance the state
        reason `Client.InstanceInitiatedShutdown` (moto says `Client.UserInitiatedShutdown` for
        every termination), which the control plane reads to wait for the agent's last report.
        """
        with self._lock:
            inst = self.instances.get(instance_id)
            if inst is None or not inst.alive:
                return False
            inst.state = "shutting-down"
            inst.ended_at = time.monotonic()
            inst.end_reason = reason
            inst.events.append((inst.ended_at, f"terminate: {reason}"))
            self._kill(inst)
        if not via_api:
            try:
                ec2 = self._ec2_in(inst.region)
                ec2.terminate_instances(InstanceIds=[instance_id])
            except Exception:
                log.exception("could not terminate %s in the emulator", instance_id)
            else:
                if by_its_os:
                    try:
                        _shut_down_by_its_os(ec2.meta.region_name, instance_id)
                    except Exception:
                        log.exception("could not give %s its state reason", instance_id)
        self._emit(STATE_CHANGE, {"instance-id": instance_id, "state": "shutting-down"}, inst)

        def gone() -> None:
            with self._lock:
                inst.state = "terminated"
            self._emit(STATE_CHANGE, {"instance-id": instance_id, "state": "terminated"}, inst)

        self.timers.after(self.scale.real(self.timing.terminate_seconds), gone)
        return True

    def _kill(self, inst: LocalInstance) -> None:
        if self.agent is not None and inst.booted_at is not None:
            self.agent.kill(inst)
        if inst.process is not None:
            kill_machine(inst.process.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                inst.process.wait(timeout=10)
        if inst.imds is not None:
            inst.imds.stop()

    def _watch(self) -> None:
        """A machine that powered itself off is shut down (and terminated)."""
        while not self._stop.wait(0.1):
            with self._lock:
                off = [
                    (i, why)
                    for i in self.instances.values()
                    if i.alive and i.root is not None and (why := i.root.powered_off)
                ]
                started = [
                    i
                    for i in self.instances.values()
                    if i.alive and i.booted_at is None and i.root is not None and i.root.agent_up
                ]
            for inst in started:
                self._booted(inst)
            for inst, why in off:
                self.terminate(
                    inst.instance_id, f"powered off by the instance ({why})", by_its_os=True
                )

    def stop(self) -> None:
        """Kill every instance (no events) and stop watching."""
        self._stop.set()
        self._watcher.join(timeout=5)
        with self._lock:
            for inst in self.instances.values():
                if inst.alive:
                    inst.state = "terminated"
                self._kill(inst)

    # ---- views -------------------------------------------------------------------------------

    def live(self) -> list[LocalInstance]:
        """Instances not yet shutting down."""
        with self._lock:
            return [i for i in self.instances.values() if i.alive]

    def of_job(self, job_id: str) -> list[LocalInstance]:
        """Every instance launched for a job, in launch order."""
        with self._lock:
            found = [i for i in self.instances.values() if i.job_id == job_id]
        return sorted(found, key=lambda i: i.launched_at)

    def _emit(self, detail_type: str, detail: dict[str, Any], inst: LocalInstance) -> None:
        """Put an EC2 event on the bus (twice, or late, when the runtime asks for that chaos).

        The event's `time` is now, the instant EC2 emits it, also when its delivery is delayed.
        """
        when = datetime.now(UTC)
        copies = 2 if self.duplicate_events else 1
        for _ in range(copies):
            if self.reorder_events:
                delay = random.uniform(0.0, 0.6)  # noqa: S311 - chaos, not cryptography
                self.timers.after(delay, lambda: self._put(detail_type, detail, inst, when))
            else:
                self._put(detail_type, detail, inst, when)

    def _put(
        self, detail_type: str, detail: dict[str, Any], inst: LocalInstance, when: datetime
    ) -> None:
        # A satellite region's events reach the home bus as its forwarding rule sends them.
        region = inst.region or self.deployment.region
        arn = f"arn:aws:ec2:{region}:123456789012:instance/{inst.instance_id}"
        with self._lock:
            self.emitted += 1
        try:
            answer = self._events.put_events(
                Entries=[
                    {
                        "Time": when,
                        "Source": "aws.ec2",
                        "DetailType": detail_type,
                        "Detail": json.dumps(detail),
                        "Resources": [arn],
                    }
                ]
            )
            with self._lock:
                self.put_events.extend(
                    (entry["EventId"], detail_type, detail)
                    for entry in answer.get("Entries", [])
                    if "EventId" in entry
                )
        except Exception:
            log.exception("could not put %s for %s", detail_type, inst.instance_id)


def _shut_down_by_its_os(region: str, instance_id: str) -> None:
    """Give a terminated instance of the in-process moto EC2 the state reason EC2 gives one
    whose operating system shut it down (`shutdown -h` with shutdown behaviour terminate)."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends
    from moto.ec2.models.instances import StateReason

    instance = ec2_backends[DEFAULT_ACCOUNT_ID][region].get_instance(instance_id)
    instance.state_reason = StateReason(
        "Client.InstanceInitiatedShutdown: Instance initiated shutdown",
        "Client.InstanceInitiatedShutdown",
    )


def kill_machine(root: int) -> None:
    """SIGKILL every process of a machine whose user data runs as `root`.

    The user data's process group holds the fake systemd, the agent and the session, also
    after the user data itself has exited; a descendant in a session of its own (a command
    job's process group, a workspace's supervisor and its JupyterLab) is in another group,
    which that kill would miss and leave running after its instance is gone.
    """
    groups = {root} | {_pgid(p) for p in _descendants(root)}
    for group in sorted(g for g in groups if g > 1 and g != os.getpgid(0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)


def _descendants(root: int) -> list[int]:
    """The processes below `root` (from /proc: Linux; elsewhere none, only the group's kill)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*/stat") if Path("/proc").is_dir() else []:
        try:
            stat = entry.read_text()
        except OSError:
            continue  # gone meanwhile
        fields = stat[stat.rfind(")") + 2 :].split()  # after "pid (comm) "
        children.setdefault(int(fields[1]), []).append(int(entry.parent.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _pgid(pid: int) -> int:
    """The process group of `pid`, or 0 when it is gone."""
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return 0
