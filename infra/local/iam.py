"""IAM enforced in the local runtime: the stack's own policies, resolved to the emulator's ARNs.

The policies come from the synthesized CDK template (synthesized once with bundling skipped,
then cached under `.build/iam/`, keyed by the sources that shape it). Each principal the
stack defines becomes an IAM principal in moto with exactly its policy document, with the
template's intrinsics (`Ref`, `Fn::GetAtt`, `Fn::Join`, `Fn::Sub`, pseudo parameters)
resolved to the local resources:
- each control-plane function: a role (the dispatcher calls each handler with the
  credentials of its own function's role, assumed through STS);
- the GPU instances: the instance role, assumed per instance with the instance id as the
  session name (as an instance profile does);
- researchers: a user holding `RespotResearcherPolicy`.
The runtime itself (provisioning, the emulated EC2, the dispatcher reading queues) acts as
an administrator user whose keys are the emulator's usual `testing` keys.

What moto evaluates, and what it does not (so what the tests of `tests/infra/test_iam_*`
check instead): moto matches actions and resources and treats an unmet condition as an
explicit deny; it knows the condition keys of none of respot's statements (`ec2:LaunchTemplate`,
`ec2:InstanceType`, `aws:ResourceTag/...`). Conditions are therefore dropped from Allow
statements here (`LocalIam.dropped_conditions` lists them) and evaluated by
`infra.iam_eval` against the same template. moto also authorizes most services against
resource `*`; `install_resource_names` gives the services respot calls the resource AWS
would authorize (table, topic, parameter, secret, log group, instance).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.constructs.naming import pascal_id
from infra.local.cloud import CREDENTIALS, LocalDeployment, service_trust
from infra.wiring import WIRING

log = logging.getLogger("respot.local.iam")

ACCOUNT = "123456789012"
ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = ROOT / ".build" / "iam"
# Sources whose change can change a policy: the cache key hashes them.
POLICY_SOURCES = ("infra", "sdk/respot/storage/layout.py", "sdk/respot/core/lifecycle")
ADMIN_USER = "respot-local-emulator"
RESEARCHER_USER = "respot-local-researcher"


# ---- the template ------------------------------------------------------------------------------


def _sources_digest() -> str:
    h = hashlib.sha256()
    for source in POLICY_SOURCES:
        path = ROOT / source
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for f in files:
            if "__pycache__" in f.parts or "local" in f.relative_to(ROOT).parts[:2]:
                continue
            h.update(str(f.relative_to(ROOT)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def synthesized_template(settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """The stack's CloudFormation template (bundling skipped), synthesized once and cached."""
    key = (
        _sources_digest()
        + hashlib.sha256(json.dumps(settings or {}, sort_keys=True).encode()).hexdigest()[:8]
    )
    cached = CACHE_DIR / f"Respot-{key}.template.json"
    if cached.exists():
        data: dict[str, Any] = json.loads(cached.read_text())
        return data
    import aws_cdk as cdk  # Node's banner: silenced by infra.local (its __init__)

    from infra.settings import DeploySettings
    from infra.stack import RespotStack

    app = cdk.App(context={"aws:cdk:bundling-stacks": []})
    RespotStack(app, "Respot", settings=DeploySettings(**(settings or {})))
    template: dict[str, Any] = app.synth().get_stack_by_name("Respot").template
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(template))
    tmp.replace(cached)
    return template


def _logical_id(template: dict[str, Any], prefix: str) -> str | None:
    """The logical id CDK made for the construct path `prefix` (prefix + 8 hex digits)."""
    pattern = re.compile(rf"^{re.escape(prefix)}[0-9A-F]{{8}}$")
    return next((lid for lid in template["Resources"] if pattern.match(lid)), None)


