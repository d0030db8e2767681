"""The doctor's checks: small functions over injected boto3 clients, each returning findings.

Every check reads only (Get/Describe/List calls); none creates or changes anything. A check
that AWS does not let the caller run (AccessDenied) says so as a warning instead of failing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from respot.doctor.findings import Finding, blocker, ok, skipped, warn
from respot.doctor.quotas import SERVICE_CODE, FamilyQuotas, increase_command, quotas_for
from respot.doctor.target import MIN_BOOTSTRAP_VERSION, SPOT_SERVICE_LINKED_ROLE

AGENT_INTERFACE_ENDPOINTS = ("sqs", "logs")  # what the agent calls besides S3 (runner.py)
ARCHITECTURE = "x86_64"  # the agent package is built for x86_64 (infra/bundling.py)


def error_code(exc: ClientError) -> str:
    """AWS's error code of a ClientError."""
    return str(exc.response.get("Error", {}).get("Code", ""))


def error_text(exc: ClientError) -> str:
    """`Code: message` of a ClientError."""
    error = exc.response.get("Error", {})
    return f"{error.get('Code', '')}: {error.get('Message', '')}".rstrip(": ")


# ---- credentials -------------------------------------------------------------------------


def check_credentials(sts: Any) -> tuple[Finding, str | None]:
    """STS GetCallerIdentity: (the finding, the account id or None)."""
    name = "credentials"
    fix = "configure credentials for this account: `aws configure`, `aws sso login` or AWS_PROFILE"
    try:
        identity = sts.get_caller_identity()
    except NoCredentialsError:
        return blocker(name, "no AWS credentials were found", fix), None
    except ClientError as exc:
        return blocker(name, f"AWS refused the credentials ({error_text(exc)})", fix), None
    except BotoCoreError as exc:
        return blocker(name, f"could not reach AWS STS: {exc}", "check the network"), None
    account = str(identity["Account"])
    return ok(name, f"account {account} as {identity['Arn']}"), account


# ---- CDK bootstrap -----------------------------------------------------------------------


def check_bootstrap(ssm: Any, cfn: Any, *, qualifier: str, account: str, region: str) -> Finding:
    """The CDK bootstrap stack and its version parameter, which `cdk deploy` needs."""
    name = "CDK bootstrap"
    parameter = f"/cdk-bootstrap/{qualifier}/version"
    bootstrap = f"cdk bootstrap aws://{account}/{region}"
    try:
        value = ssm.get_parameter(Name=parameter)["Parameter"]["Value"]
    except ClientError as exc:
        if error_code(exc) != "ParameterNotFound":
            raise
        status = _toolkit_stack_status(cfn)
        if status is not None and status.endswith(("FAILED", "ROLLBACK_COMPLETE")):
            return blocker(
                name,
                f"the CDKToolkit stack is {status} and {parameter} does not exist",
                "aws cloudformation delete-stack --stack-name CDKToolkit, then " + bootstrap,
            )
        return blocker(name, f"{region} is not bootstrapped for the CDK ({parameter})", bootstrap)
    try:
        version = int(value)
    except ValueError:
        return blocker(name, f"{parameter} holds {value!r}, not a version number", bootstrap)
    if version < MIN_BOOTSTRAP_VERSION:
        return blocker(
            name,
            f"bootstrap version {version}; aws-cdk-lib v2 needs {MIN_BOOTSTRAP_VERSION} or newer",
            bootstrap + "  (upgrades the bootstrap stack in place)",
        )
    return ok(name, f"bootstrap version {version} ({parameter})")


def _toolkit_stack_status(cfn: Any) -> str | None:
    try:
        stacks = cfn.describe_stacks(StackName="CDKToolkit")["Stacks"]
    except ClientError:
        return None  # "does not exist" comes back as ValidationError
    return str(stacks[0]["StackStatus"]) if stacks else None


# ---- the respot stack itself ---------------------------------------------------------------


