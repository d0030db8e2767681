"""A satellite region's instances read the job's secrets and ECR image in the home region.

Nothing is replicated: the satellite instance role holds the home instance role's statements
for the ECR pull, on the same resources (this account's repositories in the home region); the
job's secrets (the home region's `respot/jobs/...`) are read with the job's credentials from
the home credentials function, as at home, and with the instance role nowhere. Evaluated on
the synthesized templates with `infra.iam_eval`, for the exact requests the agent makes
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
    job = _instance_docs(synthesized["home"], HOME, "CredentialsJobRole")
    # the secret a job names by ARN (in the home region): the job's credentials (the job
    # role, narrowed per job by the session policy), never the instance role
    assert allowed(job, "secretsmanager:GetSecretValue", SECRET)
    assert not allowed(docs, "secretsmanager:GetSecretValue", SECRET)
    # ... and nothing else: another name, its own region, another account
    assert not allowed(job, "secretsmanager:GetSecretValue", SECRET.replace("respot/jobs/", "x/"))
    assert not allowed(job, "secretsmanager:GetSecretValue", SECRET.replace(HOME, region))
    assert not allowed(job, "secretsmanager:GetSecretValue", SECRET.replace(ACCOUNT, "2" * 12))
    # ECR: the login token (no resource type) and the pull from the home registry
    assert allowed(docs, "ecr:GetAuthorizationToken", "*")
    for action in PULL:
        assert allowed(docs, action, REPOSITORY)
        assert not allowed(docs, action, REPOSITORY.replace(ACCOUNT, "2" * 12))
    assert not allowed(docs, "ecr:PutImage", REPOSITORY)


def test_the_satellite_grants_are_exactly_the_home_instance_role_s(synthesized):  # noqa: F811
    home = _instance_docs(synthesized["home"], HOME)
    # The job's secrets are read with the job's credentials, at home and in a satellite (the
    # job role's statement, narrowed per job by the session policy; docs/security.md)
    for region, template in [(HOME, synthesized["home"]), *synthesized["satellites"].items()]:
        docs = _instance_docs(template, region)
        assert not [st for doc in docs for st in doc["Statement"] if st.get("Sid") == SIDS[0]]
    for region, template in synthesized["satellites"].items():
        there = _instance_docs(template, region)
        for sid in SIDS[1:]:
            # same actions, resources and conditions (resolved: the home region's ARNs)
            assert _statements(there, sid) == _statements(home, sid), (region, sid)
