"""How an attempt ends (step 7): completed, preempted or failed, each reported; the outputs
uploaded, the checkpoint store sealed and the handoff marker written, the logs shipped.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Literal

from respot.agent.attemptstate import AgentResult, AttemptState, _max
from respot.agent.handoff import write_with_retry
from respot.agent.notices import deadlines
from respot.agent.uploads import CheckpointUploader
from respot.agent.workspace import write_handoff
from respot.storage import layout
from respot.storage.outputs import OutputsManifest, upload_outputs
from respot.wire.messages import AgentCompleted, AgentFailed, AgentPreempted

logger = logging.getLogger("respot.agent")

COMPLETED_UPLOAD_WAIT_SECONDS = 1800.0
FAILED_UPLOAD_WAIT_SECONDS = 60.0
LOG_SHIP_CLOSE_SECONDS = 10.0  # at the end, wait this long at most for the last log lines
_SESSION_LOG_LOCK = threading.Lock()  # the early and the final upload of session.log


class Endings(AttemptState):
    """The three ways an attempt ends, and what each leaves behind."""

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
                outputs_sha256=outputs.sha256,
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
        # The control plane terminates this instance as soon as it reads the report below (and
        # EC2 reclaims it at the notice's end anyway): session.log, the durable copy of what
        # the session printed, and the last TensorBoard points go to S3 before the report.
        self._save_log()
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
        self._close_shipper(min(LOG_SHIP_CLOSE_SECONDS, max(1.0, end_by - time.monotonic())))
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
        outputs_sha256: str | None = None
        if not reason.startswith("uploading outputs failed"):
            try:  # what the session left is worth having (`respot pull` of a FAILED job)
                outputs_sha256 = self._upload_outputs("failed").sha256
            except Exception as exc:
                logger.warning("uploading the failed attempt's outputs failed: %s", exc)
        self._finish(uploader, "failed")
        self.messenger.send(
            AgentFailed(
                reason=reason[:2000],
                exit_code=exit_code,
                log_tail=log_tail,
                step=step,
                outputs_sha256=outputs_sha256,
            )
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
        """Before the last report: the CloudWatch stream closed, session.log in S3."""
        self._close_shipper(LOG_SHIP_CLOSE_SECONDS)
        self._save_log()

    def _close_shipper(self, timeout: float) -> None:
        if self.shipper is not None:
            if not self.shipper.close(timeout):
                logger.warning("the last log lines did not reach CloudWatch Logs in time")
            logger.info("shipped %d log line(s) to CloudWatch Logs", self.shipper.shipped)

    def _save_log(self) -> None:
        """session.log (the durable copy), then the last TensorBoard points, to S3."""
        self._upload_session_log(final=True)
        try:
            self.scalars.sync(self.s3, self.config.bucket, self.job_id, final=True)
        except Exception as exc:  # the log matters more than the last points
            logger.warning("the last TensorBoard sync failed: %s", exc)

    def _upload_session_log(self, *, final: bool) -> None:
        """Upload session.log as it is now. An early copy (`final=False`: train() returned on
        a notice, the process still tears down and EC2 may reclaim the instance first) never
        lands after the final one."""
        with _SESSION_LOG_LOCK:
            if getattr(self, "_session_log_final", False):
                return
            if final:
                self._session_log_final = True
            if not self.dirs.log.exists():
                return
            key = layout.logs_prefix(self.job_id, self.attempt) + "session.log"
            try:
                self.s3.upload_file(str(self.dirs.log), self.config.bucket, key)
            except Exception as exc:
                logger.warning("uploading the session log failed: %s", exc)
