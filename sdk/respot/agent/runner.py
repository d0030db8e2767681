"""The agent: one job attempt on one instance, from boot to the last message.

1. identity from IMDSv2: instance id, zone, type, tags respot:job-id / attempt /
   await-handoff; start polling spot/instance-action and the rebalance recommendation
2. the submission from S3; the code (SHA-256 checked, unpacked safely); the data
3. warm start (respot.agent.warmstart): start the session process, which imports and
   prepares; if await-handoff = N: once it is ready, say so, and wait for attempt N's
   handoff marker (its notice checkpoint), as long as N may still train
   (respot.agent.handoff)
4. restore the newest complete checkpoint; send AgentStarted
5. run the session in a child process (or let the warm one resume); heartbeats
   (AgentProgress); upload each checkpoint it saves (AgentCheckpoint) and prune
6. on an interruption notice tell the session (with warm start: once the replacement is warm
   or the reserve for the final upload is reached; a return's stop: once the spot successor
   is warm or the hold limit it carries is reached); on a rebalance ask it to checkpoint
7. the end: completed (outputs uploaded, AgentCompleted), preempted (uploads finished,
   handoff marker, AgentPreempted) or failed (AgentFailed with the log tail)

This module is the order of those steps; each has its own room: `imds`, `workspace` (1-2),
`environment` and `launch` (the job's Python or image), `warmstart` (3 and the notice hold),
`handoff` (3: the successor's bounded wait),
`sessions` (the session process's launcher and launch file), `process` (the child),
`uploads` (checkpoints), `progress` (reports and heartbeats), `notices` (the IMDS poller and
the deadlines a notice sets), `telemetry`, `scalars`, `logship`, `messenger`.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import queue
import re
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from botocore.exceptions import ClientError

from respot.agent import environment as job_env
from respot.agent import launch as launchers
from respot.agent.config import ENV_FRAMEWORK_PYTHON, AgentConfig
from respot.agent.exceptions import AgentError, SetupError
from respot.agent.handoff import HandoffWait, write_with_retry
from respot.agent.imds import ImdsClient, InstanceIdentity
from respot.agent.logship import LogShipper, stream_name
from respot.agent.messenger import AgentMessenger
from respot.agent.notebook import session_entry
from respot.agent.notices import (
    DEFAULT_NOTICE_SECONDS,
    InterruptionNotice,
    NoticePoller,
    RebalanceNotice,
    StopRequest,
    deadlines,
    parse_stop_request,
    stop_notice,
)
from respot.agent.process import (
    AttemptDirs,
    SessionExited,
    SessionProcess,
    describe_exit,
    session_environment,
)
from respot.agent.progress import Heartbeat, Progress
from respot.agent.protocol import (
    CheckpointLine,
    DoneLine,
    FailedLine,
    ReportLine,
    SessionLaunch,
)
from respot.agent.regional import RegionalClients, registry_region
from respot.agent.scalars import ScalarLog
from respot.agent.secrets import resolve_secrets
from respot.agent.sessions import launcher_for, session_launch
from respot.agent.telemetry import GpuTelemetry
from respot.agent.uploads import CheckpointUploader, PendingCheckpoint
from respot.agent.warmstart import (
    WARM_HANDOFF_POLL_SECONDS,
    NoticeHold,
    WarmSession,
    announce_ready,
)
from respot.agent.workspace import (
    fetch_code,
    fetch_data,
    read_submission,
    write_handoff,
)
from respot.spec.jobid import InvalidJobIdError, check_job_id
from respot.storage import layout
from respot.storage.checkpoints import CheckpointStore, UploadResult
from respot.storage.outputs import OutputsManifest, upload_outputs
from respot.wire.gpu import GpuSample, tensorboard_scalars
from respot.wire.messages import (
    AgentCheckpoint,
    AgentCompleted,
    AgentFailed,
    AgentPreempted,
    AgentProgress,
    AgentStarted,
    JobSubmission,
)

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sqs import SQSClient

    from respot.spec.training import TrainingEnvVar

logger = logging.getLogger("respot.agent")

COMPLETED_UPLOAD_WAIT_SECONDS = 1800.0
FAILED_UPLOAD_WAIT_SECONDS = 60.0
FINAL_FLUSH_SECONDS = 120.0
# train() has returned but the process lingers (a non-daemon thread left running): stop it.
EXIT_GRACE_SECONDS = 30.0
LOG_TAIL_LINES = 50
LOG_SHIP_CLOSE_SECONDS = 10.0  # at the end, wait this long at most for the last log lines

Outcome = Literal["completed", "preempted", "failed"]


_QUEUE_HOST = re.compile(r"^https://sqs\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?/")


def queue_region_of(queue_url: str) -> str | None:
    """The region in an SQS queue URL (`https://sqs.us-east-1.amazonaws.com/...`), or None."""
    match = _QUEUE_HOST.match(queue_url)
    return match.group(1) if match else None


@dataclass(frozen=True)
class AgentResult:
    """How the attempt ended."""

    outcome: Outcome
    job_id: str
    attempt: int
    step: int | None = None
    checkpoint_step: int | None = None
    exit_code: int | None = None
    reason: str | None = None


class _LogTail(logging.Handler):
    """Keeps the agent's own last log lines (for AgentFailed when setup fails)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.getMessage()}"[:1000])


