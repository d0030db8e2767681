"""Finding the respot deployment a laptop talks to: environment variables, else the SSM parameter.

The stack writes `/respot/deployment` (JSON: topic_arn, table_name, bucket, region, ...); the
local runtime writes the same parameter into its AWS emulator.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Any

from respot.exceptions import DeploymentNotFoundError

DEFAULT_PARAMETER = "/respot/deployment"
ENV_PARAMETER = "RESPOT_DEPLOYMENT_PARAMETER"
ENV_TOPIC_ARN = "RESPOT_TOPIC_ARN"
ENV_TABLE = "RESPOT_TABLE"
ENV_BUCKET = "RESPOT_BUCKET"
ENV_ENDPOINT_URL = "AWS_ENDPOINT_URL"
ENV_LOG_GROUP = "RESPOT_LOG_GROUP"
DEFAULT_LOG_GROUP = "/respot/jobs"  # where agents ship training output (CloudWatch Logs)

_HOW_TO_FIX = (
    "Deploy respot with `cdk deploy` (docs/deploy.md), or set RESPOT_TOPIC_ARN, RESPOT_TABLE "
    "and RESPOT_BUCKET, or try it on this machine with `make demo` / `respot local up`."
)


@dataclass(frozen=True)
class Deployment:
    """Where a respot control plane lives."""

    topic_arn: str
    table_name: str
    bucket: str
    region: str | None = None
    stack: str | None = None
    agent_queue_url: str | None = None
    endpoint_url: str | None = None  # set for the local runtime (the AWS emulator)
    log_group: str | None = None  # CloudWatch Logs group of training output; None: the default
    # The instance types the deployment allows (the stack's allowed_instance_types); None: any.
    instance_types: tuple[str, ...] | None = None
    fis_template_id: str | None = None  # the self-test's FIS experiment template (respot selftest)
    # The buckets (ARNs, a /prefix narrowing) the instances may read data from (the stack's
    # data_bucket_arns); None: not said (an older stack, the local runtime), not checked.
    data_buckets: tuple[str, ...] | None = None
    # The identity-proof digest the commands function checks (identity.proofs.CANONICAL_DIGEST);
    # None: a stack before it, which checks only the legacy digest, so the SDK signs that.
    proof_digest: str | None = None
    # The stack setting `workspaces` (`respot notebook`); None: not said (an older stack): on.
    workspaces: bool | None = None

    @property
    def job_log_group(self) -> str:
        """The log group agents ship training stdout/stderr to."""
        return self.log_group or DEFAULT_LOG_GROUP

    def session(self) -> Any:
        """A boto3 session for this deployment's region."""
        import boto3

        return boto3.session.Session(region_name=self.region)

    def client(self, service: str, session: Any = None) -> Any:
        """A boto3 client for `service`, pointed at the emulator when the deployment is local."""
        session = session or self.session()
        return session.client(service, region_name=self.region, endpoint_url=self.endpoint_url)

    def to_json(self) -> str:
        """The JSON the stack and the local runtime store in the SSM parameter."""
        return json.dumps({k: v for k, v in asdict(self).items() if v is not None})

    @classmethod
    def from_json(cls, text: str) -> Deployment:
        """Read the SSM parameter's JSON."""
        data = json.loads(text)
        fields = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in data.items() if k in fields}
        for name in ("instance_types", "data_buckets"):
            if isinstance(values.get(name), list):
                values[name] = tuple(values[name])
            elif isinstance(values.get(name), str):  # the stack's Fn::Join, comma-separated
                values[name] = tuple(t for t in values[name].split(",") if t)
        if isinstance(values.get("workspaces"), str):
            values["workspaces"] = values["workspaces"].lower() != "false"
        return cls(**values)


def discover(session: Any = None, *, parameter: str | None = None) -> Deployment:
    """The deployment named by the environment, else the one the stack published in SSM."""
    env = os.environ
    if env.get(ENV_TOPIC_ARN) and env.get(ENV_TABLE) and env.get(ENV_BUCKET):
        region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
        return Deployment(
            topic_arn=env[ENV_TOPIC_ARN],
            table_name=env[ENV_TABLE],
            bucket=env[ENV_BUCKET],
            region=region or env[ENV_TOPIC_ARN].split(":")[3] or None,
            endpoint_url=env.get(ENV_ENDPOINT_URL) or None,
            log_group=env.get(ENV_LOG_GROUP) or None,
        )
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError

    name = parameter or env.get(ENV_PARAMETER) or DEFAULT_PARAMETER
    session = session or boto3.session.Session()
    try:
        ssm = session.client("ssm")
        value = ssm.get_parameter(Name=name)["Parameter"]["Value"]
    except NoRegionError as exc:
        raise DeploymentNotFoundError(
            "No AWS region is configured, so respot cannot look for its deployment. "
            "Set AWS_REGION (or AWS_DEFAULT_REGION), or configure a profile region."
        ) from exc
    except NoCredentialsError as exc:
        raise DeploymentNotFoundError(
            "No AWS credentials were found, so respot cannot look for its deployment. "
            f"Configure credentials (aws configure / AWS_PROFILE). {_HOW_TO_FIX}"
        ) from exc
    except ClientError as exc:
        code = exc.response["Error"]["Code"]
        if code == "ParameterNotFound":
            raise DeploymentNotFoundError(
                f"No respot deployment found in region {session.region_name}: the SSM parameter "
                f"{name} does not exist. {_HOW_TO_FIX}"
            ) from exc
        raise DeploymentNotFoundError(
            f"Could not read the SSM parameter {name} ({code}: "
            f"{exc.response['Error'].get('Message', '')}). Your role needs ssm:GetParameter on "
            f"it (the stack's RespotResearcherPolicy grants it). {_HOW_TO_FIX}"
        ) from exc
    except BotoCoreError as exc:
        raise DeploymentNotFoundError(f"Could not reach AWS to find respot: {exc}") from exc
    try:
        deployment = Deployment.from_json(value)
    except (ValueError, TypeError) as exc:
        raise DeploymentNotFoundError(
            f"The SSM parameter {name} does not hold a respot deployment description: {exc}"
        ) from exc
    if deployment.endpoint_url is None and env.get(ENV_ENDPOINT_URL):
        deployment = Deployment(**{**asdict(deployment), "endpoint_url": env[ENV_ENDPOINT_URL]})
    return deployment
