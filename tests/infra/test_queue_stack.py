"""The team's queue in the synthesized stack (issue 26): the `idle_gpus` setting reaches every
control-plane function as RESPOT_IDLE_GPUS (read back by `ControlPlaneConfig`)."""

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