def principal_policies(template: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Principal -> unresolved policy documents: `function:<name>`, `instance`, `researcher`."""
    resources = template["Resources"]
    by_role: dict[str, list[dict[str, Any]]] = {}
    for resource in resources.values():
        if resource["Type"] != "AWS::IAM::Policy":
            continue
        for role in resource["Properties"].get("Roles", []):
            by_role.setdefault(role["Ref"], []).append(resource["Properties"]["PolicyDocument"])
    out: dict[str, list[dict[str, Any]]] = {}
    for spec in WIRING.functions:
        role = _logical_id(template, f"Functions{pascal_id(spec.name)}Role")
        out[f"function:{spec.name}"] = by_role.get(role or "", [])
    out["instance"] = by_role.get(_logical_id(template, "FleetInstanceRole") or "", [])
    # The role each job's credentials are sessions of (infra/constructs/credentials.py).
    out["job"] = by_role.get(_logical_id(template, "CredentialsJobRole") or "", [])
    researcher = _logical_id(template, "ResearchersResearcherPolicy")
    out["researcher"] = (
        [resources[researcher]["Properties"]["PolicyDocument"]] if researcher else []
    )
    return out


def agent_asset_location(template: dict[str, Any], region: str) -> tuple[str, str] | None:
    """(bucket, key) the instance role may read the agent package from (`ReadAgentPackage`):
    where the local runtime puts its agent package when IAM is enforced, as CDK would."""
    for doc in principal_policies(template)["instance"]:
        for st in _statements(doc):
            if st.get("Sid") != "ReadAgentPackage":
                continue
            resource = Resolver({}, region)(st["Resource"])
            arn = resource[0] if isinstance(resource, list) else resource
            bucket, _, key = str(arn).removeprefix("arn:aws:s3:::").partition("/")
            return bucket, key
    return None


def action_count(documents: list[dict[str, Any]]) -> int:
    """Distinct IAM actions the Allow statements of `documents` name."""
    actions: set[str] = set()
    for doc in documents:
        for st in _statements(doc):
            if st.get("Effect") == "Allow":
                value = st.get("Action", [])
                actions.update([value] if isinstance(value, str) else value)
    return len(actions)


def _statements(doc: dict[str, Any]) -> list[dict[str, Any]]:
    st = doc.get("Statement", [])
    return [st] if isinstance(st, dict) else list(st)


# ---- resolving intrinsics to local names -------------------------------------------------------


def job_role_arn(prefix: str) -> str:
    """The local stand-in of the job role (`CredentialsJobRole`)."""
    return f"arn:aws:iam::{ACCOUNT}:role/{prefix}-job"


def local_attributes(
    template: dict[str, Any], local: LocalDeployment, instance_role_arn: str
) -> dict[str, dict[str, str]]:
    """Logical id -> {"Ref": ..., "<attribute>": ...} of the local resources it stands for."""
    region = local.region
    attrs: dict[str, dict[str, str]] = {}

    def put(prefix: str, **values: str) -> None:
        lid = _logical_id(template, prefix)
        if lid is not None:
            attrs[lid] = values

    def queue_arn(url: str) -> str:
        return f"arn:aws:sqs:{region}:{ACCOUNT}:{url.rsplit('/', 1)[-1]}"

    put(
        "StoreTable",
        Ref=local.table_name,
        Arn=f"arn:aws:dynamodb:{region}:{ACCOUNT}:table/{local.table_name}",
    )
    put("StoreBucket", Ref=local.bucket, Arn=f"arn:aws:s3:::{local.bucket}")
    put("MessagingTopic", Ref=local.topic_arn)
    for q in WIRING.queues:
        put(f"Messaging{pascal_id(q.name)}Queue", Arn=queue_arn(local.queue_urls[q.name]))
        put(f"Messaging{pascal_id(q.name)}DeadLetters", Arn=queue_arn(local.dlq_urls[q.name]))
    if local.log_group:
        put(
            "FleetJobLogs",
            Ref=local.log_group,
            Arn=f"arn:aws:logs:{region}:{ACCOUNT}:log-group:{local.log_group}:*",
        )
    for spec in WIRING.functions:
        group = f"/aws/lambda/respot-local-{spec.name}"
        put(
            f"Functions{pascal_id(spec.name)}Logs",
            Ref=group,
            Arn=f"arn:aws:logs:{region}:{ACCOUNT}:log-group:{group}:*",
        )
    # The activity switch names the event source mappings (infra/local/mappings.py).
    queue_of = {
        _logical_id(template, f"Messaging{pascal_id(q.name)}Queue"): q.name for q in WIRING.queues
    }
    for lid, resource in template["Resources"].items():
        if resource["Type"] != "AWS::Lambda::EventSourceMapping":
            continue
        source = resource["Properties"].get("EventSourceArn", {}).get("Fn::GetAtt", [None])[0]
        uuid = local.mappings.uuid_of(queue_of.get(source, ""))
        if uuid is not None:
            attrs[lid] = {"Ref": uuid}
    put("FleetLaunchTemplate", Ref=local.launch_template_id)
    put("FleetInstanceRole", Arn=instance_role_arn)
    put("CredentialsJobRole", Arn=job_role_arn(local.name))
    put("ResearchersDeployment", Ref=local.parameter_name)
    for n, subnet in enumerate(local.subnets, start=1):
        put(f"NetworkVpcpublicSubnet{n}Subnet", Ref=subnet.subnet_id)
    for name in template.get("Parameters", {}):
        if name.startswith("SsmParameterValue"):
            from infra.local.cloud import LOCAL_AMI

            attrs[name] = {"Ref": LOCAL_AMI}
    return attrs


class Resolver:
    """Evaluates the CloudFormation intrinsics of a policy document with local values."""

    def __init__(self, attrs: dict[str, dict[str, str]], region: str) -> None:
        self.attrs = attrs
        self.pseudo = {
            "AWS::AccountId": ACCOUNT,
            "AWS::Region": region,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
        }
        self.unresolved: set[str] = set()

    def __call__(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self(v) for v in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, arg),) = value.items()
            if key == "Ref":
                return self._lookup(arg, "Ref")
            if key == "Fn::GetAtt":
                return self._lookup(arg[0], arg[1])
            if key == "Fn::Join":
                sep, parts = arg
                return str(sep).join(str(self(p)) for p in parts)
            if key == "Fn::Sub":
                text = arg if isinstance(arg, str) else arg[0]
                return re.sub(r"\$\{([^}]+)\}", lambda m: str(self._sub(m.group(1))), text)
            if key == "Fn::Select":
                index, items = arg
                return self(items)[int(index)]
            if key == "Fn::Split":
                sep, text = arg
                return str(self(text)).split(sep)
        return {k: self(v) for k, v in value.items()}

    def _sub(self, name: str) -> str:
        if "." in name:
            lid, attr = name.split(".", 1)
            return self._lookup(lid, attr)
        return self._lookup(name, "Ref")

    def _lookup(self, name: str, attr: str) -> str:
        if name in self.pseudo:
            return self.pseudo[name]
        value = self.attrs.get(name, {}).get(attr)
        if value is None:
            # Nothing local stands for it: an ARN that matches no request (a deny).
            self.unresolved.add(f"{name}.{attr}")
            return f"arn:aws:respot-local:::unresolved/{name}/{attr}"
        return value


def for_moto(
    doc: dict[str, Any],
    dropped: list[str],
    principal: str,
    denies: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The document without Allow conditions (moto treats an unknown condition key as a deny).

    A Deny with a condition is taken out into `denies` (when given): `LocalIam.enforce`
    evaluates those itself, with the request's own condition keys (`request_context`).
    """
    statements = []
    for original in _statements(doc):
        st = dict(original)
        if st.get("Effect") == "Allow" and "Condition" in st:
            dropped.append(f"{principal} {st.get('Sid', '')}: {json.dumps(st.pop('Condition'))}")
        elif st.get("Effect") == "Deny" and "Condition" in st and denies is not None:
            denies.append(st)
            continue
        statements.append(st)
    return {"Version": "2012-10-17", "Statement": statements}


# moto's action name -> the IAM action AWS authorizes (Lambda's Invoke API).
_IAM_ACTIONS = {"lambda:Invoke": "lambda:InvokeFunction"}
# The request headers that carry an IAM condition key respot's policies name.
_HEADER_KEYS = {"if-none-match": "s3:if-none-match", "if-match": "s3:if-match"}


def request_context(headers: Any) -> dict[str, str]:
    """The condition keys of a request that moto does not compute (from its headers)."""
    context: dict[str, str] = {}
    for name, value in dict(headers).items():
        key = _HEADER_KEYS.get(str(name).lower())
        if key is not None:
            context[key] = str(value)
    return context


# ---- naming the resource moto authorizes against ----------------------------------------------


def _param(response: Any, *names: str) -> Any:
    for name in names:
        try:
            value = response._get_param(name)
        except Exception:
            value = None
        if value:
            return value[0] if isinstance(value, list) else value
    return None


def _dynamodb(self: Any) -> str:
    table = _param(self, "TableName")
    if not table:
        items = _param(self, "RequestItems")
        table = next(iter(items), None) if isinstance(items, dict) else None
    if not table:
        return "*"
    arn = f"arn:aws:dynamodb:{self.region}:{ACCOUNT}:table/{table}"
    index = _param(self, "IndexName")
    return f"{arn}/index/{index}" if index else arn


def _logs(self: Any) -> str:
    group = _param(self, "logGroupName")
    if not group:
        return "*"
    stream = _param(self, "logStreamName") or "*"
    return f"arn:aws:logs:{self.region}:{ACCOUNT}:log-group:{group}:log-stream:{stream}"


def _ssm(self: Any) -> str:
    name = _param(self, "Name")
    if not name:
        return "*"
    return f"arn:aws:ssm:{self.region}:{ACCOUNT}:parameter/{str(name).lstrip('/')}"


def _ec2(self: Any) -> str:
    action = self._get_action()
    if action in ("RunInstances", "RequestSpotInstances"):
        return f"arn:aws:ec2:{self.region}:{ACCOUNT}:instance/*"
    if action in ("TerminateInstances", "StopInstances", "StartInstances"):
        instance = _param(self, "InstanceId.1", "InstanceIds")
        return f"arn:aws:ec2:{self.region}:{ACCOUNT}:instance/{instance or '*'}"
    return "*"


def _servicequotas(self: Any) -> str:
    """A quota's ARN, as IAM authorizes GetServiceQuota (moto's default names no resource,
    which a grant scoped to EC2's quotas never matches)."""
    service, code = _param(self, "ServiceCode"), _param(self, "QuotaCode")
    if not service or not code:
        return "*"
    return f"arn:aws:servicequotas:{self.region}:{ACCOUNT}:{service}/{code}"


def _named(*names: str) -> Any:
    def determine(self: Any) -> str:
        value = _param(self, *names)
        return str(value) if value else "*"

    return determine


_RESOURCE_NAMERS: tuple[tuple[str, str, Any], ...] = (
    ("moto.dynamodb.responses", "DynamoHandler", _dynamodb),
    ("moto.sns.responses", "SNSResponse", _named("TopicArn", "TargetArn")),
    ("moto.ssm.responses", "SimpleSystemManagerResponse", _ssm),
    ("moto.secretsmanager.responses", "SecretsManagerResponse", _named("SecretId")),
    ("moto.logs.responses", "LogsResponse", _logs),
    ("moto.ec2.responses", "EC2Response", _ec2),
    ("moto.servicequotas.responses", "ServiceQuotasResponse", _servicequotas),
)


@contextmanager
def install_resource_names() -> Iterator[None]:
    """Give moto the resource each request of respot's services acts on, then take it back."""
    import importlib

    installed = []
    for module, name, namer in _RESOURCE_NAMERS:
        cls = getattr(importlib.import_module(module), name)
        installed.append((cls, cls.__dict__.get("_determine_resource")))
        cls._determine_resource = namer
    try:
        yield
    finally:
        for cls, previous in installed:
            if previous is None:
                del cls._determine_resource
            else:
                cls._determine_resource = previous


# ---- the principals in moto --------------------------------------------------------------------


@dataclass
class LocalIam:
    """Creates respot's principals in moto and turns enforcement on (and off again)."""

    local: LocalDeployment
    template: dict[str, Any]
    dropped_conditions: list[str] = field(default_factory=list)
    unresolved: set[str] = field(default_factory=set)
    function_credentials: dict[str, dict[str, str]] = field(default_factory=dict)
    researcher_credentials: dict[str, str] = field(default_factory=dict)
    instance_role_arn: str = ""
    job_role_arn: str = ""
    # "user:<name>" / "role:<name>" -> Deny statements with conditions (evaluated per request)
    conditional_denies: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    _researcher: tuple[list[dict[str, Any]], list[dict[str, Any]]] = field(
        default_factory=lambda: ([], [])
    )
    _restore: Any = None

    def create(self) -> LocalIam:
        """Principals with the template's policies (before enforcement: no trust checks yet)."""
        iam = self.local.client("iam")
        sts = self.local.client("sts")
        prefix = self.local.name
        admin_arn = f"arn:aws:iam::{ACCOUNT}:user/{ADMIN_USER}"
        self._ensure_admin(iam)

        def trust(service: str) -> str:
            # The service assumes the role on AWS; here the emulator does it on its behalf.
            return service_trust(service, aws=admin_arn)

        instance_role = iam.create_role(
            RoleName=f"{prefix}-instance", AssumeRolePolicyDocument=trust("ec2.amazonaws.com")
        )["Role"]
        self.instance_role_arn = instance_role["Arn"]
        resolver = Resolver(
            local_attributes(self.template, self.local, self.instance_role_arn), self.local.region
        )
        policies = principal_policies(self.template)
        jobs_docs: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], [])
        for principal, docs in policies.items():
            denies: list[dict[str, Any]] = []
            resolved = [
                for_moto(resolver(doc), self.dropped_conditions, principal, denies) for doc in docs
            ]
            if principal == "job":
                jobs_docs = (resolved, denies)
                continue
            if principal == "instance":
                self.conditional_denies[f"role:{prefix}-instance"] = denies
                for i, doc in enumerate(resolved):
                    iam.put_role_policy(
                        RoleName=f"{prefix}-instance",
                        PolicyName=f"instance-{i}",
                        PolicyDocument=json.dumps(doc),
                    )
            elif principal == "researcher":
                self._researcher = (resolved, denies)
                self.researcher_credentials = self.add_researcher(RESEARCHER_USER)
            else:
                function = principal.split(":", 1)[1]
                role = f"{prefix}-fn-{function}"
                self.conditional_denies[f"role:{role}"] = denies
                arn = iam.create_role(
                    RoleName=role, AssumeRolePolicyDocument=trust("lambda.amazonaws.com")
                )["Role"]["Arn"]
                for i, doc in enumerate(resolved):
                    iam.put_role_policy(
                        RoleName=role, PolicyName=f"{function}-{i}", PolicyDocument=json.dumps(doc)
                    )
                creds = sts.assume_role(RoleArn=arn, RoleSessionName=function)["Credentials"]
                self.function_credentials[function] = _session_credentials(creds)
        # The job role, which only the credentials function's session may assume (the
        # template's trust names that function's role; moto compares the session's ARN).
        documents, denies = jobs_docs
        vendor = f"arn:aws:sts::{ACCOUNT}:assumed-role/{prefix}-fn-credentials/credentials"
        iam.create_role(
            RoleName=f"{prefix}-job",
            AssumeRolePolicyDocument=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"AWS": vendor},
                            "Action": "sts:AssumeRole",
                        }
                    ],
                }
            ),
            MaxSessionDuration=3600,
        )
        self.conditional_denies[f"role:{prefix}-job"] = denies
        for i, doc in enumerate(documents):
            iam.put_role_policy(
                RoleName=f"{prefix}-job", PolicyName=f"job-{i}", PolicyDocument=json.dumps(doc)
            )
        self.job_role_arn = job_role_arn(prefix)
        self.unresolved = resolver.unresolved
        return self

    def add_researcher(self, name: str) -> dict[str, str]:
        """Keys of a (further) user holding `RespotResearcherPolicy`, as another researcher."""
        documents, denies = self._researcher
        user = f"{self.local.name}-{name}"
        iam = self.local.client("iam")
        self.conditional_denies[f"user:{user}"] = denies
        iam.create_user(UserName=user)
        for i, doc in enumerate(documents):
            iam.put_user_policy(
                UserName=user, PolicyName=f"researcher-{i}", PolicyDocument=json.dumps(doc)
            )
        key = iam.create_access_key(UserName=user)["AccessKey"]
        return {
            "aws_access_key_id": key["AccessKeyId"],
            "aws_secret_access_key": key["SecretAccessKey"],
        }

    @staticmethod
    def _ensure_admin(iam: Any) -> None:
        """The emulator's own identity: the `testing` keys every runtime client signs with."""
        from moto.iam.models import iam_backends

        backend = iam_backends[ACCOUNT]["aws"]
        if ADMIN_USER in backend.users:
            return
        iam.create_user(UserName=ADMIN_USER)
        iam.put_user_policy(
            UserName=ADMIN_USER,
            PolicyName="emulator",
            PolicyDocument=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
                }
            ),
        )
        iam.create_access_key(UserName=ADMIN_USER)
        key = backend.users[ADMIN_USER].access_keys[0]
        key.access_key_id = CREDENTIALS["aws_access_key_id"]
        key.secret_access_key = CREDENTIALS["aws_secret_access_key"]

    def instance_credentials(self, instance_id: str) -> dict[str, str]:
        """What an instance profile gives an instance: the role, session named after it."""
        sts = self.local.client("sts")
        creds = sts.assume_role(RoleArn=self.instance_role_arn, RoleSessionName=instance_id)[
            "Credentials"
        ]
        return {
            "AWS_ACCESS_KEY_ID": creds["AccessKeyId"],
            "AWS_SECRET_ACCESS_KEY": creds["SecretAccessKey"],
            "AWS_SESSION_TOKEN": creds["SessionToken"],
        }

    def enforce(self) -> None:
        """From now on moto authenticates every request and evaluates the caller's policies."""
        from moto import settings
        from moto.core.authorization import ActionAuthenticatorMixin
        from moto.iam.access_control import IAMRequestBase

        namer = install_resource_names()
        namer.__enter__()
        previous = settings.INITIAL_NO_AUTH_ACTION_COUNT
        settings.INITIAL_NO_AUTH_ACTION_COUNT = 0
        ActionAuthenticatorMixin.request_count = 0
        moto_check = IAMRequestBase.check_action_permitted
        local_iam = self

        def check_action_permitted(request: Any, resource: str) -> None:
            # moto names a few actions by their API operation, not their IAM action
            request._action = _IAM_ACTIONS.get(request._action, request._action)
            moto_check(request, resource)  # the identity policies, as moto evaluates them
            if not local_iam.also_permitted(request, resource):
                request._raise_access_denied()

        IAMRequestBase.check_action_permitted = check_action_permitted  # type: ignore[method-assign,assignment]

        def restore() -> None:
            settings.INITIAL_NO_AUTH_ACTION_COUNT = previous
            IAMRequestBase.check_action_permitted = moto_check  # type: ignore[method-assign]
            namer.__exit__(None, None, None)

        self._restore = restore

    def also_permitted(self, request: Any, resource: str) -> bool:
        """What moto leaves out, for a request moto's own evaluation allowed: the caller's
        Deny statements with conditions (evaluated with the request's condition keys), and
        the session policy an assumed role's credentials were issued with (AWS allows only
        what the role's policies and the session policy both allow)."""
        from moto.iam.access_control import AssumedRoleAccessKey, IAMUserAccessKey

        from infra.iam_eval import allowed

        action = request._action
        key = request._access_key
        if isinstance(key, IAMUserAccessKey):
            principal = f"user:{key._owner_user_name}"
        elif isinstance(key, AssumedRoleAccessKey):
            principal = f"role:{key._owner_role_name}"
        else:
            return True
        context = request_context(request._headers)
        for st in self.conditional_denies.get(principal, []):
            if not allowed([{"Statement": [{**st, "Effect": "Allow"}]}], action, resource, context):
                continue
            log.info("denied %s on %s to %s: %s", action, resource, principal, st.get("Sid"))
            return False
        if isinstance(key, AssumedRoleAccessKey):
            policy = _session_policy(request.account_id, key._access_key_id)
            if policy is not None and not allowed([policy], action, resource, context):
                log.info("denied %s on %s by %s's session policy", action, resource, principal)
                return False
        return True

    def stop(self) -> None:
        """Enforcement off again (moto's state is per process, shared with other servers)."""
        if self._restore is not None:
            self._restore()
            self._restore = None


def _session_policy(account_id: str, access_key_id: str) -> dict[str, Any] | None:
    """The session policy (`Policy` of AssumeRole) an assumed role's key was issued with."""
    from moto.sts.models import sts_backends

    for assumed in sts_backends[account_id]["aws"].assumed_roles:
        if assumed.access_key_id == access_key_id:
            return json.loads(assumed.policy) if assumed.policy else None
    return None


def _session_credentials(creds: dict[str, Any]) -> dict[str, str]:
    return {
        "aws_access_key_id": creds["AccessKeyId"],
        "aws_secret_access_key": creds["SecretAccessKey"],
        "aws_session_token": creds["SessionToken"],
    }
