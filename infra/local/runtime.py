"""The whole of respot on one machine: emulator, handlers, spot market and instances.

    with LocalRuntime(RuntimeOptions(time_scale=1/30)) as rt:
        job = rt.run(TrainingEnvVar(...))
        job.wait()

The handlers are the real `lambdas/` modules with a control plane built on clients pointed at
the moto server; the market hooks the control plane's EC2 client; instances are processes
running the real agent. Simulated durations (EC2 boot, the two-minute notice, the one-minute
reconcile schedule, heartbeats) are multiplied by `time_scale` to get real ones.
Slack is a local Web API server (`rt.slack`, infra/local/slack.py) whose bot token the runtime
puts in the deployment's Slack secret, as a platform team would; the `notify` handler posts
each job's thread there through slack_sdk.
"""

from __future__ import annotations

import json
import logging
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import lambdas._activity as activity_lambda
import lambdas._commands as lambda_commands
import lambdas._runtime as lambda_runtime
import lambdas.credentials as credentials_lambda
import lambdas.notify as notify_lambda
import lambdas.sweep as sweep_lambda
from infra.local import cloud
from infra.local.clock import Timers, TimeScale
from infra.local.dispatcher import Dispatcher
from infra.local.fis import FaultInjection
from infra.local.fleet import FleetTiming, InstanceAgent, InstanceFleet
from infra.local.iam import LocalIam, agent_asset_location, synthesized_template
from infra.local.interrupts import Interrupted, JobInterrupts
from infra.local.invoke import agent_functions
from infra.local.market import ChaosSchedule, SpotMarket, Trace
from infra.local.poller import TerminationPoller
from infra.local.satellite import LocalSatellite, provision_satellite, satellite_env
from infra.local.slack import LocalSlack
from infra.settings import DeploySettings
from infra.wiring import WIRING, agent_function_name
from respot.aws.jobs import JobTable
from respot.aws.satellites import RegionalCapacity
from respot.client.deployment import Deployment
from respot.client.handle import JobHandle, run
from respot.control import activity
from respot.control import config as cfg
from respot.control.config import ControlPlaneConfig, NotifyConfig
from respot.control.service import ControlPlane
from respot.core.job import JobRecord
from respot.credentials.broker import Broker
from respot.credentials.policy import ENV_CREDENTIALS_FUNCTION
from respot.identity.proofs import DEFAULT_MAX_AGE, sts_url
from respot.identity.verify import DynamoProofLedger, Verifier
from respot.notify import SlackNotifier
from respot.notify.sweep_thread import SlackSweepNews
from respot.notify.token import SlackTokenSource
from respot.spec.training import TrainingEnvVar
from respot.sweep.client import SweepHandle

log = logging.getLogger("respot.local")

AGENT_START_SECONDS = 3.0  # real: a Python process, the job's imports, the restore
HEARTBEAT_SECONDS = 60.0  # simulated; the agent's default on EC2
IMDS_POLL_SECONDS = 2.0
HANDOFF_WAIT_SECONDS = 150.0
# The credentials function's name in the synthesized template (stack "Respot").
CREDENTIALS_FUNCTION_NAME = agent_function_name("Respot", "credentials")


