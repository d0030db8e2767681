"""The doctor's checks of each extra region (`extra_regions`, docs/deploy.md "Extra regions").

The control plane learns its satellites from the SSM parameter each satellite stack writes
in its region (`respot.aws.satellites.load_satellites`, at every cold start); a parameter
missing or malformed there fails the functions, so it is checked first, with what it names:
the launch template (and the instance profile on it, whose role must be the one the control
plane accepts agent messages from), the subnets. Then what carries the instances' EC2 events
home: the forwarding rules (this deployment's, by their `respot:satellite-of` tag; targeting
the home bus; enabled) and their dead-letter queue (empty). Then the instance types and
spot vCPU quotas in that region, with the home checks. Every finding names the region and
its fix.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from respot.aws.satellites import Satellite, SatelliteError, parse_satellite
from respot.core.lifecycle import SATELLITE_TAG
from respot.doctor.checks import error_code, error_text
from respot.doctor.findings import Finding, blocker, ok, warn
from respot.doctor.target import Target

RegionalFactory = Callable[[str, str], Any]  # (service, region) -> boto3 client
_ENABLED = ("ENABLED", "ENABLED_WITH_ALL_CLOUDTRAIL_MANAGEMENT_EVENTS")


def deploy_fix(target: Target, region: str) -> str:
    """The command that (re)deploys one satellite stack."""
    regions = ",".join(target.extra_regions)
    return f"cdk deploy {target.stack_name}-{region} -c extra_regions={regions}"


def read_satellite(
    target: Target, ssm: Any, region: str
) -> tuple[Satellite | None, Finding | None]:
    """The region's published satellite, or the blocker that says why there is none."""
    name = f"satellite {region}"
    parameter = target.satellite_parameter
    try:
        text = ssm.get_parameter(Name=parameter)["Parameter"]["Value"]
    except ClientError as exc:
        if error_code(exc) != "ParameterNotFound":
            raise
        return None, blocker(
            name,
            f"no parameter {parameter} in {region}: the control plane reads it at every cold "
            "start and fails without it (its satellite stack is not deployed there)",
            deploy_fix(target, region),
        )
    try:
        satellite = parse_satellite(region, text)
        home = json.loads(text).get("home_stack")
    except (SatelliteError, ValueError, AttributeError) as exc:
        return None, blocker(name, f"{parameter} in {region}: {exc}", deploy_fix(target, region))
    if home != target.stack_name:
        return None, blocker(
            name,
            f"{parameter} in {region} belongs to {home}, not {target.stack_name}",
            f"deploy this stage's satellite there ({deploy_fix(target, region)}) or drop "
            f"{region} from extra_regions",
        )
    return satellite, None


def check_satellite(
    target: Target, satellite: Satellite, ec2: Any, iam: Any, region: str
) -> Finding:
    """The launch template, its instance profile and role, and the subnets exist there."""
    name = f"satellite {region}"
    fix = deploy_fix(target, region)
    template = satellite.launch_template_id
    try:
        versions = ec2.describe_launch_template_versions(
            LaunchTemplateId=template, Versions=["$Latest"]
        )["LaunchTemplateVersions"]
    except ClientError as exc:
        if not error_code(exc).startswith("InvalidLaunchTemplate"):
            raise
        return blocker(
            name, f"launch template {template} is gone from {region}: no launch there works", fix
        )
    data = versions[0].get("LaunchTemplateData", {}) if versions else {}
    profile_ref = data.get("IamInstanceProfile", {})
    profile = str(profile_ref.get("Name") or profile_ref.get("Arn", "").rsplit("/", 1)[-1])
    if not profile:
        return blocker(name, f"launch template {template} in {region} has no instance profile", fix)
    try:
        roles = iam.get_instance_profile(InstanceProfileName=profile)["InstanceProfile"]["Roles"]
    except ClientError as exc:
        if error_code(exc) != "NoSuchEntity":
            raise
        return blocker(
            name,
            f"instance profile {profile} (on {template} in {region}) does not exist: launches "
            "there fail with 'Invalid IAM Instance Profile'",
            fix,
        )
    if satellite.instance_role_id not in {r.get("RoleId") for r in roles}:
        return blocker(
            name,
            f"instance profile {profile} in {region} holds no role with id "
            f"{satellite.instance_role_id}, the one the control plane accepts agent messages "
            "from: every message from there would be refused",
            fix,
        )
    subnets = [s.subnet_id for s in satellite.subnets]
    try:
        ec2.describe_subnets(SubnetIds=subnets)
    except ClientError as exc:
        if not error_code(exc).startswith("InvalidSubnet"):
            raise
        return blocker(name, f"a subnet the parameter lists is gone: {error_text(exc)}", fix)
    zones = sorted({s.availability_zone for s in satellite.subnets})
    return ok(
        name,
        f"{target.satellite_parameter}: launch template {template}, instance profile "
        f"{profile}, {len(subnets)} subnets ({', '.join(zones)})",
    )


