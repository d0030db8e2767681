"""A satellite region's instances read the job's secrets and ECR image in the home region.

Nothing is replicated: the satellite instance role holds the home instance role's statements
for `secretsmanager:GetSecretValue` and the ECR pull, on the same resources (the home region's
`respot/jobs/...` secrets, this account's repositories there). Evaluated on the synthesized
templates with `infra.iam_eval`, for the exact requests the agent makes
(`respot.agent.regional`, `respot.agent.secrets`, `respot.agent.launch.pull`).
"""

from __future__ import annotations

from typing import Any

import pytest

from infra.iam_eval import allowed
from infra.local.iam import Resolver, _logical_id
from tests.infra.test_satellite import ACCOUNT, HOME, _resources, synthesized  # noqa: F401

SECRET = f"arn:aws:secretsmanager:{HOME}:{ACCOUNT}:secret:respot/jobs/wandb-AbCdEf"
REPOSITORY = f"arn:aws:ecr:{HOME}:{ACCOUNT}:repository/team/train"
PULL = ("ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability")
SIDS = ("ReadJobSecrets", "EcrLogin", "PullJobImages")


def _instance_docs(
    template: dict[str, Any], region: str, role_prefix: str = "FleetInstanceRole"
) -> list[dict[str, Any]]:
    role = _logical_id(template, role_prefix)
    resolve = Resolver({}, region)
    return [
        resolve(p["Properties"]["PolicyDocument"])
        for p in _resources(template, "AWS::IAM::Policy")
        if {"Ref": role} in p["Properties"]["Roles"]
    ]


def _statements(docs: list[dict[str, Any]], sid: str) -> list[dict[str, Any]]:
    found = [st for doc in docs for st in doc["Statement"] if st.get("Sid") == sid]
    assert found, sid
    return found


@pytest.mark.parametrize("region", ["us-west-2", "eu-west-1"])
def test_a_satellite_instance_reads_home_secrets_and_images(synthesized, region):  # noqa: F811
    docs = _instance_docs(synthesized["satellites"][region], region)
    # the secret a job names by ARN (in the home region), through a client of that region
    assert allowed(docs, "secretsmanager:GetSecretValue", SECRET)
    # ... and nothing else: another name, its own region, another account
    assert not allowed(
        docs, "secretsmanager:GetSecretValue", SECRET.replace("respot/jobs/", "prod/")
    )
    assert not allowed(docs, "secretsmanager:GetSecretValue", SECRET.replace(HOME, region))
    assert not allowed(docs, "secretsmanager:GetSecretValue", SECRET.replace(ACCOUNT, "2" * 12))
    # ECR: the login token (no resource type) and the pull from the home registry
    assert allowed(docs, "ecr:GetAuthorizationToken", "*")
    for action in PULL:
        assert allowed(docs, action, REPOSITORY)
        assert not allowed(docs, action, REPOSITORY.replace(ACCOUNT, "2" * 12))
    assert not allowed(docs, "ecr:PutImage", REPOSITORY)


def test_the_satellite_grants_are_exactly_the_home_instance_role_s(synthesized):  # noqa: F811
    home = _instance_docs(synthesized["home"], HOME)
    # At home the job's secrets are read with the job's credentials (the job role's
    # statement, narrowed per job by the session policy; docs/security.md)
    home_job = _instance_docs(synthesized["home"], HOME, "CredentialsJobRole")
    assert not [st for doc in home for st in doc["Statement"] if st.get("Sid") == SIDS[0]]
    for region, template in synthesized["satellites"].items():
        there = _instance_docs(template, region)
        for sid in SIDS:
            # same actions, resources and conditions (resolved: the home region's ARNs)
            expected = _statements(home_job if sid == "ReadJobSecrets" else home, sid)
            assert _statements(there, sid) == expected, (region, sid)