class Agent:
    """Runs one job attempt on this instance; see the module docstring for the steps."""

    def __init__(
        self,
        config: AgentConfig,
        *,
        s3: S3Client | None = None,
        sqs: SQSClient | None = None,
        imds: ImdsClient | None = None,
    ) -> None:
        self.config = config
        self._s3 = s3
        self._sqs = sqs
        self.logs: Any = None  # CloudWatch Logs client, when the deployment names a log group
        # Clients by region for what the job names elsewhere: its secrets, its ECR image.
        self.regional = RegionalClients(config.region, config.endpoint_url)
        self.imds = imds or ImdsClient(config.imds_endpoint)
        self._events: queue.Queue[Any] = queue.Queue()
        self._notice: InterruptionNotice | None = None
        self._signalled = False
        self._log_tail = _LogTail()

    @property
    def s3(self) -> S3Client:
        assert self._s3 is not None, "clients are made once the region is known"
        return self._s3

    @property
    def sqs(self) -> SQSClient:
        assert self._sqs is not None, "clients are made once the region is known"
        return self._sqs

    def _make_clients(self, region: str) -> None:
        """S3 and SQS clients in the configured region, else the instance's own."""
        self.regional.default_region = self.config.region or region
        if self._s3 is not None and self._sqs is not None:
            return
        import boto3
        from botocore.config import Config

        retry = Config(retries={"mode": "standard", "max_attempts": 5})
        session = boto3.session.Session(region_name=self.config.region or region)
        url = self.config.endpoint_url
        self._s3 = self._s3 or session.client("s3", endpoint_url=url, config=retry)
        # The agent queue is in the home region, which an instance in a satellite region is
        # not in (docs/deploy.md, "Extra regions"): its client goes to the queue's region.
        queue_region = self.config.queue_region or queue_region_of(self.config.agent_queue_url)
        self._sqs = self._sqs or session.client(
            "sqs", endpoint_url=url, config=retry, region_name=queue_region or session.region_name
        )
        if self.config.log_group and self.logs is None:
            self.logs = session.client("logs", endpoint_url=url, config=retry)

    def request_stop(self) -> None:
        """A "stop" notice from outside (SIGTERM, Ctrl-C); safe to call from a signal handler."""
        self._signalled = True

    # ---- the attempt -------------------------------------------------------------------------

    def run(self) -> AgentResult:
        """Run the attempt to its end; never raises once the job and attempt are known."""
        logging.getLogger("respot").addHandler(self._log_tail)
        try:
            return self._run()
        finally:
            logging.getLogger("respot").removeHandler(self._log_tail)

    def _run(self) -> AgentResult:
        started = time.monotonic()
        identity = self.imds.identity()
        if identity.job_id is None or identity.attempt is None:
            raise AgentError(
                "this instance has no respot:job-id / respot:attempt tags in IMDS "
                "(launch it from respot's launch template with instance metadata tags on)"
            )
        job_id, attempt = identity.job_id, identity.attempt
        try:
            check_job_id(job_id)  # before it becomes a key, a path or a message
        except InvalidJobIdError as exc:
            raise AgentError(f"this instance's respot:job-id tag is invalid: {exc}") from None
        self._make_clients(identity.region)
        logger.info(
            "job %s attempt %d on %s (%s, %s)",
            job_id,
            attempt,
            identity.instance_id,
            identity.instance_type,
            identity.availability_zone,
        )
        messenger = AgentMessenger(
            client=self.sqs,
            queue_url=self.config.agent_queue_url,
            job_id=job_id,
            attempt=attempt,
            instance_id=identity.instance_id,
        )
        poller = NoticePoller(
            self.imds,
            every_seconds=self.config.imds_poll_seconds,
            emit=self._on_notice,
            control=lambda: self._stop_requested(job_id, attempt),
            control_every_seconds=self.config.heartbeat_seconds,
        ).start()
        dirs = AttemptDirs.of(self.config.work_dir, job_id, attempt)
        run = _AttemptRun(
            self,
            identity,
            job_id=job_id,
            attempt=attempt,
            messenger=messenger,
            dirs=dirs,
            started=started,
        )
        try:
            return run.execute()
        except Exception as exc:
            # A bug of the agent itself: still tell the control plane, with what we know.
            logger.exception("the agent failed")
            reason = f"agent error: {type(exc).__name__}: {exc}"
            tail = [*self._log_tail.lines, *traceback.format_exc().splitlines()]
            messenger.send(AgentFailed(reason=reason[:2000], log_tail=tail[-LOG_TAIL_LINES:]))
            return AgentResult("failed", job_id, attempt, reason=reason)
        finally:
            poller.stop()
            messenger.close(timeout=FINAL_FLUSH_SECONDS)

    def _stop_requested(self, job_id: str, attempt: int) -> StopRequest | None:
        """The control plane's stop request for this attempt (layout.control_key), if any."""
        key = layout.control_key(job_id, attempt)
        try:
            body = self.s3.get_object(Bucket=self.config.bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("NoSuchKey", "404", "NotFound"):
                return None
            raise
        return parse_stop_request(body, datetime.now(UTC))

    def _on_notice(self, event: InterruptionNotice | RebalanceNotice) -> None:
        if isinstance(event, InterruptionNotice) and self._notice is None:
            self._notice = event
        self._events.put(event)

    def _check_signal(self) -> None:
        if self._signalled and self._notice is None:
            logger.warning("stop requested (signal): treating it as a stop notice")
            self._on_notice(stop_notice())

    def _notice_pending(self) -> bool:
        self._check_signal()
        return self._notice is not None


class _AttemptRun:
    """The state of one attempt while it runs."""

    def _secrets(self, spec: TrainingEnvVar) -> dict[str, str]:
        """The values of the spec's `secrets`, read now (respot.agent.secrets)."""
        if not spec.secrets:
            return {}
        return resolve_secrets(self.agent.regional.in_region("secretsmanager"), spec.secrets)

    def __init__(
        self,
        agent: Agent,
        identity: InstanceIdentity,
        *,
        job_id: str,
        attempt: int,
        messenger: AgentMessenger,
        dirs: AttemptDirs,
        started: float,
    ) -> None:
        self.agent = agent
        self.config = agent.config
        self.s3 = agent.s3
        self.identity = identity
        self.job_id = job_id
        self.attempt = attempt
        self.messenger = messenger
        self.dirs = dirs
        self.started = started
        self.progress = Progress()
        self.store = CheckpointStore(bucket=self.config.bucket, job_id=job_id, client=self.s3)
        self.restored_step: int | None = None
        self.scalars = ScalarLog(dirs.root / "tensorboard", attempt=attempt)
        self.shipper: LogShipper | None = None
        self.warm: WarmSession | None = None  # the warm session process, until it resumes
        self.warm_failure: str | None = None
        self.warm_capable: bool | None = None  # the replacement starts warm (known on a notice)
        self.slowest_upload: float | None = None  # of this attempt (the notice hold's estimate)
        self.job_python = job_env.JobPython(str(self.config.framework_python or sys.executable))
        self.phases: dict[str, float] = {}  # seconds of each step of the start (bench.boot)

    def execute(self) -> AgentResult:
        # 1-4: prepare the job.
        try:
            submission, restore_seconds, manifest_key = self._prepare()
        except (job_env.EnvironmentBuildError, launchers.LaunchError) as exc:
            # The job's own input (its requirements, its image): another instance would fail
            # the same way, so the job fails once, with pip's (or the engine's) message.
            reason = f"job environment: {exc}"
            logger.error("%s", reason)
            tail = exc.log_tail if isinstance(exc, job_env.EnvironmentBuildError) else []
            self.messenger.send(
                AgentFailed(
                    reason=reason[:2000], log_tail=tail[-LOG_TAIL_LINES:], stage="environment"
                )
            )
            return AgentResult("failed", self.job_id, self.attempt, reason=reason)
        except Exception as exc:
            logger.exception("setup failed")
            reason = f"setup failed: {exc}"
            tail = list(self.agent._log_tail.lines)
            tail += traceback.format_exc().splitlines()[-(LOG_TAIL_LINES // 2) :]
            self.messenger.send(AgentFailed(reason=reason[:2000], log_tail=tail[-LOG_TAIL_LINES:]))
            if self.warm is not None:
                self.warm.stop()
            return AgentResult("failed", self.job_id, self.attempt, reason=reason)
        if self.warm is not None and self.warm.gone is not None:
            # Ready once, then ended while the agent restored: start cold (and say so).
            self.warm_failure, self.warm = self.warm.gone, None
        setup_seconds = time.monotonic() - self.started
        self.messenger.send(
            AgentStarted(
                restored_step=self.restored_step,
                restored_manifest=manifest_key,
                restore_seconds=round(restore_seconds, 3),
                setup_seconds=round(setup_seconds, 3),
                warm=None if not submission.spec.warm_start else self.warm is not None,
                warm_failure=self.warm_failure,
            )
        )
        logger.info(
            "started: restored step %s in %.2fs; setup %.2fs",
            self.restored_step,
            restore_seconds,
            setup_seconds,
        )
        spec = submission.spec
        uploader = CheckpointUploader(
            self.store,
            attempt=self.attempt,
            keep=spec.checkpoint_keep,
            staging_root=self.dirs.staging,
            on_uploaded=self._on_uploaded,
        )
        try:
            if self.agent._notice_pending():
                # Noticed before training began: nothing new to save; hand off at once.
                if self.warm is not None:
                    self.warm.stop()
                return self._preempted(uploader, None)
            return self._train(submission, uploader)
        finally:
            uploader.stop()

    # ---- 1-4 ---------------------------------------------------------------------------------

    def _prepare(self) -> tuple[JobSubmission, float, str | None]:
        self.dirs.create()
        submission = read_submission(self.s3, self.config.bucket, self.job_id)
        spec = submission.spec
        if spec.entry_point is None:
            raise SetupError(
                "the job names no entry_point; set it to the 'package.module:Session' the "
                "session runner starts (also inside an image)"
            )
        t0 = time.monotonic()
        if submission.code is not None:
            fetch_code(self.s3, submission.code, self.dirs.code, self.dirs.root)
        fetched = fetch_data(self.s3, list(spec.data), self.dirs.data) if spec.data else 0
        logger.info("code and %d bytes of data in place", fetched)
        self.phases["code_and_data"] = time.monotonic() - t0
        t0 = time.monotonic()
        if spec.image is not None:
            # ECR of the registry's region (a satellite instance pulls from the home registry);
            # locally the emulator's ECR issues the token the fake engine logs in with.
            region = registry_region(spec.image)
            ecr = self.agent.regional("ecr", region) if region is not None else None
            launchers.pull(spec.image, ecr, os.environ)
        else:
            self.job_python = job_env.prepare(
                spec,
                framework_python=self.job_python.python,
                code_dir=self.dirs.code,
                env_dir=self.dirs.root / "env",
                s3=self.s3,
                bucket=self.config.bucket,
                framework_name=os.environ.get(ENV_FRAMEWORK_PYTHON),
            )
        self.phases["environment"] = time.monotonic() - t0
        if self._warm_capable(spec):
            self._start_warm(submission)
        previous = self.identity.await_handoff
        if previous is not None:
            self._await_handoff(previous, spec.warm_start)
        t0 = time.monotonic()
        manifest = self.store.restore(self.dirs.checkpoint)
        restore_seconds = time.monotonic() - t0
        self.phases["restore"] = restore_seconds
        logger.info(
            "phases: %s; wheelhouse %s",
            json.dumps({k: round(v, 3) for k, v in self.phases.items()}),
            self.job_python.wheelhouse or "none",
        )
        self.restored_step = manifest.step if manifest else None
        if manifest is not None and self.slowest_upload is None:
            self.slowest_upload = restore_seconds  # until this attempt uploads one
        self._settle_warm()
        return submission, restore_seconds, manifest.key if manifest else None

    # ---- 3: the hand-off (respot.agent.handoff) -----------------------------------------------

    def _await_handoff(self, previous: int, warm_start: bool) -> None:
        """Say this instance is warm (if it warmed up), then wait until attempt `previous`
        writes no more checkpoints, or no longer than it may (respot.agent.handoff)."""

        def announce() -> None:
            announce_ready(self.s3, self.config.bucket, self.job_id, previous)

        pending: Callable[[], object] | None = None
        if self.warm is not None or self.warm_failure is not None:
            self._settle_warm()
            if not write_with_retry(announce, "the successor marker"):
                logger.error(
                    "the successor marker is not written: attempt %d holds its stop until it "
                    "is or to its limit; waiting for it meanwhile (and trying again)",
                    previous,
                )
                pending = announce
        HandoffWait(
            self.s3,
            self.config.bucket,
            self.job_id,
            previous,
            wait_seconds=self.config.handoff_wait_seconds,
            heartbeat_seconds=self.config.heartbeat_seconds,
            poll_seconds=WARM_HANDOFF_POLL_SECONDS if warm_start else 1.0,
            read_stop=lambda: self.agent._stop_requested(self.job_id, previous),
            beat=lambda: self.messenger.send(AgentProgress()),
            give_up=self.agent._notice_pending,
            announce=pending,
        ).run()

    # ---- 3: warm start (respot.agent.warmstart) -----------------------------------------------

    def _start_warm(self, submission: JobSubmission) -> None:
        """Start the session process now: it imports and prepares while the agent waits."""
        try:
            self.warm = WarmSession(
                lambda on_event: self._process(submission, on_event, warm=True),
                forward=self.agent._events.put,
            ).start()
        except Exception as exc:
            logger.exception("starting the warm session failed")
            self.warm, self.warm_failure = None, f"{type(exc).__name__}: {exc}"[:500]

    def _settle_warm(self) -> None:
        """Wait for the warm session to be ready; on a failed warm-up, fall back to cold."""
        if self.warm is None or self.warm.ready_seconds is not None:
            return
        ready = self.warm.wait_ready(give_up=self.agent._notice_pending)
        if not ready and self.warm.failure is not None:  # else a notice: execute() stops it
            self.warm_failure = self.warm.failure
            self.warm = None

    def _launch(self, submission: JobSubmission, *, warm: bool) -> SessionLaunch:
        spec = submission.spec
        launcher = self._launcher(spec, session_entry(spec)[1])
        return session_launch(
            spec,
            dirs=self.dirs,
            job_id=self.job_id,
            attempt=self.attempt,
            restored_step=self.restored_step,
            warm=warm,
            named_pipes=launcher.named_pipes,
        )

    def _process(
        self, submission: JobSubmission, on_event: Callable[[Any], None], *, warm: bool
    ) -> SessionProcess:
        spec = submission.spec
        launch = self._launch(submission, warm=warm)
        environment = session_entry(spec)[1]
        launcher = self._launcher(spec, environment)
        ipc = self.dirs.root / "ipc"
        if self.config.log_group and self.agent.logs is not None and self.shipper is None:
            self.shipper = LogShipper(
                client=self.agent.logs,
                group=self.config.log_group,
                stream=stream_name(self.job_id, self.attempt, self.identity.instance_id),
            )
        return SessionProcess(
            launch,
            launch_path=ipc / "session.json" if launcher.named_pipes else self.dirs.launch,
            env=session_environment(launch, {**environment, **self._secrets(spec)}),
            log_path=self.dirs.log,
            on_event=on_event,
            on_output=self.shipper.write if self.shipper is not None else None,
            launcher=launcher.argv,
            named_pipes=launcher.named_pipes,
        )

    # ---- 5-7 ---------------------------------------------------------------------------------

    def _train(self, submission: JobSubmission, uploader: CheckpointUploader) -> AgentResult:
        spec = submission.spec
        events = self.agent._events
        train_started = time.monotonic()
        # The session first (its events wait in the queue): the rest is off the pause.
        resumed = self.warm.resume(self.restored_step) if self.warm is not None else None
        if resumed is not None:
            process = resumed
        else:  # no warm session, or it ended since AgentStarted: a cold one
            process = self._process(submission, events.put, warm=False)
            process.start()
        self.scalars.resume_step = self.restored_step
        self.scalars.start()
        telemetry = GpuTelemetry(
            every_seconds=self.config.gpu_sample_seconds, on_sample=self._gpu_sample
        ).start()
        self.progress.gpus = telemetry.take
        heartbeat = Heartbeat(self.messenger, self.progress, self.config.heartbeat_seconds)
        hold = NoticeHold(self.s3, self.config.bucket, self.job_id, self.attempt)
        heartbeat.start()
        logger.info("session %s started (pid %s)", spec.entry_point, process.pid)
        done: DoneLine | None = None
        failed: FailedLine | None = None
        exit_code: int | None = None
        kill_at: float | None = None
        end_by: float | None = None
        killed = False
        told = False
        returned_at: float | None = None
        try:
            while exit_code is None:
                self.agent._check_signal()
                try:
                    event = events.get(timeout=0.2)
                except queue.Empty:
                    event = None
                if isinstance(event, ReportLine):
                    if self.progress.update(event):
                        heartbeat.nudge()
                    self.scalars.add(event.step, event.metrics, time.time())
                elif isinstance(event, CheckpointLine):
                    uploader.submit(Path(event.path), event.step, event.reason)
                elif isinstance(event, DoneLine | FailedLine):
                    returned_at = time.monotonic()
                    if isinstance(event, DoneLine):
                        done = event
                        if event.interrupted and end_by is not None:
                            self._hand_off_early(uploader, event, end_by)
                    else:
                        failed = event
                elif isinstance(event, SessionExited):
                    exit_code = event.exit_code
                elif isinstance(event, RebalanceNotice):
                    process.request_checkpoint()
                notice = self.agent._notice
                if notice is not None and not told and self._may_tell(notice, hold, spec):
                    told = True
                    if notice.hold_seconds is not None:  # a held stop: its 60 s start now
                        notice = self.agent._notice = stop_notice()
                    process.interrupt(notice.notice)
                    kill_at, end_by = deadlines(notice.at)
                    logger.warning("told the session: %s", notice.notice)
                now = time.monotonic()
                if kill_at is not None and not killed and now >= kill_at:
                    killed = True
                    logger.error("the session ignored the notice; stopping it")
                    process.terminate(grace_seconds=5.0)
                if (
                    returned_at is not None
                    and not killed
                    and now - returned_at > EXIT_GRACE_SECONDS
                ):
                    killed = True
                    logger.error("train() returned but the process does not exit; stopping it")
                    process.terminate(grace_seconds=5.0)
        finally:
            hold.stop()
            heartbeat.stop()
            telemetry.stop()
            if exit_code is None:  # the loop itself failed: do not leave the session running
                process.terminate(grace_seconds=5.0)
        train_seconds = time.monotonic() - train_started
        logger.info("session ended: %s", describe_exit(exit_code))
        step = _max(done.step if done else None, self.progress.step)
        # train() returned: the process exited cleanly, or we stopped it after it had returned.
        returned = done is not None and (exit_code == 0 or killed)
        if returned and done is not None and not done.interrupted:
            return self._completed(uploader, step, train_seconds)
        if self.agent._notice is not None and failed is None and (returned or killed):
            return self._preempted(uploader, step, end_by)
        if failed is not None:
            reason = f"the session raised {failed.error}"
        elif exit_code == 0:
            reason = "the session process exited without finishing train()"
        else:
            reason = f"the session process died ({describe_exit(exit_code)})"
        return self._failed(
            uploader,
            reason,
            exit_code,
            process.log_tail(),
            _max(failed.step if failed else None, step),
        )

    def _hand_off_early(self, uploader: CheckpointUploader, done: DoneLine, end_by: float) -> None:
        """train() returned on a notice, so no checkpoint comes after the ones queued: once
        they are in S3, release the replacement now, not after the process has exited
        (tearing down a PyTorch process takes seconds) nor after the report and the TensorBoard
        sync that follow an upload; `_preempted` writes it again."""
        notice = self.agent._notice
        assert notice is not None

        def run() -> None:
            if uploader.wait_uploaded(max(1.0, end_by - time.monotonic())):
                step = _max(done.step, self.progress.step)
                checkpoint_step = _max(uploader.last_step, self.restored_step)
                manifest = uploader.last_manifest_key
                self._write_handoff(step, checkpoint_step, manifest, notice.notice)

        threading.Thread(target=run, name="early-handoff", daemon=True).start()

    def _warm_capable(self, spec: Any) -> bool:
        """Does this job start warm? Not when it opted out, nor (yet) under torchrun or in a
        container: their replacement starts cold, so its old instance does not hold a notice
        for it either (docs/agent.md, "The notice hold")."""
        if not spec.warm_start:
            return False
        return not self._launcher(spec, session_entry(spec)[1]).named_pipes

    def _may_tell(self, notice: InterruptionNotice, hold: NoticeHold, spec: Any) -> bool:
        """Pass the notice on now? A spot notice, and a return's stop (which carries the
        control plane's hold limit), wait for a replacement that starts warm."""
        held_stop = notice.notice == "stop" and notice.hold_seconds is not None
        if notice.notice != "spot-interruption" and not held_stop:
            return True
        if self.agent._signalled:  # SIGTERM meanwhile: the instance is going, tell now
            if hold.started and not hold.due():
                hold.stop()
                logger.warning("telling the session now: the instance is shutting down")
            return True
        if self.warm_capable is None:
            self.warm_capable = self._warm_capable(spec)
            if not self.warm_capable:
                logger.info("no notice hold: this job's replacement starts cold")
        if not self.warm_capable:
            return True
        if not hold.started:
            if held_stop:
                hold.start_for(notice.hold_seconds or 0.0)
            else:
                hold.start(notice.at, DEFAULT_NOTICE_SECONDS, self.slowest_upload)
        return hold.due()

    def _gpu_sample(self, gpus: list[GpuSample]) -> None:
        step = _max(self.progress.step, self.restored_step) or 0
        self.scalars.add(step, tensorboard_scalars(gpus), time.time())

    def _launcher(self, spec: Any, environment: dict[str, str]) -> launchers.Launcher:
        """Plain, torchrun (processes_per_node) or the image's container."""
        return launcher_for(
            spec,
            environment,
            python=self.job_python.python,
            dirs=self.dirs,
            job_id=self.job_id,
            attempt=self.attempt,
            resumed=self.restored_step is not None,
        )

    def _on_uploaded(self, item: PendingCheckpoint, result: UploadResult) -> None:
        self.slowest_upload = max(self.slowest_upload or 0.0, result.seconds)
        self.messenger.send(
            AgentCheckpoint(
                step=item.step,
                manifest_key=result.manifest_key,
                size_bytes=result.size_bytes,
                uploaded_bytes=result.uploaded_bytes,
                upload_seconds=round(result.seconds, 3),
                reason="notice" if item.reason == "notice" else "periodic",
            )
        )
        self.scalars.sync(self.s3, self.config.bucket, self.job_id)

    def _completed(
        self, uploader: CheckpointUploader, step: int | None, train_seconds: float
    ) -> AgentResult:
        if not uploader.wait_idle(COMPLETED_UPLOAD_WAIT_SECONDS):
            logger.warning("checkpoint uploads did not finish; going on")
        prefix = layout.outputs_prefix(self.job_id)
        try:
            outputs = self._upload_outputs("completed")
        except Exception as exc:
            logger.exception("uploading outputs failed")
            return self._failed(uploader, f"uploading outputs failed: {exc}", 0, [], step)
        logger.info("uploaded %d output file(s) to %s", len(outputs.files), prefix)
        self._finish(uploader, "completed")
        self.messenger.send(
            AgentCompleted(
                step=step,
                outputs_prefix=prefix,
                train_seconds=round(train_seconds, 3),
                metrics=self.progress.message().metrics,
            )
        )
        return AgentResult("completed", self.job_id, self.attempt, step=step, exit_code=0)

    def _preempted(
        self, uploader: CheckpointUploader, step: int | None, end_by: float | None = None
    ) -> AgentResult:
        notice = self.agent._notice
        assert notice is not None
        if end_by is None:
            end_by = deadlines(notice.at)[1]
        if not uploader.wait_idle(max(1.0, end_by - time.monotonic())):
            logger.error(
                "the notice checkpoint did not finish uploading in time: sealing the store "
                "(a manifest PUT in flight still lands first; a later one never does)"
            )
        # Sealed before the handoff marker: the successor restores this attempt's last word.
        sealed = self.store.seal(f"attempt {self.attempt} handed off")
        checkpoint_step = _max(uploader.last_step, sealed.step if sealed else None)
        checkpoint_step = _max(checkpoint_step, self.restored_step)
        step = _max(step, checkpoint_step)
        manifest = sealed.key if sealed is not None else uploader.last_manifest_key
        self._write_handoff(step, checkpoint_step, manifest, notice.notice)
        self.messenger.send(
            AgentPreempted(
                step=step,
                checkpoint_step=checkpoint_step,
                notice=notice.notice,
                last_step_at=self.progress.last_at,
            )
        )
        lost = (step or 0) - (checkpoint_step or 0)
        logger.warning(
            "preempted at step %s; checkpoint step %s (%d lost)", step, checkpoint_step, lost
        )
        self.messenger.flush(timeout=max(1.0, end_by - time.monotonic()))
        self._upload_log()
        return AgentResult(
            "preempted",
            self.job_id,
            self.attempt,
            step=step,
            checkpoint_step=checkpoint_step,
            exit_code=0,
        )

    def _failed(
        self,
        uploader: CheckpointUploader,
        reason: str,
        exit_code: int | None,
        log_tail: list[str],
        step: int | None,
    ) -> AgentResult:
        if not uploader.wait_idle(FAILED_UPLOAD_WAIT_SECONDS):
            logger.warning("checkpoint uploads did not finish; going on")
        logger.error("failed: %s", reason)
        if not reason.startswith("uploading outputs failed"):
            try:  # what the session left is worth having (`respot pull` of a FAILED job)
                self._upload_outputs("failed")
            except Exception as exc:
                logger.warning("uploading the failed attempt's outputs failed: %s", exc)
        self._finish(uploader, "failed")
        self.messenger.send(
            AgentFailed(reason=reason[:2000], exit_code=exit_code, log_tail=log_tail, step=step)
        )
        return AgentResult(
            "failed", self.job_id, self.attempt, step=step, exit_code=exit_code, reason=reason
        )

    def _upload_outputs(self, outcome: Literal["completed", "failed"]) -> OutputsManifest:
        return upload_outputs(
            self.s3,
            self.dirs.output,
            bucket=self.config.bucket,
            job_id=self.job_id,
            attempt=self.attempt,
            outcome=outcome,
        )

    def _finish(self, uploader: CheckpointUploader, outcome: str) -> None:
        self._write_handoff(
            self.progress.step, _max(uploader.last_step, self.restored_step), None, outcome
        )
        self._upload_log()

    def _write_handoff(
        self, step: int | None, checkpoint_step: int | None, manifest: str | None, why: str
    ) -> None:
        """Seal the checkpoint store, then say so: the marker is this attempt's last word."""
        self.store.seal(f"attempt {self.attempt} handed off")

        def write() -> None:
            write_handoff(
                self.s3,
                self.config.bucket,
                self.job_id,
                self.attempt,
                instance_id=self.identity.instance_id,
                step=step,
                checkpoint_step=checkpoint_step,
                manifest_key=manifest,
                why=why,
            )

        if not write_with_retry(write, "the handoff marker"):
            logger.error(
                "the handoff marker is not written: a successor waits for it to this attempt's "
                "limit (or until the control plane sees this instance gone)"
            )

    def _upload_log(self) -> None:
        if self.shipper is not None:
            if not self.shipper.close(LOG_SHIP_CLOSE_SECONDS):
                logger.warning("the last log lines did not reach CloudWatch Logs in time")
            logger.info("shipped %d log line(s) to CloudWatch Logs", self.shipper.shipped)
        self.scalars.sync(self.s3, self.config.bucket, self.job_id, final=True)
        if not self.dirs.log.exists():
            return
        key = layout.logs_prefix(self.job_id, self.attempt) + "session.log"
        try:
            self.s3.upload_file(str(self.dirs.log), self.config.bucket, key)
        except Exception as exc:
            logger.warning("uploading the session log failed: %s", exc)


def _max(*values: int | None) -> int | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None