def check_stack(cfn: Any, *, stack_name: str) -> Finding:
    """Whether `cdk deploy` can create or update the stack now (a failed first deploy leaves
    it in ROLLBACK_COMPLETE, which CloudFormation cannot update)."""
    name = "stack"
    try:
        stacks = cfn.describe_stacks(StackName=stack_name)["Stacks"]
    except ClientError as exc:
        if error_code(exc) != "ValidationError":  # "Stack with id ... does not exist"
            raise
        stacks = []
    if not stacks:
        return ok(name, f"{stack_name} is not deployed yet: `cdk deploy` creates it")
    status = str(stacks[0]["StackStatus"])
    events = f"aws cloudformation describe-stack-events --stack-name {stack_name}"
    if status == "ROLLBACK_COMPLETE":
        return blocker(
            name,
            f"a failed first deploy left {stack_name} in ROLLBACK_COMPLETE; CloudFormation "
            "cannot update it",
            f"see why: {events}; then aws cloudformation delete-stack --stack-name "
            f"{stack_name} and deploy again",
        )
    if status == "UPDATE_ROLLBACK_FAILED":
        return blocker(
            name,
            f"{stack_name} is UPDATE_ROLLBACK_FAILED",
            f"aws cloudformation continue-update-rollback --stack-name {stack_name} (see {events})",
        )
    if status.endswith("_FAILED"):
        return blocker(name, f"{stack_name} is {status}", f"see why: {events}")
    if status.endswith("_IN_PROGRESS"):
        return warn(name, f"{stack_name} is {status}", "wait for it to finish, then deploy")
    return ok(name, f"{stack_name} is {status}")


# ---- the EC2 Spot service-linked role ----------------------------------------------------


def check_service_linked_role(
    iam: Any, name: str, role: str, service: str, created_by: str
) -> Finding:
    """`role`, the service-linked role of `service`: ok if it exists, else a warning saying
    what creates it on first use (`created_by`) and the command that creates it now."""
    try:
        iam.get_role(RoleName=role)
    except ClientError as exc:
        if error_code(exc) != "NoSuchEntity":
            raise
        return warn(
            name,
            f"{role} does not exist yet; {created_by}, and fails if an SCP forbids that",
            f"aws iam create-service-linked-role --aws-service-name {service}",
        )
    return ok(name, f"{role} exists")


def check_spot_role(iam: Any) -> Finding:
    """AWSServiceRoleForEC2Spot, which EC2 needs before it launches any spot instance."""
    return check_service_linked_role(
        iam,
        "spot service-linked role",
        SPOT_SERVICE_LINKED_ROLE,
        "spot.amazonaws.com",
        "respot's first spot launch creates it (the submit role may)",
    )


# ---- instance types and their quotas -----------------------------------------------------


def describe_vcpus(ec2: Any, instance_types: Iterable[str]) -> dict[str, int | None]:
    """vCPUs of each instance type in this region; None for a type EC2 does not know."""
    found: dict[str, int | None] = {}
    for instance_type in instance_types:
        try:
            types = ec2.describe_instance_types(InstanceTypes=[instance_type])["InstanceTypes"]
        except ClientError as exc:
            if error_code(exc) != "InvalidInstanceType":
                raise
            types = []
        found[instance_type] = int(types[0]["VCpuInfo"]["DefaultVCpus"]) if types else None
    return found


def check_instance_types(
    ec2: Any, instance_types: tuple[str, ...], *, zones: Iterable[str], region: str
) -> list[Finding]:
    """Each configured type exists and is offered in a zone respot launches into."""
    findings: list[Finding] = []
    vcpus = describe_vcpus(ec2, instance_types)
    unknown = [t for t, n in vcpus.items() if n is None]
    for instance_type in unknown:
        findings.append(
            blocker(
                f"instance type {instance_type}",
                f"{instance_type} is not an EC2 instance type in {region}",
                "correct instance_types in cdk.json (e.g. g5.xlarge, g4dn.xlarge)",
            )
        )
    known = [t for t in instance_types if vcpus[t] is not None]
    if not known:
        return findings
    offered: dict[str, set[str]] = defaultdict(set)
    paginator = ec2.get_paginator("describe_instance_type_offerings")
    for page in paginator.paginate(
        LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": known}]
    ):
        for offer in page["InstanceTypeOfferings"]:
            offered[offer["InstanceType"]].add(offer["Location"])
    wanted = set(zones)
    usable = []
    for instance_type in known:
        where = offered[instance_type] & wanted if wanted else offered[instance_type]
        if where:
            usable.append(instance_type)
            findings.append(
                ok(f"instance type {instance_type}", f"offered in {', '.join(sorted(where))}")
            )
            continue
        scope = f"the configured zones ({', '.join(sorted(wanted))})" if wanted else region
        findings.append(
            warn(
                f"instance type {instance_type}",
                f"{instance_type} is not offered in {scope}",
                "drop it from instance_types, or add subnets in zones that offer it",
            )
        )
    if not usable:
        findings.append(
            blocker(
                "instance types",
                f"none of the configured instance types can be launched in {region}",
                "give instance_types that this region offers in the subnets' zones",
            )
        )
    return findings


