"""The stack setting `workspaces` reaches both places that refuse a workspace when it is false:
the deployment parameter the laptop's `respot notebook start` reads, and the environment of
the commands function that refuses a raw workspace submission (lambdas/_commands.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from respot.client.deployment import Deployment
from respot.workspace import names
from tests.infra.conftest import respot_template


def _parameter(resources: dict[str, Any]) -> str:
    (parameter,) = [r for r in resources.values() if r["Type"] == "AWS::SSM::Parameter"]
    return json.dumps(parameter["Properties"]["Value"])


def _commands_env(resources: dict[str, Any]) -> list[dict[str, Any]]:
    functions = [r for r in resources.values() if r["Type"] == "AWS::Lambda::Function"]
    found = [
        f["Properties"]["Environment"]["Variables"]
        for f in functions
        if "commands" in json.dumps(f["Properties"].get("Handler", ""))
    ]
    assert found, "no commands function in the template"
    return found


@pytest.mark.parametrize("on", [True, False])
def test_the_setting_reaches_the_laptop_and_the_commands_function(on: bool) -> None:
    resources = respot_template(workspaces=on)[1].to_json()["Resources"]
    said = "true" if on else "false"
    assert f'\\"workspaces\\":\\"{said}\\"' in _parameter(resources)
    for variables in _commands_env(resources):
        assert variables[names.ENV_WORKSPACES_SETTING] == said
    body = {"topic_arn": "t", "table_name": "j", "bucket": "b", "workspaces": said}
    assert Deployment.from_json(json.dumps(body)).workspaces is on
