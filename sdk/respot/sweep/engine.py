"""The sweep's brain: one message in (a kick, a stop, a trial's news), study and trials moved on.

The sweep Lambda calls `SweepEngine.handle` for each message of the FIFO queue
`sweep-events`, whose message group is the sweep: one sweep's messages are handled one at a
time and in order. Each call:
1. reads the sweep's record and opens its study (Optuna journal in DynamoDB);
2. tells the study what the message says: an intermediate value (then asks the pruner), a
   result, a failure;
3. repairs what a crash may have left: a trial Optuna asked for but the record never got;
4. asks for new trials while fewer than `parallelism` run and fewer than `n_trials` exist;
5. writes the record (compare-and-set), then acts: submits the new trials' jobs, cancels
   pruned ones, posts to the sweep's Slack thread.
Every step is safe to repeat: a result told twice is skipped (`skip_if_finished`), an
intermediate value is told only for a newer step, a trial job is create-only by its id.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

import optuna

from respot.spec.jobid import trial_job_id
from respot.sweep import study as studies
from respot.sweep.model import (
    SweepKick,
    SweepRecord,
    SweepState,
    SweepStop,
    SweepSubmission,
    Trial,
    TrialEvent,
    TrialRef,
    TrialState,
)
from respot.sweep.table import SweepTable
from respot.wire.messages import CodeArtifact, JobSubmission

log = logging.getLogger("respot.sweep")

__all__ = ["Outcome", "SweepEngine", "SweepMessage", "SweepNews", "TrialJobs", "trial_job_id"]

TERMINAL_JOB_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED"})
SweepMessage = SweepKick | SweepStop | TrialEvent
MAX_TRIALS_PER_MESSAGE = 1000  # = the most trials a sweep may have (spec.MAX_TRIALS)


def utcnow() -> datetime:
    """Wall-clock time in UTC."""
    return datetime.now(UTC)


class TrialJobs(Protocol):
    """What the engine needs of the control plane to run trials as jobs."""

    def submit(self, submission: JobSubmission) -> None:
        """Record the trial job and request its capacity (idempotent by job id)."""

    def cancel(self, job_id: str, reason: str) -> str | None:
        """Cancel the trial job (its instance is terminated), compare-and-set on its record:
        the job's state afterwards (`CANCELLED`, or the end it reached first), None if
        unknown."""

    def copy_code(self, code: CodeArtifact, job_id: str) -> CodeArtifact:
        """The sweep's code, copied under the trial job's own prefix."""


class SweepNews(Protocol):
    """Where a sweep's news goes (Slack). Never raises: news must not stop a sweep."""

    def post(self, record: SweepRecord, finished: list[Trial]) -> dict[str, str] | None:
        """Post the sweep's card and one reply per finished trial; the thread, if new."""


@dataclass
class Outcome:
    """What one message did (logs and tests)."""

    sweep_id: str
    outcome: str
    submitted: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    finished: list[int] = field(default_factory=list)
    failed_to_start: int = 0