def _quota_value(quotas: Any, code: str) -> float:
    try:
        return float(
            quotas.get_service_quota(ServiceCode=SERVICE_CODE, QuotaCode=code)["Quota"]["Value"]
        )
    except ClientError as exc:
        if error_code(exc) != "NoSuchResourceException":
            raise
    # An account that never changed a quota may only have the default.
    response = quotas.get_aws_default_service_quota(ServiceCode=SERVICE_CODE, QuotaCode=code)
    return float(response["Quota"]["Value"])


def check_quotas(
    quotas: Any, ec2: Any, instance_types: tuple[str, ...], *, region: str
) -> list[Finding]:
    """Spot and on-demand vCPU quotas of the configured families against their types' vCPUs."""
    findings: list[Finding] = []
    groups: dict[FamilyQuotas, dict[str, int]] = defaultdict(dict)
    for instance_type, vcpus in describe_vcpus(ec2, instance_types).items():
        if vcpus is None:
            continue  # the instance-type check reports it
        family = quotas_for(instance_type)
        if family is None:
            findings.append(
                skipped(
                    f"quota {instance_type}",
                    f"respot does not know the vCPU quota of {instance_type}'s family; see the "
                    "Service Quotas console (ec2)",
                )
            )
            continue
        groups[family][instance_type] = vcpus
    for family, sizes in groups.items():
        smallest = min(sizes, key=lambda t: sizes[t])
        largest = max(sizes, key=lambda t: sizes[t])
        need_min, need_max = sizes[smallest], sizes[largest]
        for market, code, quota_name in (
            ("spot", family.spot_code, family.spot_name),
            ("on-demand", family.on_demand_code, family.on_demand_name),
        ):
            name = f"quota {family.name} {market}"
            if code is None:
                findings.append(
                    skipped(
                        name,
                        f"respot knows no Service Quotas code for '{quota_name}'; find it with "
                        "aws service-quotas list-service-quotas --service-code ec2",
                    )
                )
                continue
            try:
                value = _quota_value(quotas, code)
            except ClientError as exc:
                findings.append(
                    warn(
                        name,
                        f"could not read {code} ({error_text(exc)})",
                        f"aws service-quotas get-service-quota --service-code ec2 --quota-code "
                        f"{code} --region {region}",
                    )
                )
                continue
            raise_it = increase_command(code, need_max, region)
            seen = f"{code} is {value:g} vCPUs"
            if value < need_min:
                if market == "spot":
                    findings.append(
                        blocker(
                            name,
                            f"{seen}: no spot {smallest} ({need_min} vCPUs) can start; launches "
                            "fail with MaxSpotInstanceCountExceeded",
                            raise_it,
                        )
                    )
                else:
                    findings.append(
                        warn(
                            name,
                            f"{seen}: jobs cannot move to on-demand {smallest} ({need_min} "
                            "vCPUs) to meet a deadline",
                            raise_it,
                        )
                    )
            elif value < need_max:
                findings.append(
                    warn(
                        name,
                        f"{seen}: enough for {smallest}, not for {largest} ({need_max})",
                        raise_it,
                    )
                )
            else:
                jobs = int(value // need_max)
                findings.append(ok(name, f"{seen}: {jobs} x {largest} at once"))
    return findings


# ---- the AMI -------------------------------------------------------------------------------


def check_ami(
    ec2: Any, ssm: Any, *, ami_id: str | None, ami_parameter: str | None, region: str
) -> Finding:
    """The AMI resolves (fixed id, or the SSM parameter) to an available x86_64 image here."""
    name = "AMI"
    source = ami_id or ""
    if not ami_id:
        if not ami_parameter:
            return blocker(name, "neither ami_id nor ami_parameter is set", "set one in cdk.json")
        try:
            ami_id = str(ssm.get_parameter(Name=ami_parameter)["Parameter"]["Value"])
        except ClientError as exc:
            if error_code(exc) != "ParameterNotFound":
                raise
            return blocker(
                name,
                f"the AMI parameter {ami_parameter} does not exist in {region}",
                "set ami_parameter to one that exists in this region, or give ami_id",
            )
        source = f"{ami_parameter} -> {ami_id}"
    fix = (
        "AMIs are regional: give this region's id (aws ec2 copy-image copies one) or use "
        "ami_parameter"
    )
    try:
        images = ec2.describe_images(ImageIds=[ami_id])["Images"]
    except ClientError as exc:
        if not error_code(exc).startswith("InvalidAMIID"):
            raise
        images = []
    if not images:
        return blocker(name, f"{source}: no such image in {region}", fix)
    image = images[0]
    if image.get("State", "available") != "available":
        return blocker(name, f"{source}: the image is {image['State']}", fix)
    if image.get("Architecture", ARCHITECTURE) != ARCHITECTURE:
        return blocker(
            name,
            f"{source} is {image['Architecture']}; respot's agent package is built for "
            f"{ARCHITECTURE}",
            "use an x86_64 AMI (and x86_64 instance types)",
        )
    return ok(name, f"{source} ({image.get('Name', 'unnamed')}) is available, {ARCHITECTURE}")


# ---- network -------------------------------------------------------------------------------


def check_network(
    ec2: Any, *, vpc_id: str | None, subnets: Mapping[str, str], region: str
) -> list[Finding]:
    """The configured VPC and subnets exist, sit where cdk.json says, and can reach AWS."""
    if vpc_id is None:
        return [
            ok(
                "network",
                "the stack creates its own VPC (public subnets, S3 gateway endpoint, no NAT)",
            )
        ]
    try:
        ec2.describe_vpcs(VpcIds=[vpc_id])
    except ClientError as exc:
        if not error_code(exc).startswith("InvalidVpcID"):
            raise
        return [
            blocker("VPC", f"{vpc_id} does not exist in {region}", "correct vpc_id in cdk.json")
        ]
    findings = [ok("VPC", f"{vpc_id} exists")]
    found: dict[str, dict[str, Any]] = {}
    for subnet_id in subnets:
        try:
            found[subnet_id] = ec2.describe_subnets(SubnetIds=[subnet_id])["Subnets"][0]
        except ClientError as exc:
            if not error_code(exc).startswith("InvalidSubnetID"):
                raise
            findings.append(
                blocker(
                    f"subnet {subnet_id}",
                    f"{subnet_id} does not exist in {region}",
                    "correct subnet_ids in cdk.json",
                )
            )
    tables = ec2.describe_route_tables(Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])[
        "RouteTables"
    ]
    endpoints = ec2.describe_vpc_endpoints(Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])[
        "VpcEndpoints"
    ]
    for subnet_id, subnet in found.items():
        name = f"subnet {subnet_id}"
        if subnet["VpcId"] != vpc_id:
            findings.append(
                blocker(
                    name,
                    f"{subnet_id} is in {subnet['VpcId']}, not {vpc_id}",
                    "give subnets of vpc_id",
                )
            )
            continue
        zone = subnets[subnet_id]
        if subnet["AvailabilityZone"] != zone:
            findings.append(
                blocker(
                    name,
                    f"cdk.json maps {subnet_id} to {zone}, but it is in "
                    f"{subnet['AvailabilityZone']}",
                    f'map it to its zone: "{subnet_id}": "{subnet["AvailabilityZone"]}"',
                )
            )
            continue
        findings.append(_egress(subnet, tables, endpoints, region))
    return findings


