"""Once the stack is deployed, `respot doctor` checks the extra regions its functions carry
(RESPOT_SATELLITE_REGIONS, what the control plane uses), not only cdk.json's, and names the
drift between the two with the fix. On the moto server: the home deployment and its us-west-2
satellite of `test_satellites.py`, plus a CloudFormation stack of the deployment's name
holding a CDK-like helper function (no respot environment) and a control-plane function."""

from __future__ import annotations

import json
import secrets
from typing import Any

import pytest

from respot.control.config import ENV_LAUNCH_TEMPLATE_ID, ENV_SATELLITE_REGIONS
from respot.doctor import Status, Target, run_checks
from respot.doctor.deployed import CHECK, deployed_regions
from tests.doctor.test_satellites import EU, WEST, Account


def deploy_stack(account: Account, regions: str | None) -> None:
    """The stack as CloudFormation lists it: a helper function first, then `commands`."""
    iam = account.client("iam")
    role = iam.create_role(RoleName=f"fn-{secrets.token_hex(4)}", AssumeRolePolicyDocument="{}")[
        "Role"
    ]["Arn"]
    variables = {ENV_LAUNCH_TEMPLATE_ID: "lt-0123456789abcdef0"}
    if regions is not None:
        variables[ENV_SATELLITE_REGIONS] = regions

    def function(env: dict[str, str]) -> dict[str, Any]:
        properties: dict[str, Any] = {
            "Role": role,
            "Runtime": "python3.12",
            "Handler": "index.handler",
            "Code": {"ZipFile": "def handler(event, context): pass"},
        }
        if env:
            properties["Environment"] = {"Variables": env}
        return {"Type": "AWS::Lambda::Function", "Properties": properties}

    template = {
        "Resources": {
            "LogRetentionAaBbCc": function({}),
            "CommandsFunction1A2B3C": function(variables),
        }
    }
    account.client("cloudformation").create_stack(
        StackName=account.home.name, TemplateBody=json.dumps(template)
    )


def doctor(account: Account, *cdk_json_regions: str) -> dict[str, Any]:
    target = Target(
        region=account.home.region,
        instance_types=("g5.xlarge",),
        stack_name=account.home.name,
        extra_regions=cdk_json_regions,
        satellite_parameter=account.west.parameter_name,
    )
    return {f.check: f for f in run_checks(target, account.client, account.regional)}


@pytest.fixture
def account(moto_endpoint: str, aws_credentials: None) -> Account:
    return Account(moto_endpoint)


def test_before_the_first_deploy_cdk_json_s_regions_are_checked(account: Account) -> None:
    found = doctor(account, WEST)
    assert CHECK not in found
    assert found[f"satellite {WEST}"].status is Status.OK


def test_a_deployment_as_cdk_json_says_is_ok(account: Account) -> None:
    deploy_stack(account, WEST)
    found = doctor(account, WEST)
    assert found[CHECK].status is Status.OK
    assert f"extra regions: {WEST} (as cdk.json)" in found[CHECK].summary
    assert found[f"satellite {WEST}"].status is Status.OK


def test_regions_the_deployed_functions_carry_are_checked_when_cdk_json_forgot_them(
    account: Account,
) -> None:
    # GIVEN a deployment with the us-west-2 satellite and a cdk.json without extra_regions
    deploy_stack(account, WEST)
    found = doctor(account)
    # THEN the drift is named with both lists and the fix, and us-west-2 is checked anyway
    drift = found[CHECK]
    assert drift.status is Status.WARN
    assert f"{ENV_SATELLITE_REGIONS}={WEST} but cdk.json (and -c) say extra_regions=(none)" in (
        drift.summary
    )
    assert drift.fix.startswith(
        f"redeploy with the intended extra_regions: cdk deploy {account.home.name} (without "
        f"extra_regions), then cdk destroy {account.home.name}-{WEST}"
    )
    assert found[f"satellite {WEST}"].status is Status.OK
    assert found[f"forwarding {WEST}"].status is Status.OK


def test_a_region_cdk_json_adds_is_checked_too_and_named(account: Account) -> None:
    deploy_stack(account, WEST)
    found = doctor(account, EU)
    drift = found[CHECK]
    assert drift.status is Status.WARN
    assert f"carry {ENV_SATELLITE_REGIONS}={WEST} but cdk.json (and -c) say extra_regions={EU}" in (
        drift.summary
    )
    assert f"cdk deploy --all -c extra_regions={EU}, then cdk destroy" in drift.fix
    assert f"set extra_regions to {WEST} in cdk.json" in drift.fix
    assert found[f"satellite {WEST}"].status is Status.OK  # what the control plane uses
    assert found[f"satellite {EU}"].status is Status.BLOCKER  # what the next deploy needs


def test_a_deployment_without_extra_regions_against_a_cdk_json_with_them(
    account: Account,
) -> None:
    deploy_stack(account, None)
    found = doctor(account, WEST)
    assert found[CHECK].status is Status.WARN
    assert f"{ENV_SATELLITE_REGIONS}=(none) but cdk.json (and -c) say extra_regions={WEST}" in (
        found[CHECK].summary
    )
    assert found[CHECK].fix.endswith("drop extra_regions")


def test_the_helper_function_is_not_taken_for_the_control_plane(account: Account) -> None:
    deploy_stack(account, f"{WEST},{EU}")
    assert deployed_regions(
        account.client("cloudformation"), account.client("lambda"), stack_name=account.home.name
    ) == (WEST, EU)
    assert (
        deployed_regions(
            account.client("cloudformation"), account.client("lambda"), stack_name="NotDeployed"
        )
        is None
    )
