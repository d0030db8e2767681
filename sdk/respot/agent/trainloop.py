"""How an attempt trains (steps 5-6): the session process supervised, notices passed on or
held, rebalances, checkpoints uploaded and reported, progress and GPU samples.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from pathlib import Path
from typing import Any

from respot.agent.attemptstate import AgentResult, _max
from respot.agent.endings import Endings
from respot.agent.notices import (
    DEFAULT_NOTICE_SECONDS,
    InterruptionNotice,
    RebalanceNotice,
    deadlines,
    stop_notice,
)
from respot.agent.prepare import PrepareSteps
from respot.agent.process import SessionExited, describe_exit
from respot.agent.progress import Heartbeat
from respot.agent.protocol import CheckpointLine, DoneLine, FailedLine, ReportLine
from respot.agent.telemetry import GpuTelemetry
from respot.agent.uploads import CheckpointUploader, PendingCheckpoint
from respot.agent.warmstart import NoticeHold
from respot.storage.checkpoints import UploadResult
from respot.wire.gpu import GpuSample, tensorboard_scalars
from respot.wire.messages import AgentCheckpoint, JobSubmission

logger = logging.getLogger("respot.agent")

# train() has returned but the process lingers (a non-daemon thread left running): stop it.
EXIT_GRACE_SECONDS = 30.0


class TrainingLoop(PrepareSteps, Endings):
    """Steps 5-6: it launches a cold session if no warm one resumes (`PrepareSteps`) and
    ends in one of the `Endings`."""

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
                # What the session printed, before the process has torn down: the instance
                # may be reclaimed first. `_preempted` uploads the whole log again.
                self._upload_session_log(final=False)

        threading.Thread(target=run, name="early-handoff", daemon=True).start()

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
