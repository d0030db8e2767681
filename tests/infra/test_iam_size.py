"""IAM's size quotas hold for every role, however many extra regions the home stack serves.

IAM and AWS STS quotas (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html):
a role's inline policies together at most 10,240 characters, a managed policy at most 6,144,
whitespace not counted; 10 managed policies per role by default (20 on request). With the
satellite statements inline, each extra region added ~1,060 characters to every launching
role and the quota fell at about four extra regions; now they sit in one managed policy per
grant and name every region once (`aws:RequestedRegion` limits the request's region).

The template's intrinsics are resolved with long stand-ins (every Ref and attribute
100 characters, longer than any ARN the stack references), so the sizes are upper bounds.
"""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import assertions

from infra.local.iam import Resolver
from infra.settings import MAX_EXTRA_REGIONS, DeploySettings, DeploySettingsError
from infra.stack import RespotStack
from tests.infra.conftest import NO_BUNDLING

ROLE_INLINE_MAX = 10_240
MANAGED_POLICY_MAX = 6_144
MANAGED_PER_ROLE_MAX = 10
REGIONS = (
    "us-west-2", "us-east-2", "us-west-1", "ca-central-1", "eu-west-1", "eu-west-2",
    "eu-west-3", "eu-central-1", "eu-north-1", "eu-south-2", "ap-northeast-1",
    "ap-northeast-2", "ap-southeast-1", "ap-southeast-2", "ap-south-1", "sa-east-1",
)  # fmt: skip


class _LongStandIns(dict[str, dict[str, str]]):
    def get(self, key: str, default: Any = None) -> dict[str, str]:
        return _LONG


class _Long(dict[str, str]):
    def get(self, key: str, default: Any = None) -> str:
        return "arn:aws:sqs:us-east-1:123456789012:" + "x" * 65


_LONG = _Long()


def _home(regions: tuple[str, ...]) -> dict[str, Any]:
    stack = RespotStack(
        cdk.App(context=NO_BUNDLING),
        "Respot",
        settings=DeploySettings(extra_regions=regions),
        env=cdk.Environment(account="123456789012", region="us-east-1"),
    )
    return assertions.Template.from_stack(stack).to_json()


def _size(document: dict[str, Any]) -> int:
    """Characters IAM counts: the document without whitespace outside strings."""
    resolved = Resolver(_LongStandIns(), "us-east-1")(document)
    return len(json.dumps(resolved, separators=(",", ":")))


def _per_role(template: dict[str, Any]) -> dict[str, dict[str, list[int]]]:
    roles: dict[str, dict[str, list[int]]] = {
        lid: {"inline": [], "managed": []}
        for lid, r in template["Resources"].items()
        if r["Type"] == "AWS::IAM::Role"
    }
    for r in template["Resources"].values():
        kind = {"AWS::IAM::Policy": "inline", "AWS::IAM::ManagedPolicy": "managed"}.get(r["Type"])
        if kind is None:
            continue
        size = _size(r["Properties"]["PolicyDocument"])
        for role in r["Properties"].get("Roles", []):
            roles[role["Ref"]][kind].append(size)
    for lid, r in template["Resources"].items():
        if r["Type"] == "AWS::IAM::Role":
            roles[lid]["inline"] += [
                _size(p["PolicyDocument"]) for p in r["Properties"].get("Policies", [])
            ]
            roles[lid]["managed"] += [0 for _ in r["Properties"].get("ManagedPolicyArns", [])]
    return roles


@pytest.fixture(scope="module")
def widest() -> dict[str, Any]:
    assert len(REGIONS) == MAX_EXTRA_REGIONS
    return _home(REGIONS)


def test_every_role_stays_within_iams_size_quotas_at_the_most_extra_regions(widest):
    roles = _per_role(widest)
    functions = [lid for lid in roles if lid.startswith("Functions") and "Role" in lid]
    assert len(functions) >= 8
    for lid, sizes in roles.items():
        assert sum(sizes["inline"]) < ROLE_INLINE_MAX, (lid, sizes)
        assert all(size < MANAGED_POLICY_MAX for size in sizes["managed"]), (lid, sizes)
        assert len(sizes["managed"]) <= MANAGED_PER_ROLE_MAX, (lid, sizes)
    # the launching roles do carry the satellite policies (nothing was dropped to fit)
    reconcile = next(lid for lid in functions if lid.startswith("FunctionsReconcileRole"))
    assert len(roles[reconcile]["managed"]) == 3


def test_no_inline_policy_names_a_satellite_region(widest):
    # what grows with the regions lives in the managed policies only
    for lid, r in widest["Resources"].items():
        if r["Type"] != "AWS::IAM::Policy":
            continue
        text = json.dumps(r["Properties"]["PolicyDocument"])
        assert "Satellite" not in text, lid
        assert not [region for region in REGIONS if region in text], lid


def test_more_extra_regions_than_the_policies_are_sized_for_are_refused_with_the_fix():
    with pytest.raises(DeploySettingsError, match=f"at most {MAX_EXTRA_REGIONS}"):
        DeploySettings(extra_regions=(*REGIONS, "me-central-1"))
