"""The stack setting `workspaces: false` (infra/settings.py): `respot notebook start` is refused
on the laptop with one line naming the setting, before anything is read, uploaded or
submitted; the deployment parameter carries the setting. (The control plane's refusal of a
raw message: tests/handlers/test_workspaces_off.py.)"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from respot.client.deployment import Deployment
from respot.workspace import ops
from tests.workspace.test_cli import cli, invoke

__all__ = ["cli"]


def test_start_is_refused_naming_the_setting_before_anything_is_spent(
    cli: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    touched: list[str] = []
    conn = SimpleNamespace(
        deployment=SimpleNamespace(bucket="jobs-bucket", workspaces=False), session=None, local=True
    )
    monkeypatch.setattr("respot.cli.notebook.connect", lambda local: conn)
    monkeypatch.setattr(ops, "records", lambda *a: touched.append("records") or [])
    monkeypatch.setattr(ops, "put_token", lambda *a: touched.append("token"))
    result = invoke("start", "fresh")
    assert result.exit_code == 1, result.output
    assert "workspaces are off in this deployment" in result.output
    assert "`workspaces: false`" in result.output and "workspaces: true" in result.output
    assert cli == [] and touched == []  # nothing submitted, uploaded, or even read


def test_start_goes_on_where_the_setting_is_on_or_not_said(
    cli: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    for said in (True, None):
        deployment = SimpleNamespace(bucket="jobs-bucket", workspaces=said)
        conn = SimpleNamespace(deployment=deployment, session=None, local=True)
        monkeypatch.setattr("respot.cli.notebook.connect", lambda local, c=conn: c)
        result = invoke("start", "fresh")
        assert result.exit_code == 0, result.output
    assert len(cli) == 2


def test_the_deployment_parameter_carries_the_setting() -> None:
    base = '{"topic_arn": "t", "table_name": "j", "bucket": "b"'
    assert Deployment.from_json(base + ', "workspaces": "false"}').workspaces is False
    assert Deployment.from_json(base + ', "workspaces": "true"}').workspaces is True
    assert Deployment.from_json(base + ', "workspaces": false}').workspaces is False
    assert Deployment.from_json(base + "}").workspaces is None  # an older stack: on