@dataclass
class RuntimeOptions:
    """How the local runtime behaves."""

    time_scale: float = 1.0 / 30.0  # real seconds per simulated second
    timing: FleetTiming = field(default_factory=FleetTiming)
    chaos: ChaosSchedule | None = None
    traces: list[Trace] = field(default_factory=list)
    trace_offset_ticks: int = 0
    # "<instance type>/<zone>" -> the trace of that spot pool (the others take `traces` in turn)
    pool_traces: dict[str, Trace] = field(default_factory=dict)
    instance_types: tuple[str, ...] = ("g5.xlarge", "g4dn.xlarge")
    # The stack's allowed_instance_types (None: instance_types, as the stack's default; ():
    # no restriction, so a job may name any type and EC2 itself judges it).
    allowed_instance_types: tuple[str, ...] | None = None
    availability_zones: int = 2
    work_root: Path | None = None
    keep_work_root: bool = False
    pollers_per_queue: int = 1
    heartbeat_timeout_seconds: float = 600.0  # simulated
    boot_timeout_seconds: float = 1200.0
    launch_timeout_seconds: float = 180.0
    agent_env: dict[str, str] = field(default_factory=dict)
    # Resource name prefix. moto keeps one state per process, so two runtimes in one process
    # (as in the tests) need different prefixes; None picks a fresh one.
    prefix: str | None = None
    # Real seconds the deadline policy assumes an instance change costs (None: EC2's scaled
    # fulfilment and boot plus AGENT_START_SECONDS).
    changeover_seconds: float | None = None
    log_level: str = "WARNING"  # of the handlers' logs (Powertools JSON on stdout)
    duplicate_events: bool = False  # put every EC2 event on the bus twice
    reorder_events: bool = False  # delay EC2 events by a random fraction of a second
    # The moto URL -> the URL every client uses (e.g. a counting proxy in front of moto).
    endpoint_proxy: Callable[[str], str] | None = None
    # False: the "wait for termination and poll" baseline (benchmarks only): no interruption
    # or state-change rule reaches a handler, IMDS shows no notice, and a poller looks for
    # gone instances every `poll_every_seconds` (simulated) instead. See infra/local/poller.py.
    react_to_notices: bool = True
    poll_every_seconds: float = 20.0
    # Plays every instance's agent in-process instead of one process each (scale benchmark).
    instance_agent: InstanceAgent | None = None
    slack: bool = True  # run the local Slack and put its bot token in the Slack token parameter
    slack_channel: str = "#ml-training"  # the deployment's channel (RESPOT_SLACK_CHANNEL)
    notify_progress_seconds: float = 600.0  # simulated; at most one progress reply this often
    # IAM enforced with the stack's own policies (infra/local/iam.py): each handler runs with
    # its function role's credentials, each instance with the instance role's, `run()` with
    # the researcher policy's.
    iam: bool = False
    # Real seconds a command's identity proof stays valid (None: respot's default, 5 minutes).
    # The scale benchmark raises it: 1,000 submissions published at once wait behind a loaded
    # emulator's 4 readers longer than that; on AWS the mapping scales out and drains them.
    proof_max_age_seconds: float | None = None
    # Satellite regions (infra/local/satellite.py, as `-c extra_regions=...` deploys them):
    # their subnets are pools too, instances there boot that region's user data and write
    # to its bucket, and their EC2 events reach the home bus.
    extra_regions: tuple[str, ...] = ()
    # The stack setting `idle_gpus` as the functions get it (RESPOT_IDLE_GPUS; real minutes,
    # not scaled: the control plane's clock is the real one). None: respot's defaults.
    idle_gpus: dict[str, Any] | None = None