def _rules(events: Any) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        page = events.list_rules(**({"NextToken": token} if token else {}))
        rules += page.get("Rules", [])
        token = page.get("NextToken")
        if not token:
            return rules


def _tag(events: Any, arn: str, key: str) -> str | None:
    tags = events.list_tags_for_resource(ResourceARN=arn).get("Tags", [])
    return next((str(t["Value"]) for t in tags if t.get("Key") == key), None)


def check_forwarding(
    target: Target, events: Any, sqs: Any, region: str, *, account: str
) -> list[Finding]:
    """The rules forwarding EC2 events to the home bus are enabled; their dead letters none."""
    name = f"forwarding {region}"
    home_bus = f":events:{target.region}:{account}:event-bus/default"
    forwarding: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    for rule in _rules(events):
        found = events.list_targets_by_rule(Rule=rule["Name"]).get("Targets", [])
        home = [t for t in found if str(t.get("Arn", "")).endswith(home_bus)]
        # Another stage's satellite forwards to the same bus: only this deployment's rules.
        if home and _tag(events, rule["Arn"], SATELLITE_TAG) == target.stack_name:
            forwarding.append((rule, home))
    why = (
        "the control plane would not see instances there start, get interrupted or stop "
        "(launches and interruptions there go unanswered until reconcile notices)"
    )
    if not forwarding:
        return [
            blocker(
                name,
                f"no EventBridge rule in {region} forwards to the default bus of "
                f"{target.region}: {why}",
                deploy_fix(target, region),
            )
        ]
    findings: list[Finding] = []
    disabled = sorted(r["Name"] for r, _ in forwarding if r.get("State") not in _ENABLED)
    if disabled:
        findings.append(
            blocker(
                name,
                f"{len(disabled)} of the {len(forwarding)} forwarding rules in {region} are "
                f"disabled ({', '.join(disabled)}): {why}",
                "; ".join(f"aws events enable-rule --name {n} --region {region}" for n in disabled),
            )
        )
    elif len(forwarding) < target.forward_rules:
        findings.append(
            blocker(
                name,
                f"{len(forwarding)} rules in {region} forward to {target.region}; the "
                f"satellite stack makes {target.forward_rules}",
                deploy_fix(target, region),
            )
        )
    else:
        findings.append(
            ok(name, f"{len(forwarding)} enabled rules forward EC2 events to {target.region}")
        )
    queues = sorted(
        {
            str(t["DeadLetterConfig"]["Arn"])
            for _, home in forwarding
            for t in home
            if t.get("DeadLetterConfig", {}).get("Arn")
        }
    )
    if not queues:
        dropped = warn(
            f"forward dead letters {region}",
            f"the forwarding rules in {region} have no dead-letter queue: an event "
            "EventBridge cannot deliver home is dropped",
            deploy_fix(target, region),
        )
        return [*findings, dropped]
    return findings + [_dead_letters(sqs, arn, region) for arn in queues]


def _dead_letters(sqs: Any, queue_arn: str, region: str) -> Finding:
    name = f"forward dead letters {region}"
    _, _, _, _, owner, queue = queue_arn.split(":", 5)
    url = sqs.get_queue_url(QueueName=queue, QueueOwnerAWSAccountId=owner)["QueueUrl"]
    attributes = sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    waiting = sum(int(v) for v in attributes.values())
    if waiting == 0:
        return ok(name, f"{queue} is empty")
    # No redrive: SQS's StartMessageMoveTask takes only dead-letter queues of SQS queues (these
    # are EventBridge targets'), and PutEvents refuses the aws.ec2 source. What the events
    # said, reconcile learns later: it looks at every live job each minute (stuck launches,
    # silent instances).
    return warn(
        name,
        f"{waiting} EC2 event(s) from {region} could not be put on the home bus and wait in "
        f"{queue}; they cannot be replayed (EventBridge refuses aws.ec2 from PutEvents, SQS "
        "redrive takes only SQS queues' dead letters); the control plane learned of those "
        "launches and interruptions only from reconcile (stuck launches, silent instances), "
        "later",
        f"read why (ERROR_CODE, ERROR_MESSAGE): aws sqs receive-message --queue-url {url} "
        f"--region {region} --max-number-of-messages 10 --message-attribute-names All; fix "
        f"that (the forwarding role, the home bus), then: aws sqs purge-queue --queue-url "
        f"{url} --region {region}",
    )


def region_suffixed(findings: list[Finding], region: str) -> list[Finding]:
    """Findings of a home check run in `region`, named with it."""
    return [
        Finding(f"{f.check} ({region})", f.status, f.summary, f.fix) if region not in f.check else f
        for f in findings
    ]
