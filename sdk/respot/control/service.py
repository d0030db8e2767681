"""The control plane: apply an event to a job (decide, compare-and-set, then act), and its inputs.

Every handler calls into `ControlPlane`. The order is always the same:
1. read the job record (strongly consistent);
2. `lifecycle.decide` computes the new record and the effects;
3. write the record if its version is unchanged; on a lost race go back to 1;
4. run the effects (launch, terminate, release a hand-off), feeding their results back as
   events; then notify; then apply the decision's follow-up event, if any.
A crash between 3 and 4 is repaired by the reconcile tick (launch timeout, heartbeats).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from respot.aws.capacity import Ec2Capacity
from respot.aws.jobs import JobTable
from respot.aws.pacing import LaunchPacer
from respot.aws.pools import PoolTable
from respot.aws.queueledger import AccountUse, QueueLedger
from respot.aws.satellites import (
    JobObjects,
    RegionalCapacity,
    load_satellites,
    with_satellite_subnets,
)
from respot.aws.teamtags import PrincipalTeams
from respot.control.admission import Admission, PassResult
from respot.control.config import ControlPlaneConfig
from respot.control.queuecommand import QueueSettingsCommand
from respot.control.retries import LaunchRetries
from respot.control.sweeps import SweepFeed
from respot.core.deadline import DeadlinePolicy
from respot.core.effects import (
    Effect,
    LaunchInstance,
    LookAgainLater,
    ReleaseHandoff,
    StopAttempt,
    TerminateInstances,
)
from respot.core.events import (
    AgentReport,
    CancelRequested,
    CapacityLaunched,
    CapacityUnavailable,
    InstanceDown,
    InstanceUp,
    InterruptionNotice,
    JobEvent,
    PlaceNow,
    ReconcileTick,
    Submitted,
)
from respot.core.job import JobRecord, Market, TimelineEntry
from respot.core.lifecycle import ATTEMPT_TAG, JOB_TAG, Decision, decide
from respot.core.placement import ControlSettings, MarketPolicy, candidates
from respot.core.pool_placement import PoolPlacementPolicy
from respot.core.pool_watch import PoolKey, Sighting, sightings
from respot.core.states import JobState
from respot.core.transfer import checkpoint_region
from respot.credentials.policy import secrets_problem
from respot.exceptions import DuplicateJobError, NotOwnerError
from respot.identity.verify import principal_matches
from respot.queue.budgets import BudgetAction, BudgetAlert, alert_message
from respot.queue.settings import mapped_team
from respot.spec.jobid import is_job_id
from respot.storage import layout
from respot.storage.carry import carry_checkpoint
from respot.wire.messages import CancelCommand, JobSubmission, stored_submission, submission_digest

log = logging.getLogger("respot.control")

CAS_ATTEMPTS = 8  # compare-and-set tries per event (JobTable.update backs off between them)
MAX_FOLLOW_UPS = 6


def utcnow() -> datetime:
    """Wall-clock time in UTC."""
    return datetime.now(UTC)


@dataclass
class Applied:
    """What applying one event did (for logs, tests and benchmarks)."""

    job_id: str
    event: str
    outcome: str
    state: str | None
    version: int | None
    effects: list[str] = field(default_factory=list)


class Notifications:
    """Sends a job's new timeline entries to the notifications queue; never raises.

    The queue is FIFO (name ending in .fifo): the message group is the job, so one job's
    notifications are handled one at a time and in order, and the deduplication id is the
    record version the entries were committed with, so a repeated send is dropped by SQS.
    """

    def __init__(self, queue_url: str | None, client: Any = None) -> None:
        self.queue_url = queue_url
        self.client = client

    def send(self, job: JobRecord, entries: list[TimelineEntry]) -> None:
        """Queue `entries` for the notifier (Slack); a failure is logged with the job id."""
        if not self.queue_url or not entries or self.client is None:
            return
        body = {
            "job_id": job.job_id,
            "state": job.state.value,
            "version": job.version,
            "entries": [e.model_dump(mode="json") for e in entries],
        }
        fifo: dict[str, str] = {}
        if self.queue_url.endswith(".fifo"):
            fifo = {
                "MessageGroupId": job.job_id,
                "MessageDeduplicationId": f"{job.job_id}-{job.version}",
            }
        try:
            self.client.send_message(QueueUrl=self.queue_url, MessageBody=json.dumps(body), **fifo)
        except Exception:  # a notification must never block or fail a transition
            log.exception("could not queue a notification for job %s", job.job_id)

    def budget_alert(self, alert: BudgetAlert, action: BudgetAction) -> bool:
        """Queue a budget alert for the notifier (the deployment's channel); never raises.

        True if queued (or no notifications queue is configured: nothing to retry); False if
        the queueing failed, so the alert stays pending and a later pass sends it again.
        Its own FIFO group; the deduplication id names the month, budget and threshold, so a
        repeated send within SQS's five minutes is dropped too (the ledger already claims
        each alert once: `respot.queue.budgets`)."""
        if not self.queue_url or self.client is None:
            return True
        fifo: dict[str, str] = {}
        if self.queue_url.endswith(".fifo"):
            digest = hashlib.sha256(alert.key.encode()).hexdigest()[:32]
            fifo = {
                "MessageGroupId": "budget-alerts",
                "MessageDeduplicationId": f"budget-{alert.month}-{digest}-{alert.threshold}",
            }
        try:
            self.client.send_message(
                QueueUrl=self.queue_url,
                MessageBody=json.dumps(alert_message(alert, action)),
                **fifo,
            )
        except Exception:  # an alert must never block or fail a pass
            log.exception(
                "could not queue the budget alert %s %d%%; a later pass sends it again",
                alert.key,
                alert.threshold,
            )
            return False
        return True


class ControlPlane:
    """Applies events to jobs and carries out what the decisions say."""

    def __init__(
        self,
        *,
        jobs: JobTable,
        capacity: Ec2Capacity,
        s3: Any,
        bucket: str,
        settings: ControlSettings,
        notifications: Notifications | None = None,
        market_policy: MarketPolicy | None = None,
        sweeps: SweepFeed | None = None,
        clock: Callable[[], datetime] = utcnow,
        pools: PoolTable | None = None,
        objects: JobObjects | None = None,
        admission: Admission | None = None,
        teams: PrincipalTeams | None = None,
        retries: LaunchRetries | None = None,
    ) -> None:
        self.jobs = jobs
        # The lifecycle's delayed looks (a paced launch's, when its token is due).
        self.retries = retries or LaunchRetries(None)
        # Teams from the submitters' IAM principal tags (respot.aws.teamtags); None: not read.
        self.teams = teams
        # With satellite regions: where each job's objects are, and the copies that move
        # them with the job (respot.aws.satellites); None: one region, one bucket.
        self.objects = objects
        # The satellites' instance role ids: their agents' messages are theirs to send too.
        self.satellite_role_ids: tuple[str, ...] = ()
        self.capacity = capacity
        self.s3 = s3
        self.bucket = bucket
        self.settings = settings
        self.notifications = notifications or Notifications(None)
        # With a pool table, jobs are placed across pools by what the account observed of
        # them (respot.core.pool_placement); an explicit market_policy wins (tests).
        self.pools = pools
        self._fixed_policy = market_policy
        self.market_policy = market_policy or DeadlinePolicy()
        self.sweeps = sweeps or SweepFeed(None)
        self.clock = clock
        # The team's queue (respot.control.admission): who is admitted when.
        self.admission = admission or Admission(
            jobs=jobs,
            ledger=QueueLedger(jobs.table_name, jobs.client),
            account=AccountUse(capacity.client, getattr(capacity, "quotas_client", None))
            if getattr(capacity, "client", None) is not None
            else None,
            default_instance_types=settings.default_instance_types,
            enabled=settings.admission,
            prices=dict(settings.on_demand_prices),
        )
        self._admitting = False
        self._admit_again = False

    @classmethod
    def from_config(
        cls,
        config: ControlPlaneConfig,
        *,
        session: Any = None,
        clients: dict[str, Any] | None = None,
        clock: Callable[[], datetime] = utcnow,
        endpoint_url: str | None = None,
    ) -> ControlPlane:
        """Build the control plane and its AWS clients from the Lambda configuration.

        `endpoint_url`: where the clients this makes for satellite regions go (the emulator
        locally; None on AWS)."""
        clients = dict(clients or {})
        if session is None:
            import boto3

            session = boto3.session.Session()
        from botocore.config import Config

        # Standard retries back off on throttling (EC2 RequestLimitExceeded, DynamoDB
        # ProvisionedThroughputExceeded) before an error reaches the lifecycle.
        retrying = Config(
            retries={"mode": "standard", "max_attempts": 5}, connect_timeout=5, read_timeout=30
        )
        for name in ("dynamodb", "ec2", "s3", "sqs", "service-quotas"):
            if name not in clients:
                clients[name] = session.client(name, config=retrying)
        home: dict[str, Any] = {
            "launch_template_id": config.launch_template_id,
            "launch_template_version": config.launch_template_version,
            "on_demand_prices": config.on_demand_prices,
            "deployment_name": config.deployment_name,
            "client": clients["ec2"],
            "quotas_client": clients["service-quotas"],
            # One bucket for the account, whichever region a launch goes to (aws.pacing).
            "pacer": LaunchPacer(config.table_name, clients["dynamodb"], config.launch_pacing),
        }
        settings = config.settings()

        def given_or_new(service: str) -> Any:  # made on first use (respot.aws.teamtags)
            return clients.get(service) or session.client(
                service, config=retrying, endpoint_url=endpoint_url
            )

        capacity: Ec2Capacity
        objects: JobObjects | None = None
        if config.satellite_regions:
            home_region = str(clients["ec2"].meta.region_name)

            def client_in(service: str, region: str) -> Any:
                if region == home_region and service in clients:
                    return clients[service]
                return session.client(
                    service, region_name=region, config=retrying, endpoint_url=endpoint_url
                )

            satellites = load_satellites(
                config.satellite_regions,
                config.satellite_parameter,
                lambda region: client_in("ssm", region),
            )
            settings = with_satellite_subnets(settings, satellites)
            capacity = RegionalCapacity(
                home_region=home_region,
                satellites={
                    region: Ec2Capacity(
                        **{
                            **home,
                            "launch_template_id": sat.launch_template_id,
                            "launch_template_version": "$Latest",
                            "client": client_in("ec2", region),
                            "quotas_client": None,
                        }
                    )
                    for region, sat in satellites.items()
                },
                **home,
            )
            objects = JobObjects(
                home_region=home_region,
                home_bucket=config.bucket,
                s3_in=lambda region: client_in("s3", region),
                satellites=satellites,
            )
        else:
            capacity = Ec2Capacity(**home)
        plane = cls(
            jobs=JobTable(config.table_name, clients["dynamodb"]),
            capacity=capacity,
            objects=objects,
            s3=clients["s3"],
            bucket=config.bucket,
            settings=settings,
            notifications=Notifications(config.notify_queue_url, clients["sqs"]),
            sweeps=SweepFeed(config.sweep_queue_url, clients["sqs"]),
            retries=LaunchRetries(config.launch_retry_queue_url, clients["sqs"]),
            clock=clock,
            pools=PoolTable(config.table_name, clients["dynamodb"]),
            admission=Admission(
                jobs=JobTable(config.table_name, clients["dynamodb"]),
                ledger=QueueLedger(config.table_name, clients["dynamodb"]),
                account=AccountUse(clients["ec2"], clients["service-quotas"]),
                default_instance_types=settings.default_instance_types,
                enabled=settings.admission,
                limits=config.queue_limits(),
                prices=dict(config.on_demand_prices),
            ),
            teams=PrincipalTeams(
                lambda: given_or_new("iam"),
                lambda: str(given_or_new("sts").get_caller_identity()["Account"]),
            ),
        )
        if config.satellite_regions:
            plane.satellite_role_ids = tuple(s.instance_role_id for s in satellites.values())
        return plane

    # ---- inputs ------------------------------------------------------------------------------

    def submit(self, submission: JobSubmission, *, refused: Sequence[str] = ()) -> Applied:
        """Record a submitted job (once), store its submission (once), then request capacity.

        Create-only, in this order: the record first (a conditional put that fails if the id
        exists), then `submission.json` (a conditional put that fails if the object exists),
        then the first launch. So no submission can replace another job's record or spec.
        A redelivery of the same submission is a no-op (it only completes a store that a
        crash interrupted); the same id with other content or from another owner raises
        `DuplicateJobError` (the handler dead-letters it with the reason).

        `refused`: problem lines the caller found that no launch can get past (the commands
        function's `respot.spec.reach` check): the job is recorded the same create-only way, but
        FAILED with them as its reason, and nothing is launched (`lifecycle.launches._submitted`).
        """
        job_id = submission.job_id
        refused = [*refused, *self._queue_problems(submission)]
        spec = submission.spec
        reads = [d.key for d in spec.data if d.bucket == self.bucket]
        if (why := secrets_problem(job_id, list(spec.secrets.values()), reads)) is not None:
            refused.append(why)
        hold = self._queue_on(read=True)
        team = self._tagged_team(submission.submitted_by, hold)
        event = Submitted(submission, tuple(refused), hold=hold, team=team)
        decision, record = self._commit(job_id, event)
        if decision.outcome == "duplicate":
            if record is None or record.submission_digest != submission_digest(submission):
                raise DuplicateJobError(_duplicate_reason(record, submission))
            self._store_submission(submission)  # a crash may have come between the two writes
            if spec.restore_from is not None and not refused:  # a crash may have cut the copy
                carry_checkpoint(self.s3, self.bucket, spec.restore_from, job_id)
            return Applied(job_id, "Submitted", "duplicate", record.state.value, record.version)
        self._store_submission(submission)
        if spec.restore_from is not None and not refused:
            # Before the first launch; a failure raises, and the redelivery copies again.
            carry_checkpoint(self.s3, self.bucket, spec.restore_from, job_id)
        applied = self._carry_out(job_id, event, decision, record, depth=0)
        if record is not None and record.state is JobState.HELD:
            self.admit("a job was submitted")
            after = self.jobs.get(job_id)
            if after is not None:
                applied.state, applied.version = after.state.value, after.version
        return applied

    def _tagged_team(self, submitter: str | None, hold: bool) -> str | None:
        """The submitter's IAM principal tag `respot:team` (respot.aws.teamtags), read only when
        the queue is on and the platform team's mapping does not name them (it wins)."""
        if self.teams is None or not submitter or not hold:
            return None
        if mapped_team(submitter, self.admission.limits_seen) is not None:
            return None
        return self.teams.team(submitter)

    def _queue_problems(self, submission: JobSubmission) -> list[str]:
        """A spec's `queue:` and `after:` against this deployment: a queue it does not name,
        a job that does not exist or is not the submitter's (each line names the fix)."""
        spec = submission.spec
        problems = []
        if spec.queue is not None:
            names = self.admission.queue_names()
            if spec.queue not in names:
                known = ", ".join(sorted(names)) or "none (the platform team names them)"
                problems.append(
                    f"queue: {spec.queue!r} is not a queue of this deployment; known: {known} "
                    "(`respot queue` lists them)"
                )
        if spec.restore_from is not None:
            problems.extend(self._restore_problems(submission))
        for name in spec.after:
            other = self.jobs.get(name)
            if other is None:
                problems.append(
                    f"after: job {name} does not exist; name a job id `respot ls` shows"
                )
            elif other.submission.submitted_by != submission.submitted_by:
                problems.append(
                    f"after: job {name} is not yours (it belongs to "
                    f"{other.submission.submitted_by or 'an unidentified submitter'}); a job may "
                    "only wait for its own submitter's jobs"
                )
        return problems

    def _restore_problems(self, submission: JobSubmission) -> list[str]:
        """`restore_from:` names a finished job of the same verified submitter, or the job
        is refused (its checkpoint is never copied)."""
        source_id = submission.spec.restore_from
        assert source_id is not None
        source = self.jobs.get(source_id)
        if source is None:
            return [f"restore_from: job {source_id} does not exist; name one `respot ls` shows"]
        owner = source.submission.submitted_by
        if submission.submitted_by is None or owner != submission.submitted_by:
            return [
                f"restore_from: job {source_id} is not yours (it belongs to "
                f"{owner or 'an unidentified submitter'}); a job may "
                "only start from its own submitter's checkpoints"
            ]
        if not source.state.is_terminal():
            return [
                f"restore_from: job {source_id} is still {source.state.value}; its checkpoint "
                "is not final until it stops (`respot cancel`)"
            ]
        return []

    def admit(self, reason: str) -> PassResult | None:
        """Run admission passes until none is asked for during one (at most three).

        A pass applies events to other jobs, which may end one and ask for another pass: that
        request is folded into the running loop instead of nesting passes."""
        if self._admitting:
            self._admit_again = True
            return None
        self._admitting = True
        result = None
        try:
            for _ in range(3):
                self._admit_again = False
                try:
                    result = self.admission.run(self._apply_admission, self.clock())
                except Exception:  # the tick runs the next pass
                    log.exception("admission pass (%s) failed", reason)
                    return None
                log.info(
                    "admission (%s): admitted %s, refused %s, released %s",
                    reason,
                    result.admitted,
                    [j for j, _ in result.refused],
                    result.released,
                )
                # Claimed in the ledger by this pass's write; confirmed once queued, else left
                # pending for a later pass to send again (respot.queue.budgets).
                queued = [
                    alert
                    for alert in result.alerts
                    if self.notifications.budget_alert(alert, result.budget_action)
                ]
                if queued:
                    try:
                        if not self.admission.ledger.confirm_alerts(queued):
                            log.warning("budget alerts queued but not confirmed: sent again")
                    except Exception:
                        log.exception("could not confirm the budget alerts queued")
                if not self._admit_again:
                    break
        finally:
            self._admitting = False
        return result

    def set_queue_settings(self, command: QueueSettingsCommand, *, admins: tuple[str, ...]) -> None:
        """An admin's new queue settings: stored in the ledger, then a pass under them.

        Only a principal in `admins` (the stack's admin_principal_arns; a role ARN covers its
        sessions) may; anyone else gets `NotOwnerError` naming the setting that grants it."""
        by = command.requested_by
        if by is None or not any(principal_matches(by, a) for a in admins):
            raise NotOwnerError(
                f"{by or 'an unidentified caller'} may not change the queue's settings: only "
                "an admin principal may (stack setting admin_principal_arns)"
            )
        self.admission.set_settings(command.settings)
        log.info("queue settings changed by %s", by, extra={"settings": command.settings})
        self.admit("an admin changed the queue's settings")

    def _queue_on(self, *, read: bool = False) -> bool:
        """Is the team's queue on (the stack's setting, or an admin's in the ledger)?

        `read`: ask the ledger now (one read); else what the last read said. A failed read
        falls back to the stack's setting."""
        if read:
            try:
                return self.admission.enabled_now()
            except Exception:
                log.warning("could not read the queue ledger; using the stack's queue setting")
                return self.settings.admission
        return self.admission.enabled_seen

    def _apply_admission(self, job_id: str, event: JobEvent) -> None:
        try:
            self.apply(job_id, event)
        except Exception:  # one job's failure must not stop the others being admitted
            log.exception("admission: applying %s to job %s failed", type(event).__name__, job_id)

    def _store_submission(self, submission: JobSubmission) -> None:
        """Write `jobs/<id>/submission.json` if it does not exist (S3 `If-None-Match: *`)."""
        try:
            self.s3.put_object(
                Bucket=self.bucket,
                Key=layout.submission_key(submission.job_id),
                Body=stored_submission(submission).encode(),
                ContentType="application/json",
                IfNoneMatch="*",
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] not in ("PreconditionFailed", "412"):
                raise
            log.info("submission of job %s is already stored", submission.job_id)

    def cancel(self, command: CancelCommand, *, admins: tuple[str, ...] = ()) -> Applied:
        """Cancel a job and terminate its instances: only its owner or an admin may.

        The owner is the job's `submitted_by`, the caller STS verified at submission; the
        requester is the caller STS verified for this cancel. `admins` are principal ARNs
        (a role ARN covers its sessions) that may cancel any job.
        """
        record = self.jobs.get(command.job_id)
        if record is not None:
            owner = record.submission.submitted_by
            by = command.requested_by
            allowed = by == owner or (
                by is not None and any(principal_matches(by, a) for a in admins)
            )
            if not allowed:
                raise NotOwnerError(
                    f"{by or 'an unidentified caller'} may not cancel job {command.job_id}: "
                    f"it belongs to {owner or 'an unidentified submitter'}; only the owner or "
                    "an admin principal (stack setting admin_principal_arns) can cancel it"
                )
        return self.apply(command.job_id, CancelRequested(command))

    def instance_event(
        self, event: InstanceUp | InterruptionNotice | InstanceDown
    ) -> Applied | None:
        """Apply an EC2 event to the job that owns the instance; None if respot does not own it.

        The owner comes from the table's instance item, written right after each launch: an
        event for an instance of someone else costs one DynamoDB read and no EC2 call (the
        account's EC2 request rate is shared). An event that overtakes that write is
        dropped; the launch result and the agent's own reports carry the same news.
        """
        owner = self.jobs.instance_owner(event.instance_id)
        if owner is None:
            log.info(
                "ignoring %s for %s: not a respot instance", type(event).__name__, event.instance_id
            )
            return None
        job_id, attempt = owner
        if not is_job_id(job_id):
            log.warning("ignoring %s for %s: invalid job id tag", type(event).__name__, job_id)
            return None
        if isinstance(event, InstanceDown) and event.reason is None:
            event = self._with_state_reason(event)
        return self.apply(job_id, replace(event, attempt=attempt))

    def _with_state_reason(self, event: InstanceDown) -> InstanceDown:
        """`event` with the instance's StateReason (the state-change event has none): it tells
        a launch EC2 ended for capacity, a quota or KMS from a broken boot, and an instance its
        own agent shut down from one that vanished. Best effort: unread, the event is applied
        as before (one DescribeInstances per respot instance going down)."""
        try:
            found = self.capacity.state_reason(event.instance_id)
        except Exception:  # the reason only sharpens the decision
            log.warning("could not read the state reason of %s", event.instance_id, exc_info=True)
            return event
        if found is None:
            return event
        return replace(event, reason=found[0], reason_message=found[1])

    def reconcile(self) -> list[Applied]:
        """The scheduled look at every live job, then at instances no live job owns."""
        results = []
        for job_id in list(self.jobs.live_job_ids()):
            try:
                results.append(self.apply(job_id, ReconcileTick(self.clock())))
            except Exception:  # one broken job must not stop the others being looked at
                log.exception("reconcile of job %s failed", job_id)
        try:
            self.terminate_orphans()
        except Exception:
            log.exception("orphan clean-up failed; the next tick tries again")
        # A pass whenever the queue is on, a job is held, or a budget is set: budgets count
        # the spend, alert and (`hard`) stop with the queue off too. The read that says
        # whether the queue is on also gives the limits in force, so without a budget (and
        # the queue off, nothing held) the tick costs that one read and no pass.
        if (
            self._queue_on(read=True)
            or self.admission.limits_seen.has_budgets
            or any(r.state == JobState.HELD.value for r in results)
        ):
            self.admit("the reconcile tick")
        return results

    def terminate_orphans(self) -> list[str]:
        """Terminate this deployment's instances that no open attempt of a live job owns.

        The forgotten GPU that bills all weekend: an instance of a finished or unknown job,
        of an attempt that already ended, or a second instance of one attempt. Instances
        younger than the launch timeout are left alone: their launch may not be recorded yet.
        """
        now = self.clock()
        orphans: list[str] = []
        for instance in self.capacity.managed_instances():
            instance_id = instance["InstanceId"]
            launched = instance.get("LaunchTime")
            if isinstance(launched, datetime) and now - launched < self.settings.launch_timeout:
                continue
            tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
            job_id = tags.get(JOB_TAG)
            attempt = tags.get(ATTEMPT_TAG, "")
            record = self.jobs.get(job_id) if job_id else None
            if record is not None and not record.state.is_terminal() and attempt.isdigit():
                owner = record.attempt(int(attempt))
                if (
                    owner is not None
                    and owner.end is None
                    and owner.instance_id
                    in (
                        None,
                        instance_id,
                    )
                ):
                    continue
            orphans.append(instance_id)
        if orphans:
            done = self.capacity.terminate(orphans)
            log.warning("terminated orphaned instances %s", done, extra={"orphans": done})
        return orphans

    # ---- the loop ----------------------------------------------------------------------------

    def apply(self, job_id: str, event: JobEvent, *, depth: int = 0) -> Applied:
        """Decide, write (compare-and-set), act, notify, follow up."""
        if self.objects is not None:
            self._results_before_the_end(job_id, event)
        decision, record = self._commit(job_id, event)
        return self._carry_out(job_id, event, decision, record, depth=depth)

    def _carry_out(
        self,
        job_id: str,
        event: JobEvent,
        decision: Decision,
        record: JobRecord | None,
        *,
        depth: int,
    ) -> Applied:
        """Log, notify, run the effects and follow up on a decision that is already written."""
        applied = Applied(
            job_id=job_id,
            event=type(event).__name__,
            outcome=decision.outcome,
            state=record.state.value if record else None,
            version=record.version if record else None,
            effects=[type(e).__name__ for e in decision.effects],
        )
        log.info(
            "job %s: %s -> %s (%s)",
            job_id,
            applied.event,
            applied.state,
            applied.outcome,
            extra={"job_id": job_id, "outcome": applied.outcome},
        )
        if record is not None and decision.notes:
            self.notifications.send(record, decision.notes)
        self.sweeps.offer(record, event)
        for effect in decision.effects:
            self._run(job_id, effect, depth, record)
        if self.objects is not None and record is not None:
            self._objects_after(event, decision, record)
        if (
            decision.record is not None
            and record is not None
            and record.state.is_terminal()
            and (record.spec.after or record.spec.queue or self._queue_on(read=True))
        ):
            self.admit(f"job {job_id} ended")  # its lease frees room, its dependents may start
        elif (
            decision.record is not None
            and record is not None
            and record.state is JobState.HELD
            and any(note.kind == "requeued" for note in decision.notes)
        ):
            # A preempted job stopped: its lease frees the room the preemptor waits for now,
            # not at the next tick.
            self.admit(f"job {job_id} was preempted and stopped")
        if decision.follow_up is not None and depth < MAX_FOLLOW_UPS:
            after = self.apply(job_id, decision.follow_up, depth=depth + 1)
            if after.version is not None:
                # Report where the job ended up, not the step in between (e.g. INTERRUPTED).
                applied.state, applied.version = after.state, after.version
                applied.effects.extend(after.effects)
        return applied

    def _commit(self, job_id: str, event: JobEvent) -> tuple[Decision, JobRecord | None]:
        decisions: list[Decision] = []
        seen: list[Sighting] = []

        def change(job: JobRecord | None) -> JobRecord | None:
            now = self.clock()
            decision = decide(
                job,
                event,
                now=now,
                settings=self.settings,
                market_policy=self._policy_for(job, event),
            )
            decisions[:] = [decision]  # the decision of the read that was (or was not) written
            seen[:] = sightings(job, event, now, self.settings) if self.pools else []
            if decision.record is not None:
                decision.record.updated_at = self.clock()
            return decision.record

        read, written = self.jobs.update(job_id, change, attempts=CAS_ATTEMPTS)
        self._record_sightings(job_id, seen)
        return decisions[0], written if written is not None else read

    def _policy_for(self, job: JobRecord | None, event: JobEvent) -> MarketPolicy:
        """The market policy for one decision: across pools, from their stored histories."""
        if self._fixed_policy is not None or self.pools is None or job is None:
            return self.market_policy
        if not isinstance(event, PlaceNow | CapacityUnavailable | ReconcileTick):
            return self.market_policy  # the event places nothing
        keys = [PoolKey.of(p) for p in candidates(job, Market.SPOT, self.settings)]
        return PoolPlacementPolicy(self.pools.load(keys))

    def _record_sightings(self, job_id: str, seen: list[Sighting]) -> None:
        assert self.pools is not None or not seen
        for sighting in seen:
            try:
                self.pools.record(sighting)  # type: ignore[union-attr]
            except Exception:  # an observation must never block or fail a transition
                log.exception("job %s: could not record %s", job_id, sighting)

    def _run(self, job_id: str, effect: Effect, depth: int, record: JobRecord | None) -> None:
        match effect:
            case LaunchInstance():
                if self.objects is not None and record is not None:
                    # The job's objects go first: the agent there restores from its region.
                    self._follow(record, effect.placement.availability_zone)
                result = self.capacity.launch(effect)
                if isinstance(result, CapacityLaunched):
                    self.jobs.link_instance(result.instance_id, job_id, effect.attempt)
                self.apply(job_id, result, depth=depth + 1)
            case TerminateInstances():
                done = self.capacity.terminate(effect.instance_ids)
                log.info("job %s: terminated %s (%s)", job_id, done, effect.reason)
            case ReleaseHandoff():
                self._release_handoff(effect, record)
            case LookAgainLater():
                self.retries.send(effect)
            case StopAttempt():
                body: dict[str, object] = {
                    "notice": "stop",
                    "reason": effect.reason,
                    "at": self.clock().isoformat(),
                }
                if effect.hold_seconds is not None:
                    body["hold_seconds"] = effect.hold_seconds
                self.s3.put_object(
                    Bucket=self._bucket_of(record, effect.attempt),
                    Key=layout.control_key(effect.job_id, effect.attempt),
                    Body=json.dumps(body).encode(),
                    ContentType="application/json",
                )

    def _release_handoff(self, effect: ReleaseHandoff, record: JobRecord | None = None) -> None:
        bucket = self._bucket_of(record, effect.attempt)
        key = layout.handoff_key(effect.job_id, effect.attempt)
        try:
            self.s3.head_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            if exc.response["Error"]["Code"] not in ("404", "NoSuchKey", "NotFound"):
                raise
            body = {"attempt": effect.attempt, "by": "control-plane", "reason": "instance gone"}
            self.s3.put_object(Bucket=bucket, Key=key, Body=json.dumps(body).encode())
        # else: the agent wrote it after its last checkpoint
        if self.objects is not None and record is not None:
            self._hand_over(record, effect.attempt)

    # ---- satellite regions: the job's objects follow it ----------------------------------------

    def _bucket_of(self, record: JobRecord | None, attempt: int) -> str:
        """The bucket attempt `attempt`'s agent reads and writes (its region's)."""
        att = record.attempt(attempt) if record is not None else None
        if self.objects is None or att is None:
            return self.bucket
        return self.objects.bucket_for_zone(att.placement.availability_zone)[1]

    def _follow(self, record: JobRecord, availability_zone: str) -> None:
        """Before a launch in `availability_zone`: the job's objects into that region."""
        assert self.objects is not None
        target, _ = self.objects.bucket_for_zone(availability_zone)
        source = checkpoint_region(record, default=self.objects.home_region)
        self.objects.follow(record.job_id, source, target)

    def _objects_after(self, event: JobEvent, decision: Decision, record: JobRecord) -> None:
        """Satellite regions: the copies an applied event calls for.

        An attempt's agent that stopped (its notice checkpoint and handoff marker are written
        before it says so) hands over to the job's current attempt in another region; a job
        that ended brings its results home.
        """
        if (
            isinstance(event, AgentReport)
            and event.message.body.kind in ("preempted", "failed")
            and decision.outcome != "duplicate"
        ):
            self._hand_over(record, event.message.attempt)
        if record.state.is_terminal() and decision.record is not None:
            self._bring_results_home(record)

    def _results_before_the_end(self, job_id: str, event: JobEvent) -> None:
        """An agent in a satellite region says its session ended: its results come home
        *before* the job is written as ended, so whoever sees it ended finds its outputs in the
        home bucket (the copy after the write, `_objects_after`, would race a waiting client).
        The copy is idempotent; a report that turns out a duplicate only re-lists."""
        assert self.objects is not None
        if not isinstance(event, AgentReport) or event.message.body.kind not in (
            "completed",
            "failed",
        ):
            return
        record = self.jobs.get(job_id)
        ended = record.attempt(event.message.attempt) if record is not None else None
        if ended is None:
            return
        region, _ = self.objects.bucket_for_zone(ended.placement.availability_zone)
        if region != self.objects.home_region:
            self.objects.bring_home(job_id, region)

    def _bring_results_home(self, record: JobRecord) -> None:
        """A job ended: what its attempts in satellite regions left comes to the home bucket."""
        assert self.objects is not None
        regions = {
            self.objects.bucket_for_zone(a.placement.availability_zone)[0] for a in record.attempts
        }
        for region in sorted(regions - {self.objects.home_region}):
            self.objects.bring_home(record.job_id, region)

    def _hand_over(self, record: JobRecord, attempt: int) -> None:
        """An attempt stopped (its agent said so) or its instance is gone: its final checkpoint
        and handoff marker follow the job's current attempt if that runs in another region, and
        its results come home."""
        assert self.objects is not None
        ended = record.attempt(attempt)
        if ended is None:
            return
        source, _ = self.objects.bucket_for_zone(ended.placement.availability_zone)
        current = record.current
        if current is not None and current.number != attempt:
            target, _ = self.objects.bucket_for_zone(current.placement.availability_zone)
            self.objects.follow(record.job_id, source, target)
        self.objects.bring_home(record.job_id, source)


def _duplicate_reason(record: JobRecord | None, submission: JobSubmission) -> str:
    job_id = submission.job_id
    if record is None:
        return f"job id {job_id} is taken; submit again with a new id"
    owner = record.submission.submitted_by
    if owner != submission.submitted_by:
        return (
            f"job id {job_id} already belongs to {owner or 'another submitter'}; "
            f"{submission.submitted_by or 'this submitter'} cannot replace it. Submit with a new id"
        )
    return (
        f"job id {job_id} already exists with a different submission; "
        "a job is never replaced, submit with a new id (respot picks one if you give none)"
    )