class LocalRuntime:
    """Starts and stops every part of the local runtime."""

    def __init__(self, options: RuntimeOptions | None = None) -> None:
        self.options = options or RuntimeOptions()
        if self.options.iam and self.options.extra_regions:
            # The policies are those of a stack synthesized without extra_regions, and only
            # the home instance role is emulated: every function would fail at cold start
            # reading the satellite parameter (403), and a satellite instance would write its
            # region's bucket with the home role. Refused before anything starts.
            raise ValueError(
                "RuntimeOptions: iam=True does not cover extra_regions yet (the emulated "
                "policies are the home stack's without satellites; satellite instance roles "
                "are not emulated); drop iam or extra_regions"
            )
        self.scale = TimeScale(self.options.time_scale)
        self.server = cloud.MotoServer()
        self.deployment: cloud.LocalDeployment | None = None
        self.dispatcher: Dispatcher | None = None
        self.fleet: InstanceFleet | None = None
        self.market: SpotMarket | None = None
        self.timers: Timers | None = None
        self.poller: TerminationPoller | None = None
        self.fis: FaultInjection | None = None
        self._work_root: Path | None = None
        self._owns_work_root = False
        self._control_plane: ControlPlane | None = None
        self.slack: LocalSlack | None = None
        self.iam: LocalIam | None = None
        self._invoke: Any = None  # Lambda Invoke of the agents' functions (IAM on)
        self.satellites: list[LocalSatellite] = []

    # ---- life ------------------------------------------------------------------------------

    def start(self) -> LocalRuntime:
        """Start the emulator, create the resources, start dispatching."""
        opts = self.options
        started = time.monotonic()
        logging.getLogger("respot").setLevel(opts.log_level)
        endpoint = self.server.start()
        if opts.endpoint_proxy is not None:
            endpoint = opts.endpoint_proxy(endpoint)
        template = synthesized_template() if opts.iam else None
        if opts.work_root is None:
            self._work_root = Path(tempfile.mkdtemp(prefix="respot-local-"))
            self._owns_work_root = not opts.keep_work_root
        else:
            self._work_root = opts.work_root
            self._work_root.mkdir(parents=True, exist_ok=True)
        self.deployment = cloud.provision(
            endpoint,
            prefix=opts.prefix or f"respot-{secrets.token_hex(3)}",
            instance_types=opts.instance_types,
            availability_zones=opts.availability_zones,
            visibility_timeout_seconds=max(int(self.scale.real(30)), 2),
            # Instances boot the launch template's user data on this AMI stand-in; the scale
            # benchmark's in-process agents boot nothing.
            image_dir=None if opts.instance_agent is not None else self._work_root / "ami",
            # With IAM on, the agent package goes where the instance role may read it.
            agent_asset=agent_asset_location(template, cloud.REGION) if template else None,
            allowed_instance_types=opts.allowed_instance_types,
            # The name the stack gives its functions (the runtime owns its emulator): the
            # synthesized policies grant reading exactly that parameter.
            slack_token_parameter=DeploySettings().slack_token_parameter_name,
        )
        self.satellites = [provision_satellite(self.deployment, r) for r in opts.extra_regions]
        self.timers = Timers()
        self.fleet = InstanceFleet(
            self.deployment,
            scale=self.scale,
            timers=self.timers,
            work_root=self._work_root / "instances",
            timing=opts.timing,
            duplicate_events=opts.duplicate_events,
            reorder_events=opts.reorder_events,
            imds_notices=opts.react_to_notices,
            agent=opts.instance_agent,
            agent_env={
                "RESPOT_HEARTBEAT_SECONDS": f"{max(self.scale.real(HEARTBEAT_SECONDS), 0.5):.3f}",
                "RESPOT_IMDS_POLL_SECONDS": f"{max(self.scale.real(IMDS_POLL_SECONDS), 0.2):.3f}",
                "RESPOT_HANDOFF_WAIT_SECONDS": f"{self.scale.real(HANDOFF_WAIT_SECONDS):.3f}",
                **opts.agent_env,
            },
        )
        self.market = SpotMarket(
            self.fleet,
            scale=self.scale,
            timers=self.timers,
            traces=opts.traces,
            chaos=opts.chaos,
            trace_offset_ticks=opts.trace_offset_ticks,
            pool_traces=opts.pool_traces,
        )
        self.market.extra_subnets = [s for sat in self.satellites for s in sat.subnets]
        if self.deployment.fis_template_id:
            self.fis = FaultInjection(
                fis=self.deployment.client("fis"),
                region=self.deployment.region,
                template_id=self.deployment.fis_template_id,
                fleet=self.fleet,
                scale=self.scale,
                timers=self.timers,
            ).start()
        if opts.slack:
            self.slack = LocalSlack().start()
            self.slack.add_channel(opts.slack_channel)
            # What the platform team does (docs/deploy.md): the token as a SecureString.
            self.deployment.client("ssm").put_parameter(
                Name=self.deployment.slack_token_parameter,
                Type="SecureString",
                Value=self.slack.token,
                Overwrite=True,
            )
        if opts.iam:
            assert template is not None
            self.iam = LocalIam(self.deployment, template).create()
            self.fleet.credentials = self.iam.instance_credentials
            # Agents get their job's credentials from the credentials function, as on AWS
            # (the synthesized template's function name; respot.credentials.vending).
            self.fleet.agent_env[ENV_CREDENTIALS_FUNCTION] = CREDENTIALS_FUNCTION_NAME
            credentials_lambda.install(self._build_broker)
        lambda_runtime.install(
            self._build_control_plane, self._dead_letter, per_function=self.iam is not None
        )
        # Identity proofs run for real: executed against the emulator's STS, as on AWS; used
        # proofs go to the table through the submitting function's own client.
        lambda_commands.install_verifier(
            Verifier(
                sts_url=sts_url(self.deployment.region, endpoint),
                region=self.deployment.region,
                ledger=None,
                max_age=DEFAULT_MAX_AGE
                if opts.proof_max_age_seconds is None
                else timedelta(seconds=opts.proof_max_age_seconds),
            )
        )
        wiring = WIRING
        if not opts.react_to_notices:
            ignored = {"spot-interruption", "instance-state"}
            wiring = replace(WIRING, rules=tuple(r for r in WIRING.rules if r.name not in ignored))
        notify_lambda.install(self._build_notifier)
        sweep_lambda.install(self._build_sweep_news)
        activity_lambda.install(self._build_activity_switch)
        self.dispatcher = Dispatcher(
            self.deployment,
            wiring=wiring,
            time_scale=self.options.time_scale,
            pollers_per_queue=opts.pollers_per_queue,
        )
        if self.iam is not None:
            self.iam.enforce()
            self._invoke = agent_functions(
                {CREDENTIALS_FUNCTION_NAME: "credentials"}, self.dispatcher.invoke
            )
            self._invoke.__enter__()
        self.dispatcher.start()
        if not opts.react_to_notices:
            self.poller = TerminationPoller(
                self.control_plane,
                self.deployment.client("ec2"),
                every_seconds=self.scale.real(opts.poll_every_seconds),
            ).start()
        log.info("local runtime up in %.2fs at %s", time.monotonic() - started, endpoint)
        return self

    def stop(self) -> None:
        """Stop everything and remove the scratch directory."""
        if self.poller is not None:
            self.poller.stop()
        if self.dispatcher is not None:
            self.dispatcher.stop()
        if self.fis is not None:
            self.fis.stop()
        if self.market is not None:
            self.market.stop()
        if self.fleet is not None:
            self.fleet.stop()
        if self.timers is not None:
            self.timers.stop()
        lambda_runtime.install(None)
        lambda_commands.uninstall_verifier()
        credentials_lambda.install(None)
        if self._invoke is not None:
            self._invoke.__exit__(None, None, None)
            self._invoke = None
        notify_lambda.install(None)
        sweep_lambda.install(None)
        activity_lambda.install(None)
        if self.iam is not None:
            self.iam.stop()
        if self.slack is not None:
            self.slack.stop()
        self.server.stop()
        if self._owns_work_root and self._work_root is not None:
            shutil.rmtree(self._work_root, ignore_errors=True)

    def __enter__(self) -> LocalRuntime:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- the control plane the handlers use ------------------------------------------------

    def env(self) -> dict[str, str]:
        """The environment the stack would give the control-plane functions (time-scaled)."""
        assert self.deployment is not None
        env = self.deployment.function_env("commands")
        env[cfg.ENV_HEARTBEAT_TIMEOUT] = str(
            self.scale.real(self.options.heartbeat_timeout_seconds)
        )
        env[cfg.ENV_BOOT_TIMEOUT] = str(self.scale.real(self.options.boot_timeout_seconds))
        env[cfg.ENV_LAUNCH_TIMEOUT] = str(self.scale.real(self.options.launch_timeout_seconds))
        # The deadline policy ticks once per reconcile period; a changeover here is EC2's
        # simulated fulfilment and boot plus the agent's own start (a few real seconds).
        reconcile = next(s for s in WIRING.schedules if s.function == "reconcile")
        env[cfg.ENV_POLICY_TICK] = str(self.scale.real(reconcile.every_seconds))
        timing = self.options.timing
        env[cfg.ENV_CHANGEOVER] = str(
            self.options.changeover_seconds
            or self.scale.real(timing.fulfil_seconds + timing.boot_seconds) + AGENT_START_SECONDS
        )
        env[cfg.ENV_NOTIFY_PROGRESS_SECONDS] = str(
            self.scale.real(self.options.notify_progress_seconds)
        )
        env.update(satellite_env(self.satellites))
        env[cfg.ENV_SLACK_CHANNEL] = self.options.slack_channel
        if self.options.idle_gpus is not None:
            env[cfg.ENV_IDLE_GPUS] = json.dumps(self.options.idle_gpus)
        if self.slack is not None:
            env[cfg.ENV_SLACK_API_URL] = self.slack.base_url
        return env

    def function_session(self, function: str | None) -> Any:
        """The boto3 session a function's handler runs with (its role's, with IAM on)."""
        if self.iam is not None and function is not None:
            return cloud.session_for(self.iam.function_credentials[function])
        return cloud.session()

    def researcher_session(self) -> Any:
        """The session `run()` uses: the researcher policy's user with IAM on."""
        if self.iam is not None:
            return cloud.session_for(self.iam.researcher_credentials)
        return cloud.session()

    def _build_control_plane(self) -> ControlPlane:
        assert self.deployment is not None and self.market is not None
        session = self.function_session(lambda_runtime.current_function())
        endpoint = self.deployment.endpoint_url
        clients = {
            name: cloud.client_of(session, name, endpoint)
            for name in ("dynamodb", "ec2", "s3", "sqs", "service-quotas")
        }
        self.market.attach(clients["ec2"])
        control = ControlPlane.from_config(
            ControlPlaneConfig.from_env(self.env()),
            session=session,
            clients=clients,
            endpoint_url=endpoint,
        )
        if isinstance(control.capacity, RegionalCapacity):
            for there in control.capacity.satellites.values():
                self.market.attach(there.client)
        self._control_plane = control
        return control

    def activity_env(self) -> dict[str, str]:
        """What the stack gives `commands` and `reconcile` for the activity switch (time-scaled)."""
        assert self.deployment is not None
        d = self.deployment
        idle = [q.name for q in WIRING.queues if q.idle_off]
        rules = [d.schedule_rule_names[s.name] for s in WIRING.schedules if s.idle_off]
        return {
            activity.ENV_RULE: ",".join(rules),
            activity.ENV_MAPPINGS: ",".join(str(d.mappings.uuid_of(q)) for q in idle),
            activity.ENV_QUEUES: ",".join(d.queue_urls[q] for q in idle),
            activity.ENV_GRACE: str(self.scale.real(activity.DEFAULT_GRACE.total_seconds())),
        }

    def _build_activity_switch(self) -> activity.ActivitySwitch | None:
        assert self.deployment is not None
        deployment = self.deployment

        class _Session:  # Lambda's mappings live in the runtime (infra/local/mappings.py)
            def client(self, name: str) -> Any:
                return deployment.mappings if name == "lambda" else deployment.client(name)

        return activity.ActivitySwitch.from_env(
            ddb=deployment.client("dynamodb"),
            table_name=deployment.table_name,
            sqs=deployment.client("sqs"),
            session=_Session(),
            env=self.activity_env(),
        )

    def pollers_on(self) -> dict[str, bool]:
        """Which switched pollers run now: each idle-off queue's mapping and schedule's rule."""
        assert self.deployment is not None
        d = self.deployment
        events = d.client("events")
        found = {f"queue:{q.name}": d.mappings.polling(q.name) for q in WIRING.queues if q.idle_off}
        for s in WIRING.schedules:
            if s.idle_off:
                rule = events.describe_rule(Name=d.schedule_rule_names[s.name])
                found[f"schedule:{s.name}"] = rule["State"] == "ENABLED"
        return found

    def _build_notifier(self) -> SlackNotifier:
        assert self.deployment is not None
        session = self.function_session("notify" if self.iam is not None else None)
        clients = {
            n: cloud.client_of(session, n, self.deployment.endpoint_url)
            for n in ("dynamodb", "ssm")
        }
        return SlackNotifier.from_config(
            NotifyConfig.from_env(self.env()), session=session, clients=clients
        )

    def _build_broker(self) -> Broker:
        """The credentials function's broker, on its own role's clients (IAM on only)."""
        assert self.deployment is not None and self.iam is not None
        session = self.function_session("credentials")
        endpoint = self.deployment.endpoint_url
        dynamodb = cloud.client_of(session, "dynamodb", endpoint)
        table = self.deployment.table_name
        return Broker(
            verifier=Verifier(
                sts_url=sts_url(self.deployment.region, endpoint),
                region=self.deployment.region,
                ledger=DynamoProofLedger(table, dynamodb),
            ),
            jobs=JobTable(table, dynamodb),
            sts=cloud.client_of(session, "sts", endpoint),
            job_role_arn=self.iam.job_role_arn,
            bucket=self.deployment.bucket,
            instance_role_names=frozenset({self.iam.instance_role_arn.rsplit("/", 1)[-1]}),
        )

    def _build_sweep_news(self) -> SlackSweepNews:
        assert self.deployment is not None
        config = NotifyConfig.from_env(self.env())
        session = self.function_session("sweep" if self.iam is not None else None)
        ssm = cloud.client_of(session, "ssm", self.deployment.endpoint_url)
        return SlackSweepNews(
            tokens=SlackTokenSource(config.slack_token_parameter, ssm),
            default_channel=config.slack_channel,
            base_url=config.slack_api_url,
        )

    def control_plane(self) -> ControlPlane:
        """The control plane the handlers share (built on first use)."""
        return lambda_runtime.control_plane()

    def _dead_letter(self, body: str, reason: str, source: str) -> None:
        assert self.deployment is not None
        lambda_runtime.send_dead_letter(
            self.deployment.client("sqs"), self.deployment.dlq_urls[source], body, reason, source
        )

    # ---- Slack -----------------------------------------------------------------------------

    def wait_notifications(self, timeout: float = 30.0) -> bool:
        """Wait until the notifications queue is empty (every message handled or dead-lettered).

        Returns False on timeout, e.g. while the local Slack is down.
        """
        return self.wait_queue("notifications", timeout)

    def wait_queue(self, queue: str, timeout: float = 30.0) -> bool:
        """Wait until `queue` (e.g. "commands") is empty: every message handled or
        dead-lettered, none in flight. Returns False on timeout."""
        assert self.deployment is not None
        sqs = self.deployment.client("sqs")
        url = self.deployment.queue_urls[queue]
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            attrs = sqs.get_queue_attributes(
                QueueUrl=url,
                AttributeNames=[
                    "ApproximateNumberOfMessages",
                    "ApproximateNumberOfMessagesNotVisible",
                ],
            )["Attributes"]
            if not any(int(v) for v in attrs.values()):
                return True
            time.sleep(0.1)
        return False

    def slack_thread(self, job_id: str) -> str:
        """The job's Slack thread as the team reads it (card as it is now, then the replies)."""
        assert self.slack is not None
        record = self.control_plane().jobs.get(job_id)
        thread = (record.notify.get("slack") if record else None) or {}
        if not thread:
            return f"(no Slack thread for {job_id})"
        return self.slack.render(thread["channel"], thread["ts"])

    def job_record(self, job_id: str) -> JobRecord | None:
        """The job's record as stored now."""
        return self.control_plane().jobs.get(job_id)

    # ---- what a researcher does ------------------------------------------------------------

    def interrupt_job(
        self,
        job_id: str,
        *,
        at_step: int | None = None,
        rebalance: bool = False,
        wait_seconds: float = 600.0,
    ) -> Interrupted:
        """`respot local interrupt`: the job's current spot instance gets the market's notice
        once it trains (at `at_step` or beyond); see infra/local/interrupts.py."""
        assert self.fleet is not None
        return JobInterrupts(self.fleet, self.job_record).interrupt(
            job_id, at_step=at_step, rebalance=rebalance, wait_seconds=wait_seconds
        )

    def sdk_deployment(self) -> Deployment:
        """The deployment as the SDK sees it."""
        assert self.deployment is not None
        return self.deployment.deployment()

    def run(self, spec: TrainingEnvVar | dict[str, Any] | str, **kwargs: Any) -> JobHandle:
        """`respot.run` against this runtime."""
        session = kwargs.pop("session", None) or self.researcher_session()
        return run(spec, deployment=self.sdk_deployment(), session=session, **kwargs)

    def sweep(self, spec: Any, **kwargs: Any) -> SweepHandle:
        """`respot.sweep` against this runtime."""
        from respot.sweep.client import sweep

        session = kwargs.pop("session", None) or self.researcher_session()
        return sweep(spec, deployment=self.sdk_deployment(), session=session, **kwargs)

    def handle(self, job_id: str) -> JobHandle:
        """A handle on an existing job."""
        return JobHandle(job_id, self.sdk_deployment(), self.researcher_session())

    def state_extra(self) -> dict[str, Any]:
        """What `respot local up` tells other shells beyond the deployment (doctor, selftest)."""
        assert self.deployment is not None
        facts = self.deployment.doctor_facts()
        if self.satellites:  # what `respot doctor --local` checks in each extra region
            facts["stack_name"] = self.deployment.name
            facts["extra_regions"] = [s.region for s in self.satellites]
            facts["satellite_parameter"] = self.satellites[0].parameter_name
        return {"doctor": facts}

    def client(self, service: str) -> Any:
        """A boto3 client on the emulator."""
        assert self.deployment is not None
        return self.deployment.client(service)

    @property
    def work_root(self) -> Path:
        """Scratch directory of the instances."""
        assert self._work_root is not None
        return self._work_root


__all__ = [
    "WIRING",
    "ChaosSchedule",
    "FleetTiming",
    "LocalRuntime",
    "LocalSlack",
    "RuntimeOptions",
    "Trace",
]
