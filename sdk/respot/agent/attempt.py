"""The order of one attempt: prepare it, say it started, train it, end it (steps 1-7 of
respot.agent.runner); a failed preparation ends it here.
"""

from __future__ import annotations

import logging
import time
import traceback

from respot.agent import environment as job_env
from respot.agent import launch as launchers
from respot.agent.attemptstate import LOG_TAIL_LINES, AgentResult
from respot.agent.commandjob import CommandLoop
from respot.agent.uploads import CheckpointUploader
from respot.wire.messages import (
    MAX_REFUSED_REPORTED,
    AgentFailed,
    AgentStarted,
    RefusedCheckpoint,
)

logger = logging.getLogger("respot.agent")


class AttemptRun(CommandLoop):
    """One attempt, from its preparation to its last report."""

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
                warm=None
                if not submission.spec.warm_start or submission.spec.command is not None
                else self.warm is not None,
                warm_failure=self.warm_failure,
                refused_checkpoints=[
                    RefusedCheckpoint(step=r.step, manifest_key=r.manifest_key, reason=r.reason)
                    for r in self.store.refused[:MAX_REFUSED_REPORTED]
                ]
                or None,
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
            if spec.command is not None:  # a command job (respot.agent.commandjob)
                return self._run_command(submission, uploader)
            return self._train(submission, uploader)
        finally:
            uploader.stop()
