"""`respot doctor` with extra regions, on the moto server in two regions (three named).

The home deployment is `cloud.provision`; the satellite in us-west-2 is what
`infra.local.satellite.provision_satellite` makes as the satellite stack does (the parameter,
the launch template with its instance profile, the forwarding rules to the home bus and their
dead-letter queue). Service Quotas, which moto implements for `vpc` only, is botocore's
Stubber, as in `test_checks.py`.
"""

from __future__ import annotations

import secrets
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.stub import Stubber

from infra.local import cloud
from infra.local.satellite import LocalSatellite, provision_satellite
from infra.wiring import WIRING
from respot.doctor import Status, Target, run_checks

WEST, EU = "us-west-2", "eu-west-1"


class Account:
    """A home deployment with a satellite in us-west-2, and the doctor's view of it."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.home = cloud.provision(endpoint, prefix=f"sd{secrets.token_hex(3)}")
        self.west: LocalSatellite = provision_satellite(self.home, WEST)
        self.quota: dict[str, float] = {"L-3819A6DF": 64.0, "L-DB2E81BA": 64.0}

    def client(self, service: str, region: str = "us-east-1") -> Any:
        return boto3.client(service, region_name=region, endpoint_url=self.endpoint)

    def regional(self, service: str, region: str) -> Any:
        if service == "service-quotas":
            return self._quotas(region)
        return self.client(service, region)

    def _quotas(self, region: str) -> Any:
        client = boto3.client(
            "service-quotas", region_name=region, config=Config(retries={"max_attempts": 0})
        )
        stub = Stubber(client)
        for code, value in self.quota.items():
            stub.add_response(
                "get_service_quota",
                {"Quota": {"ServiceCode": "ec2", "QuotaCode": code, "Value": value}},
                {"ServiceCode": "ec2", "QuotaCode": code},
            )
        stub.activate()
        return client

    def doctor(self, *regions: str) -> dict[str, Any]:
        target = Target(
            region=self.home.region,
            instance_types=("g5.xlarge",),
            stack_name=self.home.name,
            extra_regions=regions or (WEST,),
            satellite_parameter=self.west.parameter_name,
            forward_rules=len(WIRING.rules),
        )
        findings = run_checks(target, self.client, self.regional)
        return {f.check: f for f in findings}


@pytest.fixture
def account(moto_endpoint: str, aws_credentials: None) -> Account:
    return Account(moto_endpoint)


def test_a_deployed_satellite_passes_every_check_named_by_its_region(account: Account) -> None:
    found = account.doctor()
    west = {c: f for c, f in found.items() if WEST in c}
    assert set(west) == {
        f"satellite {WEST}",
        f"forwarding {WEST}",
        f"forward dead letters {WEST}",
        f"instance type g5.xlarge ({WEST})",
        f"quota G and VT spot ({WEST})",
        f"quota G and VT on-demand ({WEST})",
    }, sorted(west)
    assert all(f.status is Status.OK for f in west.values()), west
    assert account.west.launch_template_id in found[f"satellite {WEST}"].summary
    assert account.west.instance_profile in found[f"satellite {WEST}"].summary
    assert f"{len(WIRING.rules)} enabled rules" in found[f"forwarding {WEST}"].summary


def test_an_extra_region_without_its_stack_blocks_with_the_deploy_command(
    account: Account,
) -> None:
    found = account.doctor(WEST, EU)
    assert found[f"satellite {WEST}"].status is Status.OK
    missing = found[f"satellite {EU}"]
    assert missing.status is Status.BLOCKER
    assert f"no parameter {account.west.parameter_name} in {EU}" in missing.summary
    assert missing.fix == f"cdk deploy {account.home.name}-{EU} -c extra_regions={WEST},{EU}"
    assert found[f"forwarding {EU}"].status is Status.BLOCKER  # no rule forwards from there


def test_a_disabled_rule_a_full_dead_letter_queue_and_a_zero_quota_are_named(
    account: Account,
) -> None:
    events, sqs = account.client("events", WEST), account.client("sqs", WEST)
    rule = account.west.forward_rules[0]
    events.disable_rule(Name=rule)
    sqs.send_message(QueueUrl=account.west.forward_dead_letters_url, MessageBody="{}")
    account.quota["L-3819A6DF"] = 0.0
    found = account.doctor()
    forwarding = found[f"forwarding {WEST}"]
    assert forwarding.status is Status.BLOCKER and rule in forwarding.summary
    assert forwarding.fix == f"aws events enable-rule --name {rule} --region {WEST}"
    letters = found[f"forward dead letters {WEST}"]
    assert letters.status is Status.WARN and letters.summary.startswith("1 EC2 event(s)")
    url = account.west.forward_dead_letters_url
    assert f"aws sqs receive-message --queue-url {url} --region {WEST}" in letters.fix
    assert f"aws sqs purge-queue --queue-url {url} --region {WEST}" in letters.fix
    quota = found[f"quota G and VT spot ({WEST})"]
    assert quota.status is Status.BLOCKER
    assert quota.fix.endswith(f"--quota-code L-3819A6DF --desired-value 4 --region {WEST}")


def test_an_instance_profile_gone_blocks_launches_there(account: Account) -> None:
    iam = account.client("iam")
    profile = account.west.instance_profile
    (role,) = iam.get_instance_profile(InstanceProfileName=profile)["InstanceProfile"]["Roles"]
    iam.remove_role_from_instance_profile(InstanceProfileName=profile, RoleName=role["RoleName"])
    iam.delete_instance_profile(InstanceProfileName=profile)
    finding = account.doctor()[f"satellite {WEST}"]
    assert finding.status is Status.BLOCKER
    assert f"instance profile {profile}" in finding.summary
    assert "Invalid IAM Instance Profile" in finding.summary
    assert finding.fix == f"cdk deploy {account.home.name}-{WEST} -c extra_regions={WEST}"


def test_a_launch_template_gone_blocks(account: Account) -> None:
    ec2 = account.client("ec2", WEST)
    ec2.delete_launch_template(LaunchTemplateId=account.west.launch_template_id)
    finding = account.doctor()[f"satellite {WEST}"]
    assert finding.status is Status.BLOCKER
    assert f"launch template {account.west.launch_template_id} is gone" in finding.summary


def test_another_stage_s_satellite_in_the_region_is_not_this_deployment_s(
    account: Account,
) -> None:
    # GIVEN another deployment's satellite in us-west-2, forwarding to the same home bus,
    # with a disabled rule and dead letters
    other_home = cloud.provision(account.endpoint, prefix=f"o{secrets.token_hex(3)}")
    other = provision_satellite(other_home, WEST)
    account.client("events", WEST).disable_rule(Name=other.forward_rules[0])
    account.client("sqs", WEST).send_message(
        QueueUrl=other.forward_dead_letters_url, MessageBody="{}"
    )
    # WHEN the doctor checks this deployment THEN none of that is its finding
    found = account.doctor()
    assert found[f"forwarding {WEST}"].status is Status.OK
    assert f"{len(WIRING.rules)} enabled rules" in found[f"forwarding {WEST}"].summary
    assert found[f"forward dead letters {WEST}"].status is Status.OK
