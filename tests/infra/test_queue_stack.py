"""The team's queue in the synthesized stack (issue 26): the `idle_gpus` setting reaches every
control-plane function as RESPOT_IDLE_GPUS (read back by `ControlPlaneConfig`); the commands
function alone may read principals' tags (a submitter's `respot:team`), in this account only."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import assertions

from respot.control.config import ENV_IDLE_GPUS, ENV_TABLE, IdleGpus, parse_idle_gpus
from tests.infra.conftest import respot_template

IDLE = {"threshold_pct": 10, "period_minutes": 15, "action": "stop"}


@pytest.fixture(scope="module")
def template() -> assertions.Template:
    return respot_template(idle_gpus=IDLE)[1]


def _functions(template: assertions.Template) -> dict[str, dict[str, Any]]:
    return template.find_resources("AWS::Lambda::Function")


def test_the_idle_gpus_setting_reaches_every_control_function(
    template: assertions.Template,
) -> None:
    control = {
        name: f["Properties"]["Environment"]["Variables"]
        for name, f in _functions(template).items()
        if ENV_TABLE in f["Properties"].get("Environment", {}).get("Variables", {})
    }
    assert len(control) >= 5
    for name, env in control.items():
        assert ENV_IDLE_GPUS in env, name
        raw = env[ENV_IDLE_GPUS]
        assert isinstance(raw, str), name  # plain JSON, no token left to resolve
        assert parse_idle_gpus(json.loads(raw)) == parse_idle_gpus(IDLE)
    assert parse_idle_gpus(IDLE) != IdleGpus()


def _policies_of(template: assertions.Template) -> dict[str, list[dict[str, Any]]]:
    """Each IAM policy's statements, by the logical id of the role it is attached to."""
    out: dict[str, list[dict[str, Any]]] = {}
    for policy in template.find_resources("AWS::IAM::Policy").values():
        props = policy["Properties"]
        for role in props.get("Roles", []):
            out.setdefault(role["Ref"], []).extend(props["PolicyDocument"]["Statement"])
    return out


def _commands_role(template: assertions.Template) -> str:
    (fn,) = [
        f
        for f in _functions(template).values()
        if f["Properties"].get("Handler") == "lambdas.commands.handler"
    ]
    return str(fn["Properties"]["Role"]["Fn::GetAtt"][0])


def test_only_the_commands_function_reads_principal_tags_and_only_this_account_s(
    template: assertions.Template,
) -> None:
    by_role = _policies_of(template)
    commands = _commands_role(template)
    reading = {
        role: s
        for role, statements in by_role.items()
        for s in statements
        if {"iam:ListRoleTags", "iam:ListUserTags"} & set(_list(s["Action"]))
    }
    # THEN exactly one statement, on the commands function's role
    assert list(reading) == [commands]
    (statement,) = reading.values()
    assert statement["Effect"] == "Allow"
    assert sorted(_list(statement["Action"])) == ["iam:ListRoleTags", "iam:ListUserTags"]
    resources = [json.dumps(r) for r in _list(statement["Resource"])]
    assert len(resources) == 2
    for kind, resource in zip(("role", "user"), resources, strict=True):
        # arn:<partition>:iam::<this account>:<kind>/* : no other account, nothing but tags
        assert '"AWS::AccountId"' in resource and f':{kind}/*"' in resource
        assert ":iam::" in resource


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]