class SweepEngine:
    """Moves sweeps on: tells studies what trials did, and runs new trials as respot jobs."""

    def __init__(
        self,
        *,
        table: SweepTable,
        jobs: TrialJobs,
        news: SweepNews | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.table = table
        self.jobs = jobs
        self.news = news
        self.clock = clock
        self._to_cancel: list[tuple[str, str]] = []  # (job id, reason), reset per message

    # ---- starting --------------------------------------------------------------------------

    def create(self, submission: SweepSubmission) -> tuple[SweepRecord, bool]:
        """Record a new sweep and its study (create-only); (record, created)."""
        now = self.clock()
        record = SweepRecord(
            sweep_id=submission.sweep_id, created_at=now, updated_at=now, submission=submission
        )
        from respot.exceptions import ConcurrentUpdateError

        try:
            written = self.table.save(record, expected_version=None)
        except ConcurrentUpdateError:
            return self.table.require(submission.sweep_id), False
        studies.open_study(self.table.journal(submission.sweep_id), submission.spec, create=True)
        return written, True

    # ---- one message -----------------------------------------------------------------------

    def handle(self, message: SweepMessage) -> Outcome:
        """Apply one message of the sweep's FIFO group (see the module docstring).

        A trial whose job could not even be submitted counts as a failed trial; the sweep
        then asks for the next one at once (bounded: each round uses up a trial).
        """
        done = self._handle_once(message)
        for _ in range(MAX_TRIALS_PER_MESSAGE):
            if not done.failed_to_start:
                break
            again = self._handle_once(SweepKick(sweep_id=message.sweep_id))
            done.submitted += again.submitted
            done.cancelled += again.cancelled
            done.finished += again.finished
            done.failed_to_start = again.failed_to_start
        return done

    def _handle_once(self, message: SweepMessage) -> Outcome:
        self._to_cancel = []
        record = self.table.require(message.sweep_id)
        done = Outcome(record.sweep_id, "unchanged")
        if record.state.is_terminal():
            if isinstance(message, TrialEvent) and message.state not in TERMINAL_JOB_STATES:
                # A trial still reporting after its sweep ended (cancel raced a report).
                self.jobs.cancel(message.job_id, f"sweep {record.sweep_id} has ended")
                done.cancelled.append(message.job_id)
            done.outcome = f"ignored: sweep is {record.state.value.lower()}"
            return done
        expected = record.version
        study = studies.open_study(self.table.journal(record.sweep_id), record.spec, create=True)
        finished_before = {t.number for t in record.trials if t.state is not TrialState.RUNNING}
        known_before = {t.number for t in record.trials}

        match message:
            case TrialEvent():
                done.outcome = self._trial_event(record, study, message, done)
            case SweepStop():
                done.outcome = self._stop(record, study, message.reason, done)
            case SweepKick():
                done.outcome = "kicked"

        new_trials: list[Trial] = []
        if record.state is SweepState.RUNNING:
            self._repair(record, study)
            try:
                new_trials = self._fill(record, study)
            except (ValueError, ArithmeticError, TypeError) as exc:
                # The sampler cannot draw from this search space (a spec checked by an older
                # respot): stop with the reason rather than stay RUNNING with no new trial.
                log.exception("sweep %s: the sampler cannot draw", record.sweep_id)
                # Trials asked before the failure were never submitted: not the record's.
                record.trials = [t for t in record.trials if t.number in known_before]
                reason = f"the sampler cannot draw a trial: {type(exc).__name__}: {exc}"[:500]
                done.outcome = self._stop(record, study, reason, done)
                new_trials = []
            if not record.running() and self._all_asked(record):
                record.state = SweepState.COMPLETED
                record.finished_at = self.clock()
                best = record.best()
                record.reason = (
                    f"best: trial {best.number} ({record.spec.metric}={best.value:g})"
                    if best
                    else "no trial completed"
                )
        record.updated_at = self.clock()
        self.table.save(record, expected_version=expected)

        # Act only after the write: every effect below is safe to repeat.
        for trial in new_trials:
            if self._submit(record, trial):
                done.submitted.append(trial.job_id)
        failed_to_start = [t for t in new_trials if t.state is TrialState.FAIL]
        if failed_to_start:
            self._record_submit_failures(record.sweep_id, failed_to_start)
            done.failed_to_start = len(failed_to_start)
        for job_id, reason in self._to_cancel:
            self.jobs.cancel(job_id, reason)
            done.cancelled.append(job_id)
        finished = [
            t
            for t in record.trials
            if t.state is not TrialState.RUNNING and t.number not in finished_before
        ]
        done.finished = [t.number for t in finished]
        self._post(record, finished)
        return done

    # ---- telling the study -----------------------------------------------------------------

    def _trial_event(
        self, record: SweepRecord, study: optuna.Study, event: TrialEvent, done: Outcome
    ) -> str:
        trial = record.trial_of(event.job_id)
        if trial is None or trial.number != event.trial:
            return f"ignored: {event.job_id} runs no trial of this sweep"
        if trial.state is not TrialState.RUNNING:
            if event.state not in TERMINAL_JOB_STATES:
                # The trial is over (pruned, stopped) but its job still reports: the cancel
                # after the last write did not happen (a crash, a retry). Cancel it again.
                self._to_cancel.append((trial.job_id, f"trial {trial.number} is over"))
            return f"ignored: trial {trial.number} is already {trial.state.value.lower()}"
        metric = record.spec.metric
        value = event.metrics.get(metric)
        if value is not None and not math.isfinite(value):
            value = None
        now = self.clock()
        if event.state not in TERMINAL_JOB_STATES:
            if value is None or event.step is None:
                return "no new value"
            if trial.last_step is not None and event.step <= trial.last_step:
                return "duplicate value"
            live = studies.trial_handle(study, trial.number)
            live.report(value, event.step)
            trial.last_step = event.step
            if not live.should_prune():
                return f"reported {metric}={value:g} at step {event.step}"
            reason = f"pruned at step {event.step} ({metric}={value:g})"
            # The verdict and the job's own end race (an interrupted trial's completion may
            # already be on its way): the job's record decides, by compare-and-set. The cancel
            # goes first; only if it landed (the job is CANCELLED) is the trial PRUNED. A job
            # that ended first keeps its end, and its end decides the trial (docs/sweeps.md).
            ended = self.jobs.cancel(trial.job_id, f"trial {trial.number} {reason}")
            if ended is not None and ended != "CANCELLED" and ended in TERMINAL_JOB_STATES:
                return f"trial {trial.number} not pruned: its job is {ended.lower()} already"
            study.tell(trial.number, state=optuna.trial.TrialState.PRUNED, skip_if_finished=True)
            trial.state = TrialState.PRUNED
            trial.value = value
            trial.finished_at = now
            trial.reason = reason
            done.cancelled.append(trial.job_id)
            return f"pruned trial {trial.number}"
        if event.state == "COMPLETED" and value is not None:
            study.tell(trial.number, value, skip_if_finished=True)
            trial.state, trial.value = TrialState.COMPLETE, value
            trial.reason = None
        else:
            study.tell(trial.number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
            trial.state = TrialState.FAIL
            if event.state == "COMPLETED":
                trial.reason = f"the job completed without reporting {metric!r}"
            else:
                trial.reason = f"job {event.state.lower()}: {event.reason or 'no reason given'}"
        trial.finished_at = now
        return f"trial {trial.number} {trial.state.value.lower()}"

    def _stop(self, record: SweepRecord, study: optuna.Study, reason: str, done: Outcome) -> str:
        # A trial stopped with its sweep did not fail: Optuna has no "stopped", and PRUNED
        # (stopped early, its last value kept) is the closest it allows (docs/sweeps.md).
        for trial in record.running():
            study.tell(trial.number, state=optuna.trial.TrialState.PRUNED, skip_if_finished=True)
            trial.state, trial.finished_at = TrialState.PRUNED, self.clock()
            trial.reason = f"stopped with the sweep: {reason}"
            self._to_cancel.append((trial.job_id, f"sweep stopped: {reason}"))
        record.state, record.reason, record.finished_at = SweepState.STOPPED, reason, self.clock()
        return "stopped"

    def _repair(self, record: SweepRecord, study: optuna.Study) -> None:
        """Fail trials Optuna asked for that the record never got (a crash between the two)."""
        known = {t.number for t in record.trials}
        for frozen in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            if frozen.number not in known:
                log.warning("sweep %s: trial %d was never started", record.sweep_id, frozen.number)
                study.tell(frozen.number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)

    def _fill(self, record: SweepRecord, study: optuna.Study) -> list[Trial]:
        """Ask for trials while fewer than `parallelism` run and `n_trials` is not reached."""
        spec = record.spec
        space = studies.distributions(spec)
        new: list[Trial] = []
        while len(record.running()) < spec.parallelism and len(record.trials) < spec.n_trials:
            if spec.sampler.name == "grid":
                point = studies.next_grid_point(spec, [t.params for t in record.trials])
                if point is None:
                    break  # every grid point has (or had) a trial
                study.enqueue_trial(point, skip_if_exists=False)
            study.sampler = studies.make_sampler(spec, len(study.get_trials(deepcopy=False)))
            asked = study.ask(space)
            trial = Trial(
                number=asked.number,
                job_id=trial_job_id(record.sweep_id, asked.number),
                params=dict(asked.params),
                started_at=self.clock(),
            )
            record.trials.append(trial)
            new.append(trial)
        return new

    @staticmethod
    def _all_asked(record: SweepRecord) -> bool:
        spec = record.spec
        if len(record.trials) >= spec.n_trials:
            return True
        taken = [t.params for t in record.trials]
        return spec.sampler.name == "grid" and studies.next_grid_point(spec, taken) is None

    # ---- acting ----------------------------------------------------------------------------

    def _submit(self, record: SweepRecord, trial: Trial) -> bool:
        sweep = record.submission
        spec = sweep.spec.job.model_copy(
            update={"hyperparameters": sweep.spec.trial_hyperparameters(trial.params)}
        )
        try:
            code = self.jobs.copy_code(sweep.code, trial.job_id) if sweep.code else None
            self.jobs.submit(
                JobSubmission(
                    job_id=trial.job_id,
                    spec=spec,
                    code=code,
                    provenance=sweep.provenance,
                    submitted_at=self.clock(),
                    submitted_by=sweep.submitted_by,
                    sweep=TrialRef(sweep_id=record.sweep_id, trial=trial.number),
                )
            )
        except Exception as exc:  # a trial that cannot start is a failed trial, not a stuck sweep
            log.exception("sweep %s: trial %d did not start", record.sweep_id, trial.number)
            trial.state = TrialState.FAIL
            trial.reason = f"could not start: {type(exc).__name__}: {exc}"[:500]
            trial.finished_at = self.clock()
            return False
        return True

    def _record_submit_failures(self, sweep_id: str, failed: list[Trial]) -> None:
        """Write down trials whose job could not be submitted; the next message refills."""
        backend = self.table.journal(sweep_id)

        def change(current: SweepRecord) -> SweepRecord | None:
            study = studies.open_study(backend, current.spec)
            for bad in failed:
                mine = next((t for t in current.trials if t.number == bad.number), None)
                if mine is None or mine.state is not TrialState.RUNNING:
                    continue
                study.tell(bad.number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
                mine.state, mine.reason, mine.finished_at = bad.state, bad.reason, bad.finished_at
            return current

        self.table.update(sweep_id, change)

    def _post(self, record: SweepRecord, finished: list[Trial]) -> None:
        if self.news is None:
            return
        try:
            thread = self.news.post(record, finished)
        except Exception:  # news never stops a sweep
            log.exception("sweep %s: Slack post failed", record.sweep_id)
            return
        if thread and thread != record.slack:

            def change(current: SweepRecord) -> SweepRecord | None:
                if current.slack == thread:
                    return None
                return current.model_copy(update={"slack": thread})

            self.table.update(record.sweep_id, change)
