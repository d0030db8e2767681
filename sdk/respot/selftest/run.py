"""`respot selftest`: prove a deployment survives a real spot interruption.

1. Submit the smallest job (`SelftestSession`, shipped in respot) tagged `respot-selftest`.
2. When it trains, start the stack's FIS experiment (`aws:ec2:send-spot-instance-interruptions`).
3. Wait for the notice on the job, the replacement training from the checkpoint, completion.
4. Check the resume started from the checkpoint written on the notice; report the changeover.

Every wait has a timeout and, when it stops, says which wait and why. Any failure, timeout
or Ctrl-C cancels the job and stops the experiment: nothing is left running or billing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from respot.client.deployment import Deployment
from respot.core.job import Attempt, JobRecord
from respot.core.states import JobState
from respot.selftest.exceptions import SelftestStoppedError
from respot.selftest.experiment import SELFTEST_TAG, SELFTEST_TAG_VALUE

FAILED_EXPERIMENT = frozenset({"failed", "stopped", "cancelled"})


@dataclass(frozen=True)
class SelftestTimeouts:
    """How long each wait may take, in seconds (defaults for AWS: capacity, boot, two minutes
    of notice, a new instance, a few minutes of training)."""

    training: float = 20 * 60  # submitted -> the first attempt passed `start_after_step`
    notice: float = 5 * 60  # experiment started -> the notice is on the job record
    resume: float = 20 * 60  # notice -> a new attempt trains from the checkpoint
    finish: float = 15 * 60  # resumed -> COMPLETED
    poll: float = 5.0


@dataclass(frozen=True)
class SelftestPlan:
    """The job the self-test runs."""

    steps: int = 240
    step_seconds: float = 1.0
    checkpoint_every: int = 30
    start_after_step: int = 10  # interrupt once training is this far (a checkpoint to lose)
    instance_types: tuple[str, ...] | None = None  # None: the deployment's defaults
    max_runtime: str = "45m"  # the control plane ends the job after this, whatever happens

    def spec(self) -> dict[str, Any]:
        """The job specification."""
        spec: dict[str, Any] = {
            "name": "respot-selftest",
            "entry_point": "respot.selftest.session:SelftestSession",
            "hyperparameters": {
                "steps": self.steps,
                "step_seconds": self.step_seconds,
                "checkpoint_every": self.checkpoint_every,
            },
            "max_runtime": self.max_runtime,
            "max_interruptions": 3,
            # Spot only: an on-demand instance is no target for a spot interruption.
            "on_demand_fallback": False,
            "checkpoint_keep": 2,
            "tags": {SELFTEST_TAG: SELFTEST_TAG_VALUE},
        }
        if self.instance_types:
            spec["instance_types"] = list(self.instance_types)
        return spec


@dataclass
class Changeover:
    """One interruption as the job record tells it (seconds from the notice)."""

    interrupted_attempt: int
    instance_id: str | None
    step_at_notice: int | None
    checkpoint_step: int | None
    checkpointed_on_notice: bool  # the session saved a checkpoint when the notice came
    resumed_from_step: int | None
    lost_steps: int | None
    notice_to_replacement_requested_s: float | None
    notice_to_replacement_launched_s: float | None
    notice_to_training_resumed_s: float | None
    restore_s: float | None
    # The replacement's boot on EC2, phase by phase (the figures the local runtime's modelled
    # boot stands in for, infra/local/boot.py): RunInstances returned -> the agent started
    # (spot fulfilment, the AMI's boot, the agent package's download, the agent's start);
    # the agent started -> the session's first step (the job's code and data, `import torch`
    # from a root volume still loading from its snapshot, the restore).
    launched_to_agent_started_s: float | None = None
    agent_started_to_first_step_s: float | None = None
    # Training paused: the interrupted attempt's last step -> the replacement's first.
    paused_s: float | None = None


@dataclass
class SelftestResult:
    """What the self-test found."""

    passed: bool
    outcome: str  # one sentence: why it passed, or which wait stopped and why
    job_id: str | None = None
    experiment_id: str | None = None
    experiment_status: str | None = None
    job_state: str | None = None
    changeover: Changeover | None = None
    wall_seconds: float = 0.0
    steps: list[str] = field(default_factory=list)  # what happened, in order

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return asdict(self)


def _seconds(later: datetime | None, earlier: datetime | None) -> float | None:
    if later is None or earlier is None:
        return None
    return round((later - earlier).total_seconds(), 3)


def changeover_of(record: JobRecord) -> tuple[Attempt, Attempt] | None:
    """(the first interrupted attempt, the attempt after it), if both exist."""
    for old, new in zip(record.attempts, record.attempts[1:], strict=False):
        if old.notice_at is not None:
            return old, new
    return None


def measure(old: Attempt, new: Attempt) -> Changeover:
    """The changeover figures of one interruption."""
    lost = None
    if old.last_step is not None and new.restored_step is not None:
        lost = max(old.last_step - new.restored_step, 0)
    return Changeover(
        interrupted_attempt=old.number,
        instance_id=old.instance_id,
        step_at_notice=old.last_step,
        checkpoint_step=old.checkpoint_step,
        checkpointed_on_notice=old.notice_checkpoint_at is not None,
        resumed_from_step=new.restored_step,
        lost_steps=lost,
        notice_to_replacement_requested_s=_seconds(new.requested_at, old.notice_at),
        notice_to_replacement_launched_s=_seconds(new.launched_at, old.notice_at),
        notice_to_training_resumed_s=_seconds(new.started_at, old.notice_at),
        restore_s=new.restore_seconds,
        launched_to_agent_started_s=_seconds(new.started_at, new.launched_at),
        agent_started_to_first_step_s=_seconds(new.first_step_at, new.started_at),
        paused_s=_seconds(new.first_step_at, old.last_step_at),
    )


class Selftest:
    """One self-test run against a deployment (AWS, or the local runtime's emulator)."""

    def __init__(
        self,
        deployment: Deployment,
        session: Any = None,
        *,
        plan: SelftestPlan | None = None,
        timeouts: SelftestTimeouts | None = None,
        fis: Any = None,
        echo: Callable[[str], None] | None = None,
    ) -> None:
        self.deployment = deployment
        self.session = session
        self.plan = plan or SelftestPlan()
        self.timeouts = timeouts or SelftestTimeouts()
        self.fis = fis or deployment.client("fis", session)
        self._echo = echo or (lambda line: None)
        self.result = SelftestResult(passed=False, outcome="not started")
        self._handle: Any = None
        self._started = time.monotonic()

    def say(self, line: str) -> None:
        """Note a step (kept in the result, and echoed)."""
        stamped = f"[{time.monotonic() - self._started:7.1f}s] {line}"
        self.result.steps.append(stamped)
        self._echo(stamped)

    # ---- the run -------------------------------------------------------------------------

    def run(self) -> SelftestResult:
        """Run the self-test to its end; never leaves the job or the experiment running."""
        self._started = time.monotonic()
        try:
            self._run()
        except SelftestStoppedError as exc:
            self.result.outcome = str(exc)
            self._clean_up(str(exc))
        except KeyboardInterrupt:
            self.result.outcome = "stopped by Ctrl-C"
            self._clean_up("selftest stopped by Ctrl-C")
            raise
        except (ClientError, BotoCoreError) as exc:
            self.result.outcome = f"AWS error: {exc}"
            self._clean_up(f"selftest stopped: {exc}")
        finally:
            self.result.wall_seconds = round(time.monotonic() - self._started, 1)
        return self.result

    def _run(self) -> None:
        from respot.client.handle import run

        template_id = self.deployment.fis_template_id
        if not template_id:
            raise SelftestStoppedError(
                "the deployment names no FIS experiment template (deployment parameter key "
                "fis_template_id): deploy the current stack, which creates it"
            )
        plan, timeouts = self.plan, self.timeouts
        self._handle = run(plan.spec(), deployment=self.deployment, session=self.session)
        job_id = self._handle.job_id
        self.result.job_id = job_id
        self.say(f"submitted {job_id} ({plan.steps} steps of {plan.step_seconds:g}s, spot only)")

        first = self._wait(
            f"the job to train past step {plan.start_after_step}",
            lambda r: (
                r.state is JobState.RUNNING and (r.progress.step or 0) >= plan.start_after_step
            ),
            timeouts.training,
        )
        current = first.current
        assert current is not None
        self.say(
            f"attempt {current.number} trains on {current.instance_id} "
            f"({current.placement.market.value} {current.placement.instance_type}) at step "
            f"{first.progress.step}"
        )

        experiment = self.fis.start_experiment(
            experimentTemplateId=template_id,
            clientToken=f"{job_id}-interrupt"[:64],
            tags={"respot:job-id": job_id},
        )["experiment"]
        self.result.experiment_id = experiment["id"]
        self.say(f"started FIS experiment {experiment['id']} (template {template_id})")

        noticed = self._wait(
            "the interruption notice to reach the job",
            lambda r: any(a.notice_at is not None for a in r.attempts),
            timeouts.notice,
            watch_experiment=True,
        )
        old = next(a for a in noticed.attempts if a.notice_at is not None)
        self.say(f"the notice reached attempt {old.number} ({old.instance_id})")

        resumed = self._wait(
            "a new instance to resume training",
            lambda r: (pair := changeover_of(r)) is not None and pair[1].started_at is not None,
            timeouts.resume,
        )
        pair = changeover_of(resumed)
        assert pair is not None
        self.say(f"attempt {pair[1].number} resumed from step {pair[1].restored_step}")

        done = self._wait(
            "the job to complete", lambda r: r.state is JobState.COMPLETED, timeouts.finish
        )
        self.result.job_state = done.state.value
        pair = changeover_of(done)
        assert pair is not None
        changeover = measure(*pair)
        self.result.changeover = changeover
        self.result.experiment_status = self._experiment_status()
        self._verify(changeover, done)

    def _verify(self, c: Changeover, record: JobRecord) -> None:
        if c.resumed_from_step is None or c.resumed_from_step <= 0:
            raise SelftestStoppedError(
                f"the job completed, but attempt {c.interrupted_attempt + 1} started from "
                f"scratch (restored step {c.resumed_from_step}), not from a checkpoint"
            )
        if not c.checkpointed_on_notice:
            raise SelftestStoppedError(
                f"attempt {c.interrupted_attempt} wrote no checkpoint on the notice: the job "
                f"resumed from the periodic checkpoint of step {c.resumed_from_step} "
                f"({c.lost_steps} steps lost); is the notice reaching the instance (IMDS)?"
            )
        if c.checkpoint_step is not None and c.resumed_from_step != c.checkpoint_step:
            raise SelftestStoppedError(
                f"the job resumed from step {c.resumed_from_step}, not from the newest "
                f"checkpoint (step {c.checkpoint_step})"
            )
        self.result.passed = True
        self.result.outcome = (
            f"interrupted at step {c.step_at_notice}, resumed from the checkpoint of "
            f"step {c.resumed_from_step} ({c.lost_steps} steps lost), completed at step "
            f"{record.progress.step}"
        )
        self.say(self.result.outcome)

    # ---- waiting, bounded ------------------------------------------------------------------

    def _wait(
        self,
        what: str,
        done: Callable[[JobRecord], bool],
        timeout: float,
        *,
        watch_experiment: bool = False,
    ) -> JobRecord:
        """Poll the job record until `done`; stop on timeout, a finished job or a failed
        experiment, saying which."""
        assert self._handle is not None
        end = time.monotonic() + timeout
        last: JobRecord | None = None
        while True:
            record = self._handle.record()
            if record is not None:
                last = record
                self.result.job_state = record.state.value
                if done(record):
                    return record
                if record.state.is_terminal():
                    raise SelftestStoppedError(
                        f"stopped waiting for {what}: the job ended {record.state.value}"
                        + (f" ({record.reason})" if record.reason else "")
                    )
            if watch_experiment:
                status = self._experiment_status()
                if status in FAILED_EXPERIMENT:
                    raise SelftestStoppedError(
                        f"stopped waiting for {what}: the FIS experiment {status} "
                        f"({self._experiment_reason()})"
                    )
            if time.monotonic() >= end:
                where = f"the job is {last.state.value}" if last else "the job has no record yet"
                raise SelftestStoppedError(
                    f"timed out after {timeout:g}s waiting for {what} ({where})"
                )
            time.sleep(self.timeouts.poll)

    def _experiment(self) -> dict[str, Any] | None:
        if self.result.experiment_id is None:
            return None
        experiment: dict[str, Any] = self.fis.get_experiment(id=self.result.experiment_id)[
            "experiment"
        ]
        return experiment

    def _experiment_status(self) -> str | None:
        experiment = self._experiment()
        status = experiment["state"]["status"] if experiment else None
        self.result.experiment_status = status
        return status

    def _experiment_reason(self) -> str:
        experiment = self._experiment()
        return str(experiment["state"].get("reason", "")) if experiment else ""

    # ---- cleaning up -----------------------------------------------------------------------

    def _clean_up(self, reason: str) -> None:
        """Cancel the job and stop the experiment; "already over" is fine."""
        self.say(f"stopping: {reason}")
        if self.result.experiment_id is not None:
            try:
                status = self._experiment_status()
                if status not in (*FAILED_EXPERIMENT, "completed"):
                    answer = self.fis.stop_experiment(id=self.result.experiment_id)
                    now = answer["experiment"]["state"]["status"]
                    self.result.experiment_status = now
                    if now in ("stopping", "stopped"):
                        self.say(f"stopped FIS experiment {self.result.experiment_id}")
                    else:  # it ended by itself in the meantime
                        self.say(f"FIS experiment {self.result.experiment_id} already {now}")
            except (ClientError, BotoCoreError) as exc:
                self.say(f"could not stop FIS experiment {self.result.experiment_id}: {exc}")
        if self._handle is not None:
            try:
                record = self._handle.record()
                if record is None or not record.state.is_terminal():
                    self._handle.cancel(f"selftest: {reason}")
                    self.say(f"cancelled {self._handle.job_id} (its instances are terminated)")
            except (ClientError, BotoCoreError) as exc:
                self.say(f"could not cancel {self._handle.job_id}: {exc}; run `respot cancel`")