def _route_table_of(subnet: dict[str, Any], tables: list[dict[str, Any]]) -> dict[str, Any] | None:
    for table in tables:
        if any(a.get("SubnetId") == subnet["SubnetId"] for a in table.get("Associations", [])):
            return table
    return next((t for t in tables if any(a.get("Main") for a in t.get("Associations", []))), None)


def _egress(
    subnet: dict[str, Any],
    tables: list[dict[str, Any]],
    endpoints: list[dict[str, Any]],
    region: str,
) -> Finding:
    """How an instance in this subnet reaches S3, SQS and CloudWatch Logs."""
    subnet_id = subnet["SubnetId"]
    name = f"subnet {subnet_id}"
    table = _route_table_of(subnet, tables)
    default = next(
        (
            r
            for r in (table or {}).get("Routes", [])
            if r.get("DestinationCidrBlock") == "0.0.0.0/0" and r.get("State", "active") == "active"
        ),
        None,
    )
    if default is not None:
        if (
            default.get("NatGatewayId")
            or default.get("TransitGatewayId")
            or default.get("NetworkInterfaceId")
        ):
            return ok(name, f"{subnet['AvailabilityZone']}, egress through {_via(default)}")
        if str(default.get("GatewayId", "")).startswith("igw-"):
            if subnet.get("MapPublicIpOnLaunch"):
                return ok(name, f"{subnet['AvailabilityZone']}, public (internet gateway)")
            public_note = "has an internet gateway route but gives no public IP on launch; "
        else:
            public_note = ""
    else:
        public_note = ""
    # No usable way out: every service the instance calls needs an endpoint in the VPC.
    table_id = (table or {}).get("RouteTableId", "?")
    live = [e for e in endpoints if e.get("State", "available").lower() == "available"]
    s3 = any(
        e["ServiceName"] == f"com.amazonaws.{region}.s3"
        and e.get("VpcEndpointType") == "Gateway"
        and table_id in e.get("RouteTableIds", [])
        for e in live
    )
    missing = [] if s3 else [f"S3 gateway endpoint on {table_id}"]
    for service in AGENT_INTERFACE_ENDPOINTS:
        if not any(
            e["ServiceName"] == f"com.amazonaws.{region}.{service}"
            and e.get("VpcEndpointType") == "Interface"
            and e.get("PrivateDnsEnabled")
            for e in live
        ):
            missing.append(f"{service} interface endpoint (private DNS on)")
    if missing:
        vpc = subnet["VpcId"]
        return blocker(
            name,
            f"private: {public_note}no NAT route and no {', '.join(missing)}; instances could "
            "not fetch the agent or report, so every boot would fail",
            f"add a NAT gateway route, or: aws ec2 create-vpc-endpoint --vpc-id {vpc} "
            f"--service-name com.amazonaws.{region}.s3 --route-table-ids {table_id}; and per "
            f"service in {', '.join(AGENT_INTERFACE_ENDPOINTS)}: aws ec2 create-vpc-endpoint "
            f"--vpc-id {vpc} --vpc-endpoint-type Interface --service-name "
            f"com.amazonaws.{region}.SERVICE --subnet-ids {subnet_id} --private-dns-enabled",
        )
    return warn(
        name,
        f"private with S3, SQS and Logs endpoints: respot works; {public_note}package indexes "
        "(a job's requirements) are out of reach, and container images need ECR endpoints",
        "add a NAT route if jobs install packages from PyPI; for image jobs add the ecr.api "
        "and ecr.dkr interface endpoints",
    )


