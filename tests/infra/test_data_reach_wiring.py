"""The stack tells the SDK and the commands function what its instances read data from, as
the instance role grants it: the deployment parameter's `data_buckets` and the functions'
RESPOT_DATA_BUCKETS are the stack's data_bucket_arns, and the rule (`respot.spec.reach`) reads each
entry as exactly the bucket and prefix the synthesized instance policy grants."""

from __future__ import annotations

import json
from typing import Any

import pytest

from respot.client.deployment import Deployment
from respot.control import config
from respot.spec.reach import data_grant
from tests.infra.conftest import respot_template

GRANTED = ("arn:aws:s3:::datasets/imagenet", "raw-data", "arn:aws:s3:::team-*")


@pytest.fixture(scope="module")
def resources() -> dict[str, Any]:
    _, template = respot_template(data_bucket_arns=list(GRANTED))
    return template.to_json()["Resources"]


def _text(value: Any) -> str:
    """A template value as text, its pseudo parameters resolved as in the aws partition."""
    if isinstance(value, str):
        return value
    if value == {"Ref": "AWS::Partition"}:
        return "aws"
    if isinstance(value, dict) and "Fn::Join" in value:
        sep, parts = value["Fn::Join"]
        return sep.join(_text(p) for p in parts)
    return json.dumps(value)


def test_the_deployment_parameter_and_the_functions_carry_the_grants(resources) -> None:
    (parameter,) = [r for r in resources.values() if r["Type"] == "AWS::SSM::Parameter"]
    value = _text(parameter["Properties"]["Value"])
    assert f'"data_buckets":"{",".join(GRANTED)}"' in value
    functions = [r for r in resources.values() if r["Type"] == "AWS::Lambda::Function"]
    commands = [
        f for f in functions if "commands" in json.dumps(f["Properties"].get("Handler", ""))
    ]
    assert commands, "no commands function in the template"
    for function in commands:
        variables = function["Properties"]["Environment"]["Variables"]
        assert variables[config.ENV_DATA_BUCKETS] == ",".join(GRANTED)
    # What the SDK makes of it, once the stack's tokens are resolved
    assert (
        Deployment.from_json(
            json.dumps(
                {
                    "topic_arn": "t",
                    "table_name": "t",
                    "bucket": "b",
                    "data_buckets": ",".join(GRANTED),
                }
            )
        ).data_buckets
        == GRANTED
    )


def test_the_rule_reads_each_entry_as_the_instance_policy_grants_it(resources) -> None:
    (policy,) = [r for name, r in resources.items() if "InstancePolicy" in name]
    objects = {
        _text(resource)
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if statement["Action"] == "s3:GetObject" and "Sid" not in statement
        for resource in (
            statement["Resource"]
            if isinstance(statement["Resource"], list)
            else [statement["Resource"]]
        )
    }
    # GetObject on <bucket>/<prefix>/* (or <bucket>/*) for each entry, and nothing else
    expected = set()
    for entry in GRANTED:
        bucket, prefix = data_grant(entry)
        expected.add(f"arn:aws:s3:::{bucket}/{prefix}/*" if prefix else f"arn:aws:s3:::{bucket}/*")
    assert objects == expected
