"""What the stack sets up for verified identity and ownership (issue 12)."""

from __future__ import annotations

from typing import Any

from respot.identity.proofs import ENV_ADMINS, ENV_STS_URL
from tests.infra.conftest import respot_template


def _functions(resources: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in resources.values() if r["Type"] == "AWS::Lambda::Function"]


def test_functions_trust_only_the_regional_sts_endpoint(resources: dict[str, Any]) -> None:
    for function in _functions(resources):
        url = function["Properties"]["Environment"]["Variables"][ENV_STS_URL]
        assert url == {
            "Fn::Join": ["", ["https://sts.", {"Ref": "AWS::Region"}, ".amazonaws.com/"]]
        }


def test_used_proofs_expire_by_ttl(resources: dict[str, Any]) -> None:
    (table,) = [r for r in resources.values() if r["Type"] == "AWS::DynamoDB::Table"]
    assert table["Properties"]["TimeToLiveSpecification"] == {
        "AttributeName": "ttl",
        "Enabled": True,
    }


def test_researchers_cannot_read_stored_submissions(resources: dict[str, Any]) -> None:
    (policy,) = [
        r
        for r in resources.values()
        if r["Type"] == "AWS::IAM::ManagedPolicy"
        and r["Properties"].get("ManagedPolicyName") == "RespotResearcherPolicy"
    ]
    (deny,) = [
        s
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
        if s["Effect"] == "Deny" and s["Sid"] == "NoSubmissions"
    ]
    assert deny["Action"] == "s3:GetObject"
    assert deny["Resource"]["Fn::Join"][1][-1] == "/jobs/*/submission.json"


def test_admin_principals_reach_the_functions() -> None:
    admin = "arn:aws:iam::123456789012:role/RespotAdmin"
    _, template = respot_template(admin_principal_arns=(admin,))
    resources = template.to_json()["Resources"]
    for function in _functions(resources):
        assert function["Properties"]["Environment"]["Variables"][ENV_ADMINS] == admin


def test_admin_principals_must_be_iam_arns() -> None:
    import pytest

    from infra.settings import DeploySettings, DeploySettingsError

    with pytest.raises(DeploySettingsError, match="admin_principal_arns: 'bob'"):
        DeploySettings(admin_principal_arns=("bob",))
