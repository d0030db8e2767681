"""The respot stack: per-concern constructs composed from `WIRING`, and the grants in one place.

Everything event-shaped (topic filters, queues, rules, schedules, functions, grants) comes
from `infra.wiring.WIRING`; everything deployment-shaped (VPC, instance types, AMI, Slack,
who may submit) comes from `DeploySettings`. A queue or function added to the wiring shows
up here with its dead-letter queue, alarm, mapping, role and log group, with no edit below.
The notifications queue is such an extension: when the wiring names a queue
`NOTIFY_QUEUE`, every function gets its URL and `Grant.NOTIFY_SEND` allows sending to it.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from infra.bundling import LocalAsset, agent_package_asset, lambda_code_asset
from infra.constructs import (
    ControlFunctions,
    FixedImage,
    Fleet,
    JobCredentials,
    JobStore,
    Messaging,
    Network,
    ResearcherAccess,
    SelftestExperiment,
)
from infra.constructs.activity import wire_activity
from infra.constructs.naming import pascal_id
from infra.constructs.session_manager import SessionManagerAccess
from infra.constructs.workspaces import add_researcher_tunnels
from infra.grants import GrantError, GrantPolicy, GrantTargets, policy_for
from infra.nag import suppress
from infra.regions import satellite_parameter_name
from infra.settings import DeploySettings
from infra.wiring import WIRING, Grant, Wiring, agent_function_name
from respot.control import config
from respot.identity.proofs import ENV_ADMINS, ENV_STS_URL
from respot.workspace import names as workspace_names

NOTIFY_QUEUE = "notifications"
SWEEP_QUEUE = "sweep-events"
LAUNCH_RETRY_QUEUE = "launch-retries"
CREDENTIALS_FUNCTION = "credentials"  # vends each job's credentials (lambdas/credentials.py)
POWERTOOLS_ENVIRONMENT = {
    "POWERTOOLS_SERVICE_NAME": "respot",
    "POWERTOOLS_METRICS_NAMESPACE": "respot",
}


class RespotStack(Stack):
    """Everything respot runs on in one AWS account and region."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: DeploySettings | None = None,
        wiring: Wiring = WIRING,
        lambda_asset: LocalAsset | None = None,
        agent_asset: LocalAsset | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        settings = settings or DeploySettings()
        self.settings = settings

        self.store = JobStore(self, "Store", wiring=wiring)
        self.network = Network(
            self,
            "Network",
            vpc_id=settings.vpc_id,
            subnets=settings.subnets,
            flow_log_bucket=self.store.log_bucket,
        )
        alarm_topic = (
            sns.Topic.from_topic_arn(self, "AlarmTopic", settings.alarm_topic_arn)
            if settings.alarm_topic_arn
            else None
        )
        self.messaging = Messaging(self, "Messaging", wiring=wiring, alarm_topic=alarm_topic)
        self.fleet = Fleet(
            self,
            "Fleet",
            vpc=self.network.vpc,
            bucket=self.store.bucket,
            agent_queue=self.messaging.agent_queue,
            machine_image=self._machine_image(settings),
            data_buckets=settings.data_bucket_arns,
            root_volume_gb=settings.root_volume_gb,
            root_device_name=settings.root_device_name,
            agent_asset=agent_asset
            or agent_package_asset(python=settings.framework_python_version),
            framework_python=settings.framework_python,
            # Each job's credentials come from this function (infra/constructs/credentials.py).
            credentials_function=agent_function_name(self.stack_name, CREDENTIALS_FUNCTION)
            if any(f.name == CREDENTIALS_FUNCTION for f in wiring.functions)
            else None,
        )

        # The Slack bot token: a SecureString parameter, referenced by name. CloudFormation
        # cannot create SecureString parameters, so the platform team creates it with
        # `aws ssm put-parameter --type SecureString` (docs/deploy.md); until then Slack is
        # off. A standard parameter costs nothing at rest (a Secrets Manager secret is $0.40 a
        # month); `notify` and `sweep` read it with decryption (infra/grants.py).
        self.slack_token = ssm.StringParameter.from_secure_string_parameter_attributes(
            self, "SlackToken", parameter_name=settings.slack_token_parameter_name
        )

        notify_queue = self.messaging.queues.get(NOTIFY_QUEUE)
        self.functions = ControlFunctions(
            self,
            "Functions",
            wiring=wiring,
            code=lambda_.Code.from_asset(**(lambda_asset or lambda_code_asset()).asset_options()),
            environment=self._function_environment(settings, notify_queue),
            queues=self.messaging.queues,
            event_dead_letters=self.messaging.event_dead_letters,
        )
        self._grant(wiring, notify_queue)
        wire_activity(self.functions, self.messaging.queues, wiring)
        if CREDENTIALS_FUNCTION in self.functions.functions:
            self.job_credentials = JobCredentials(
                self,
                "Credentials",
                bucket=self.store.bucket,
                function=self.functions.functions[CREDENTIALS_FUNCTION],
                function_role=self.functions.roles[CREDENTIALS_FUNCTION],
                instance_roles=[self.fleet.role],
                satellite_regions=settings.extra_regions,
            )

        # Shell access (opt-in) and workspaces' tunnels (on by default) both need the SSM Agent's
        # session permissions on the instance role; no inbound port either way.
        if settings.session_manager or settings.workspaces:
            SessionManagerAccess(self, "SessionManager", role=self.fleet.role)

        self.selftest = SelftestExperiment(self, "Selftest", deployment_name=self.stack_name)

        self.researchers = ResearcherAccess(
            self,
            "Researchers",
            topic=self.messaging.topic,
            table=self.store.table,
            index_names=self.store.index_names,
            bucket=self.store.bucket,
            agent_queue=self.messaging.agent_queue,
            parameter_name=settings.deployment_parameter_name,
            job_logs=self.fleet.log_group,
            slack_token_parameter=settings.slack_token_parameter_name,
            instance_types=settings.allowed,
            data_buckets=settings.data_bucket_arns,
            policy_name=(
                f"RespotResearcherPolicy-{settings.stage}"
                if settings.stage
                else "RespotResearcherPolicy"
            ),
            publisher_role_arns=settings.allowed_publisher_role_arns,
            fis_template_id=self.selftest.template_id,
            workspaces=settings.workspaces,
        )
        if settings.workspaces:  # `respot notebook open`: a tunnel to one's own instances only
            add_researcher_tunnels(
                self.researchers.policy,
                deployment_name=self.stack_name,
                regions=settings.extra_regions,
            )

    def _machine_image(self, settings: DeploySettings) -> ec2.IMachineImage:
        if settings.ami_id:
            return FixedImage(settings.ami_id)
        return ec2.MachineImage.from_ssm_parameter(settings.ami_parameter)

    def _function_environment(
        self, settings: DeploySettings, notify_queue: sqs.IQueue | None
    ) -> dict[str, str]:
        """What every control-plane function reads through `respot.control.config`."""
        env = {
            config.ENV_TABLE: self.store.table.table_name,
            config.ENV_BUCKET: self.store.bucket.bucket_name,
            config.ENV_LAUNCH_TEMPLATE_ID: self.fleet.launch_template_id,
            config.ENV_LAUNCH_TEMPLATE_VERSION: self.fleet.launch_template.latest_version_number,
            config.ENV_SUBNETS: self.to_json_string(
                [
                    {"subnet_id": p.subnet_id, "availability_zone": p.availability_zone}
                    for p in self.network.placements
                ]
            ),
            config.ENV_INSTANCE_TYPES: ",".join(settings.instance_types),
            config.ENV_AGENT_QUEUE_URL: self.messaging.agent_queue.queue_url,
            config.ENV_DEPLOYMENT_NAME: self.stack_name,
            config.ENV_MAX_BOOT_FAILURES: str(settings.max_boot_failures),
            config.ENV_ALLOWED_INSTANCE_TYPES: ",".join(settings.allowed),
            # What the instance role may read data from: the commands function refuses the rest.
            config.ENV_DATA_BUCKETS: ",".join(settings.data_bucket_arns),
            config.ENV_SLACK_TOKEN_PARAMETER: settings.slack_token_parameter_name,
            # `workspaces: false`: the commands function refuses a workspace before launch
            workspace_names.ENV_WORKSPACES_SETTING: "true" if settings.workspaces else "false",
            **POWERTOOLS_ENVIRONMENT,
        }
        if settings.slack_channel:
            env[config.ENV_SLACK_CHANNEL] = settings.slack_channel
        if settings.on_demand_prices:
            env[config.ENV_ON_DEMAND_PRICES] = self.to_json_string(dict(settings.on_demand_prices))
        if settings.queue:
            env[config.ENV_QUEUE] = self.to_json_string(dict(settings.queue))
        if settings.launch_pacing:
            env[config.ENV_LAUNCH_PACING] = self.to_json_string(dict(settings.launch_pacing))
        if settings.idle_gpus:
            env[config.ENV_IDLE_GPUS] = self.to_json_string(dict(settings.idle_gpus))
        if notify_queue is not None:
            env[config.ENV_NOTIFY_QUEUE_URL] = notify_queue.queue_url
        sweep_queue = self.messaging.queues.get(SWEEP_QUEUE)
        if sweep_queue is not None:
            env[config.ENV_SWEEP_QUEUE_URL] = sweep_queue.queue_url
        retry_queue = self.messaging.queues.get(LAUNCH_RETRY_QUEUE)
        if retry_queue is not None:
            env[config.ENV_LAUNCH_RETRY_QUEUE_URL] = retry_queue.queue_url
        # Identity proofs are executed against this STS endpoint only (respot.identity.proofs).
        env[ENV_STS_URL] = f"https://sts.{self.region}.amazonaws.com/"
        if settings.admin_principal_arns:
            env[ENV_ADMINS] = ",".join(settings.admin_principal_arns)
        if settings.extra_regions:
            env[config.ENV_SATELLITE_REGIONS] = ",".join(settings.extra_regions)
            env[config.ENV_SATELLITE_PARAMETER] = satellite_parameter_name(settings.name_prefix)
        return env

    def _satellite_policy(self, grant: str, policy: GrantPolicy) -> iam.ManagedPolicy:
        """The managed policy holding `grant`'s satellite statements (made on first use)."""
        found = self.satellite_policies.get(grant)
        statements = self.resolve([s.to_statement_json() for s in policy.satellite])
        if found is not None:
            if self.resolve(found.document.to_json())["Statement"] != statements:
                raise GrantError(f"grant {grant!r} gives functions different satellite statements")
            return found
        made = iam.ManagedPolicy(
            self.functions,
            f"Satellite{pascal_id(grant)}Policy",
            description=f"respot: {grant} in the satellite regions (extra_regions)",
            statements=policy.satellite,
        )
        for pattern, reason in sorted(dict(policy.satellite_wildcards).items()):
            suppress(made, "IAM5", reason, applies_to=[pattern])
        self.satellite_policies[grant] = made
        return made

    def _grant(self, wiring: Wiring, notify_queue: sqs.IQueue | None) -> None:
        """Every function's role gets exactly the statements its wiring grants stand for."""
        dead_letters_of = {
            q.function: self.messaging.dead_letter_queues[q.name] for q in wiring.queues
        }
        targets = GrantTargets(
            stack=self,
            table=self.store.table,
            index_names=self.store.index_names,
            bucket=self.store.bucket,
            launch_template_arn=self.fleet.launch_template_arn,
            instance_role=self.fleet.role,
            subnet_ids=tuple(p.subnet_id for p in self.network.placements),
            security_group_id=self.fleet.security_group.security_group_id,
            image_id=self.fleet.image_id,
            allowed_instance_types=self.settings.allowed,
            slack_token=self.slack_token,
            notify_queue=notify_queue,
            sweep_queue=self.messaging.queues.get(SWEEP_QUEUE),
            launch_retry_queue=self.messaging.queues.get(LAUNCH_RETRY_QUEUE),
            dead_letter_queues=dead_letters_of,
            satellite_regions=self.settings.extra_regions,
            satellite_parameter=satellite_parameter_name(self.settings.name_prefix),
        )
        # What a grant needs in satellite regions is the same for every function that has
        # the grant: one customer-managed policy per such grant, attached to those roles.
        # IAM quotas (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html):
        # a role's inline policies total at most 10,240 characters, a managed policy 6,144,
        # and a role takes 10 managed policies by default; with the satellite statements
        # inline, every region added ~1,060 characters to each launching role.
        self.satellite_policies: dict[str, iam.ManagedPolicy] = {}
        for spec in wiring.functions:
            role = self.functions.roles[spec.name]
            wildcards: dict[str, str] = {}
            for grant in sorted(spec.grants):
                policy = policy_for(grant, function=spec.name, targets=targets)
                for statement in policy.statements:
                    role.add_to_policy(statement)
                wildcards.update(policy.wildcards)
                if policy.satellite:
                    self._satellite_policy(grant, policy).attach_to_role(role)
            for pattern, reason in sorted(wildcards.items()):
                suppress(role, "IAM5", reason, applies_to=[pattern])
            if Grant.DLQ_SEND in spec.grants:
                self.functions.functions[spec.name].add_environment(
                    config.ENV_DLQ_URL, dead_letters_of[spec.name].queue_url
                )
            if any(q.function == spec.name and q.fed_by_agents for q in wiring.queues):
                # Messages from instances must come from the instance they name (SenderId).
                self.functions.functions[spec.name].add_environment(
                    config.ENV_AGENT_ROLE_ID, self.fleet.role.role_id
                )