def _via(route: dict[str, Any]) -> str:
    for key in ("NatGatewayId", "TransitGatewayId", "NetworkInterfaceId"):
        if route.get(key):
            return str(route[key])
    return "a gateway"


# ---- Slack -------------------------------------------------------------------------------


def check_slack_token(ssm: Any, *, parameter_name: str, slack_configured: bool) -> Finding:
    """The Slack token parameter exists, is a SecureString and holds a bot token (never printed).

    CloudFormation cannot create SecureString parameters: the platform team creates it, before
    or after `cdk deploy` (docs/deploy.md); the stack only names it.
    """
    from respot.notify.token import token_of

    name = "Slack token"
    put = (
        f"aws ssm put-parameter --name {parameter_name} --type SecureString "
        "--value xoxb-... (add --overwrite to replace a token)"
    )
    try:
        parameter = ssm.get_parameter(Name=parameter_name, WithDecryption=True)["Parameter"]
    except ClientError as exc:
        if error_code(exc) != "ParameterNotFound":
            raise
        if not slack_configured:
            return ok(name, f"no parameter {parameter_name} and no slack_channel: Slack is off")
        return warn(
            name,
            f"the SecureString parameter {parameter_name} does not exist: the team gets no "
            "Slack message",
            put,
        )
    if parameter.get("Type") != "SecureString":
        return warn(
            name,
            f"{parameter_name} is a {parameter.get('Type')} parameter: the token is stored "
            "unencrypted",
            f"aws ssm delete-parameter --name {parameter_name}; then {put}",
        )
    token = token_of(str(parameter.get("Value") or "")) or ""
    if not token:
        if not slack_configured:
            return ok(name, "no token and no slack_channel: Slack is off")
        return warn(
            name, f"{parameter_name} holds no bot token: the team gets no Slack message", put
        )
    if not token.startswith("xoxb-"):
        return warn(name, f"{parameter_name} holds a token that is not a bot token (xoxb-...)", put)
    return ok(name, f"{parameter_name} is a SecureString holding a bot token")
