"""Opt-in Session Manager access (`session_manager`): the SSM Agent's session permissions on
the instance role, nothing more of AmazonSSMManagedInstanceCore, and still no inbound port."""

from __future__ import annotations

from typing import Any

import pytest

from infra.constructs.session_manager import SESSION_MANAGER_ACTIONS
from infra.iam_eval import allowed
from infra.local.iam import Resolver, _logical_id
from infra.settings import DeploySettings, DeploySettingsError
from tests.infra.conftest import respot_template


@pytest.fixture(scope="module")
def with_sessions() -> dict[str, Any]:
    return respot_template(session_manager=True)[1].to_json()


def _instance_documents(template: dict[str, Any]) -> list[dict[str, Any]]:
    role = _logical_id(template, "FleetInstanceRole")
    resolve = Resolver({}, "us-east-1")
    return [
        resolve(r["Properties"]["PolicyDocument"])
        for r in template["Resources"].values()
        if r["Type"] == "AWS::IAM::Policy" and {"Ref": role} in r["Properties"].get("Roles", [])
    ]


def _ingress(template: dict[str, Any]) -> list[Any]:
    return [
        rule
        for r in template["Resources"].values()
        if r["Type"] == "AWS::EC2::SecurityGroup"
        for rule in r["Properties"].get("SecurityGroupIngress", [])
    ] + [r for r in template["Resources"].values() if r["Type"] == "AWS::EC2::SecurityGroupIngress"]


def test_with_the_option_instances_take_sessions_and_nothing_more(with_sessions):
    docs = _instance_documents(with_sessions)
    for action in SESSION_MANAGER_ACTIONS:
        assert allowed(docs, action, "*"), action
    for action in (
        "ssm:SendCommand",
        "ssm:GetParameter",
        "ec2messages:GetMessages",
        "ssm:PutInventory",
    ):
        assert not allowed(docs, action, "*"), action
    assert _ingress(with_sessions) == []


def test_without_it_and_without_workspaces_the_instances_cannot_register_with_ssm():
    plain = respot_template(workspaces=False)[1].to_json()
    docs = _instance_documents(plain)
    assert docs
    for action in SESSION_MANAGER_ACTIONS:
        assert not allowed(docs, action, "*"), action
    assert _ingress(plain) == []


def test_the_setting_reads_true_and_false_and_refuses_the_rest():
    assert DeploySettings.from_context({"session_manager": "true"}.get).session_manager
    assert DeploySettings.from_context({"session_manager": True}.get).session_manager
    assert not DeploySettings.from_context({"session_manager": "false"}.get).session_manager
    with pytest.raises(DeploySettingsError, match="session_manager 'maybe': give true or false"):
        DeploySettings.from_context({"session_manager": "maybe"}.get)
