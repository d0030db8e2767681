"""A satellite region in the emulator, as `infra/satellite.py` makes one on AWS.

moto keeps one state per region, so a second region is just other clients: a checkpoint
bucket there, a launch template (with the satellite's user data when the home deployment
has an image: the agent writes to this region's bucket and reports to the home queue), an
instance role, the subnets of the region's default VPC, and the SSM parameter the control
plane reads (`respot.aws.satellites`), with the same JSON the stack writes.

Its instances are run by the local fleet like the home region's (the market sees the
launches of the control plane's client in this region); their EC2 events are put on the
home bus directly, as the satellite stack's forwarding rules deliver them on AWS. The rules
exist as the stack makes them (one per wiring rule, the same pattern, the home bus as their
target with the `ForwardDeadLetters` queue behind it, an instance profile on the launch
template), so `respot doctor` reads a local satellite as it reads a deployed one; moto does
not run them. Not emulated: IAM (`RuntimeOptions(iam=True)` covers the home stack only, so
the runtime refuses it together with `extra_regions`).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

import boto3

from infra.local.cloud import (
    CREDENTIALS,
    LocalDeployment,
    launch_template_data,
    service_trust,
)
from infra.local.sandbox import FRAMEWORK_PYTHON
from infra.regions import SATELLITE_TAG, satellite_parameter_name
from infra.userdata import agent_environment, render_user_data
from infra.wiring import WIRING
from respot.control import config as cfg
from respot.core.placement import SubnetRef


@dataclass(frozen=True)
class LocalSatellite:
    """What `provision_satellite` created in one region."""

    region: str
    bucket: str
    launch_template_id: str
    instance_role_id: str
    subnets: tuple[SubnetRef, ...]
    parameter_name: str
    instance_profile: str = ""
    forward_rules: tuple[str, ...] = ()
    forward_dead_letters_url: str = ""

    def client(self, service: str, endpoint_url: str) -> Any:
        return regional_client(service, self.region, endpoint_url)


def regional_client(service: str, region: str, endpoint_url: str) -> Any:
    """A client of the emulator in `region`."""
    session = boto3.session.Session(region_name=region, **CREDENTIALS)
    return session.client(service, endpoint_url=endpoint_url)


def provision_satellite(
    home: LocalDeployment, region: str, *, availability_zones: int = 2
) -> LocalSatellite:
    """Create a satellite of `home` in `region` (its parameter under `/<home.name>`)."""
    if region == home.region:
        raise ValueError(f"{region} is the home region")
    url = home.endpoint_url
    s3, ec2, ssm, iam = (regional_client(n, region, url) for n in ("s3", "ec2", "ssm", "iam"))
    if home.log_group:  # the agents there ship their output to this region's group
        regional_client("logs", region, url).create_log_group(logGroupName=home.log_group)
    bucket = f"{home.name}-{region}-checkpoints"
    s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": region})
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    role = iam.create_role(
        RoleName=f"{home.name}-{region}-instances",
        AssumeRolePolicyDocument=service_trust("ec2.amazonaws.com"),
    )["Role"]
    profile = iam.create_instance_profile(InstanceProfileName=role["RoleName"])["InstanceProfile"]
    iam.add_role_to_instance_profile(
        InstanceProfileName=profile["InstanceProfileName"], RoleName=role["RoleName"]
    )
    user_data: dict[str, Any] = {"IamInstanceProfile": {"Arn": profile["Arn"]}}
    if home.image is not None:
        text = render_user_data(
            agent_environment(
                bucket=bucket,
                agent_queue_url=home.queue_urls["agent-events"],
                region=region,
                log_group=home.log_group or "",
                asset_bucket=home.image.asset_bucket,
                asset_key=home.image.asset_key,
                framework_python=FRAMEWORK_PYTHON,
                queue_region=home.region,
            )
        )
        user_data["UserData"] = base64.b64encode(text.encode()).decode()
    template_id = ec2.create_launch_template(
        LaunchTemplateName=f"{home.name}-instances",
        LaunchTemplateData=launch_template_data(user_data),
        TagSpecifications=[
            {
                "ResourceType": "launch-template",
                "Tags": [{"Key": "respot:managed", "Value": home.name}],
            }
        ],
    )["LaunchTemplate"]["LaunchTemplateId"]
    by_zone: dict[str, SubnetRef] = {}
    for subnet in sorted(ec2.describe_subnets()["Subnets"], key=lambda x: x["AvailabilityZone"]):
        zone = subnet["AvailabilityZone"]
        by_zone.setdefault(zone, SubnetRef(subnet["SubnetId"], zone))
    subnets = tuple(list(by_zone.values())[:availability_zones])
    name = satellite_parameter_name(home.name)
    ssm.put_parameter(
        Name=name,
        Type="String",
        Overwrite=True,
        Value=json.dumps(
            {
                "home_stack": home.name,
                "region": region,
                "launch_template_id": template_id,
                "bucket": bucket,
                "instance_role_id": role["RoleId"],
                "subnets": [
                    {"subnet_id": s.subnet_id, "availability_zone": s.availability_zone}
                    for s in subnets
                ],
            }
        ),
    )
    rules, dead_letters = _forwarding(home, region)
    return LocalSatellite(
        region=region,
        bucket=bucket,
        launch_template_id=template_id,
        instance_role_id=role["RoleId"],
        subnets=subnets,
        parameter_name=name,
        instance_profile=profile["InstanceProfileName"],
        forward_rules=rules,
        forward_dead_letters_url=dead_letters,
    )


def _forwarding(home: LocalDeployment, region: str) -> tuple[tuple[str, ...], str]:
    """The satellite stack's forwarding rules and their dead-letter queue (not run by moto)."""
    url = home.endpoint_url
    events, sqs, iam = (regional_client(n, region, url) for n in ("events", "sqs", "iam"))
    queue_url = sqs.create_queue(QueueName=f"{home.name}-{region}-forward-dead-letters")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    role_arn = iam.create_role(
        RoleName=f"{home.name}-{region}-forwarding",
        AssumeRolePolicyDocument=service_trust("events.amazonaws.com"),
    )["Role"]["Arn"]
    account = queue_arn.split(":")[4]
    bus = f"arn:aws:events:{home.region}:{account}:event-bus/default"
    names = []
    for rule in WIRING.rules:
        name = f"{home.name}-{region}-forward-{rule.name}"[:64]
        events.put_rule(
            Name=name,
            EventPattern=json.dumps(rule.pattern),
            State="ENABLED",
            Tags=[{"Key": SATELLITE_TAG, "Value": home.name}],  # the stack tags all it makes
        )
        events.put_targets(
            Rule=name,
            Targets=[
                {
                    "Id": "HomeBus",
                    "Arn": bus,
                    "RoleArn": role_arn,
                    "DeadLetterConfig": {"Arn": queue_arn},
                    "RetryPolicy": {"MaximumRetryAttempts": 10, "MaximumEventAgeInSeconds": 3600},
                }
            ],
        )
        names.append(name)
    return tuple(names), queue_url


def satellite_env(satellites: list[LocalSatellite]) -> dict[str, str]:
    """The two variables the home stack adds to every function with `extra_regions`."""
    if not satellites:
        return {}
    return {
        cfg.ENV_SATELLITE_REGIONS: ",".join(s.region for s in satellites),
        cfg.ENV_SATELLITE_PARAMETER: satellites[0].parameter_name,
    }
