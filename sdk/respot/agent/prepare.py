"""How an attempt gets ready (steps 1-4): the submission, its code and data, the job's Python
or image, the warm session, the wait for the previous attempt's handoff, the restore, and the
session process it launches.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from respot.agent import environment as job_env
from respot.agent import launch as launchers
from respot.agent.attemptstate import AttemptState
from respot.agent.config import ENV_FRAMEWORK_PYTHON
from respot.agent.exceptions import SetupError
from respot.agent.handoff import HandoffWait, write_with_retry
from respot.agent.logship import LogShipper, stream_name
from respot.agent.notebook import session_entry
from respot.agent.process import SessionProcess, session_environment
from respot.agent.protocol import SessionLaunch
from respot.agent.regional import registry_region
from respot.agent.secrets import resolve_secrets
from respot.agent.sessions import launcher_for, session_launch
from respot.agent.warmstart import WARM_HANDOFF_POLL_SECONDS, WarmSession, announce_ready
from respot.agent.workspace import fetch_code, fetch_data, read_submission
from respot.storage import layout
from respot.wire.messages import AgentProgress, JobSubmission

if TYPE_CHECKING:
    from respot.spec.training import TrainingEnvVar

logger = logging.getLogger("respot.agent")


class PrepareSteps(AttemptState):
    """Steps 1-4 of an attempt, and the session process it launches (warm or cold)."""

    def _secrets(self, spec: TrainingEnvVar) -> dict[str, str]:
        """The values of the spec's `secrets`, read now (respot.agent.secrets)."""
        if not spec.secrets:
            return {}
        return resolve_secrets(self.agent.secrets_in, spec.secrets)

    # ---- 1-4 ---------------------------------------------------------------------------------

    def _prepare(self) -> tuple[JobSubmission, float, str | None]:
        self.dirs.create()
        submission = read_submission(self.s3, self.config.bucket, self.job_id)
        spec = submission.spec
        if spec.entry_point is None and spec.command is None:
            raise SetupError(
                "the job names no entry_point and no command; set entry_point to the "
                "'package.module:Session' the session runner starts, or command to the argv"
            )
        t0 = time.monotonic()
        if submission.code is not None:
            fetch_code(self.s3, submission.code, self.dirs.code, self.dirs.root)
        # The deployment bucket's data (earlier jobs' outputs) with the job's credentials,
        # whose session policy names them; data buckets with the instance role's.
        ours = [s for s in spec.data if s.bucket == self.config.bucket]
        theirs = [s for s in spec.data if s.bucket != self.config.bucket]
        fetched = fetch_data(self.s3, ours, self.dirs.data) if ours else 0
        fetched += fetch_data(self.agent.instance_s3, theirs, self.dirs.data) if theirs else 0
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
                # The job's credentials (their session policy names its researcher's
                # wheelhouse alone) where vended, else the instance role's.
                s3=self.s3,
                bucket=self.config.bucket,
                scope=layout.wheelhouse_scope(submission.submitted_by, self.job_id),
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

    def _warm_capable(self, spec: Any) -> bool:
        """Does this job start warm? Not when it opted out, nor (yet) under torchrun or in a
        container: their replacement starts cold, so its old instance does not hold a notice
        for it either (docs/agent.md, "The notice hold")."""
        if not spec.warm_start or spec.command is not None:
            return False  # a command starts after the hand-off (docs/commands.md)
        return not self._launcher(spec, session_entry(spec)[1]).named_pipes

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
