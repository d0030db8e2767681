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

This module is the agent: the instance's identity, the AWS clients, stop requests and notices;
`attempt` is the order of the steps, `prepare` (1-4), `trainloop` (5-6) and `endings` (7) carry
them out over the state in `attemptstate`. Each step has its own room: `imds`, `workspace` (1-2),
`environment` and `launch` (the job's Python or image), `warmstart` (3 and the notice hold),
`handoff` (3: the successor's bounded wait),
`sessions` (the session process's launcher and launch file), `process` (the child),
`uploads` (checkpoints), `progress` (reports and heartbeats), `notices` (the IMDS poller and
the deadlines a notice sets), `telemetry`, `scalars`, `logship`, `messenger`.
"""

from __future__ import annotations

import logging
import queue
import re
import time
import traceback
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from respot.agent.attempt import AttemptRun
from respot.agent.attemptstate import LOG_TAIL_LINES, AgentResult, Outcome, _LogTail
from respot.agent.config import AgentConfig
from respot.agent.exceptions import AgentError
from respot.agent.imds import ImdsClient
from respot.agent.messenger import AgentMessenger
from respot.agent.notices import (
    InterruptionNotice,
    NoticePoller,
    RebalanceNotice,
    StopRequest,
    parse_stop_request,
    stop_notice,
)
from respot.agent.process import AttemptDirs
from respot.agent.regional import RegionalClients
from respot.spec.jobid import InvalidJobIdError, check_job_id
from respot.storage import layout
from respot.wire.messages import AgentFailed

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sqs import SQSClient

__all__ = ["Agent", "AgentResult", "Outcome", "queue_region_of"]

logger = logging.getLogger("respot.agent")

FINAL_FLUSH_SECONDS = 120.0


_QUEUE_HOST = re.compile(r"^https://sqs\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?/")


def queue_region_of(queue_url: str) -> str | None:
    """The region in an SQS queue URL (`https://sqs.us-east-1.amazonaws.com/...`), or None."""
    match = _QUEUE_HOST.match(queue_url)
    return match.group(1) if match else None


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
        # The instance role's own S3 client: data buckets. `s3` holds the job's
        # credentials when the deployment vends them (respot.credentials), else it is this.
        self._instance_s3: S3Client | None = s3
        self._job: Any = None  # the boto3 session with the job's credentials, if vended
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
    def instance_s3(self) -> S3Client:
        """S3 with the instance role: the data buckets, not jobs/ nor wheelhouse/."""
        assert self._instance_s3 is not None, "clients are made once the region is known"
        return self._instance_s3

    @property
    def sqs(self) -> SQSClient:
        assert self._sqs is not None, "clients are made once the region is known"
        return self._sqs

    def _make_clients(self, region: str, job_id: str, instance_id: str) -> None:
        """S3 and SQS clients in the configured region, else the instance's own; S3 for the
        job's objects with the job's own credentials where the deployment vends them."""
        self.regional.default_region = self.config.region or region
        if self._s3 is not None and self._sqs is not None:
            return
        import boto3
        from botocore.config import Config

        retry = Config(retries={"mode": "standard", "max_attempts": 5})
        session = boto3.session.Session(region_name=self.config.region or region)
        url = self.config.endpoint_url
        self._instance_s3 = session.client("s3", endpoint_url=url, config=retry)
        if self.config.credentials_function is not None and self._s3 is None:
            self._job = self._job_session(session, job_id, instance_id)
            self._s3 = self._job.client("s3", endpoint_url=url, config=retry)
        self._s3 = self._s3 or self._instance_s3
        # The agent queue is in the home region, which an instance in a satellite region is
        # not in (docs/deploy.md, "Extra regions"): its client goes to the queue's region.
        queue_region = self.config.queue_region or queue_region_of(self.config.agent_queue_url)
        self._sqs = self._sqs or session.client(
            "sqs", endpoint_url=url, config=retry, region_name=queue_region or session.region_name
        )
        if self.config.log_group and self.logs is None:
            self.logs = session.client("logs", endpoint_url=url, config=retry)

    def secrets_in(self, region: str | None) -> Any:
        """A Secrets Manager client in `region`: the job's credentials where they are vended
        (its session policy names the job's own secrets), else the instance role's."""
        if self._job is None:
            return self.regional("secretsmanager", region)
        return self._job.client(
            "secretsmanager",
            region_name=region or self.regional.default_region,
            endpoint_url=self.config.endpoint_url,
        )

    def _job_session(self, instance: Any, job_id: str, instance_id: str) -> Any:
        """A session holding this job's credentials, refreshed before they expire."""
        from respot.credentials.vending import CredentialsSource, job_session, lambda_invoker
        from respot.identity.proofs import sts_url

        assert self.config.credentials_function is not None
        home = self.config.queue_region or queue_region_of(self.config.agent_queue_url)
        home = home or instance.region_name
        url = self.config.endpoint_url
        source = CredentialsSource(
            function=self.config.credentials_function,
            job_id=job_id,
            instance_id=instance_id,
            region=home,
            sts_url=sts_url(home, url),
            instance_credentials=instance.get_credentials(),
            invoke=lambda_invoker(instance.client("lambda", endpoint_url=url, region_name=home)),
        )
        return job_session(source, instance.region_name)

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
        self._make_clients(identity.region, job_id, identity.instance_id)
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
        run = AttemptRun(
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
