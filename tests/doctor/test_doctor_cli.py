"""`respot doctor` from the command line: against the local runtime's emulator, and against
"AWS" (moto server through AWS_ENDPOINT_URL) with a cdk.json."""

from __future__ import annotations

import json
import os
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from infra.local import cloud
from respot.cli import app
from respot.client.localstate import LocalState, write_state


@pytest.fixture
def local_state(moto_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The emulator provisioned as `respot local up` does, and its state file."""
    deployment = cloud.provision(moto_endpoint, prefix=f"doc-{secrets.token_hex(3)}")
    deployment.client("ssm").put_parameter(
        Name=deployment.slack_token_parameter, Type="SecureString", Value="xoxb-1"
    )
    path = tmp_path / "local.json"
    monkeypatch.setenv("RESPOT_LOCAL_STATE", str(path))
    monkeypatch.delenv("RESPOT_LOCAL", raising=False)

    def write(**facts: Any) -> None:
        write_state(
            LocalState(
                pid=os.getpid(),
                endpoint_url=moto_endpoint,
                deployment=json.loads(deployment.deployment().to_json()),
                started_at=datetime.now(UTC).isoformat(),
                time_scale=1 / 30,
                work_root=str(tmp_path),
                extra={"doctor": {**deployment.doctor_facts(), **facts}},
            ),
            path,
        )

    write()
    return write


def test_doctor_local_passes_on_the_provisioned_emulator(local_state: Any) -> None:
    result = CliRunner().invoke(app, ["doctor", "--local", "--json"])
    assert result.exit_code == 0, result.output
    found = {f["check"]: f["status"] for f in json.loads(result.stdout)["findings"]}
    assert found["credentials"] == "ok"
    assert found["CDK bootstrap"] == "skipped" and found["quotas"] == "skipped"
    assert found["stack"] == "skipped"
    assert found["spot service-linked role"] == "ok" and found["AMI"] == "ok"
    assert found["Slack token"] == "ok" and found["VPC"] == "ok"
    subnets = [s for c, s in found.items() if c.startswith("subnet ")]
    assert subnets == ["ok", "ok"]  # public: the emulator routes them through a gateway


def test_doctor_local_blocks_on_a_mistyped_instance_type(local_state: Any) -> None:
    local_state(instance_types=["g5.xlarg"])
    result = CliRunner().invoke(app, ["doctor", "--local"])
    assert result.exit_code == 1
    assert "g5.xlarg is not an EC2 instance type" in result.stdout
    assert "1 blocker(s)" in " ".join(result.stdout.split())


def test_doctor_on_aws_reads_cdk_json_and_names_the_bootstrap_fix(
    moto_endpoint: str, aws_credentials: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    cdk_json = tmp_path / "cdk.json"
    cdk_json.write_text(
        json.dumps({"app": "python app.py", "context": {"instance_types": ["g4dn.xlarge"]}})
    )
    result = CliRunner().invoke(
        app,
        ["doctor", "--cdk-json", str(cdk_json), "-c", "ami_id=ami-12c6146b", "--json"],
    )
    assert result.exit_code == 1, result.output
    found = {f["check"]: f for f in json.loads(result.stdout)["findings"]}
    assert found["CDK bootstrap"]["status"] == "blocker"
    assert found["CDK bootstrap"]["fix"] == "cdk bootstrap aws://123456789012/us-east-1"
    assert found["AMI"]["status"] == "ok" and found["network"]["status"] == "ok"
    assert found["stack"]["status"] == "ok"  # not deployed yet
    # No slack_channel and no token parameter: Slack is off, which is fine (checked before
    # the deploy: the parameter's name comes from the settings, not from the stack).
    assert found["Slack token"]["status"] == "ok"
    assert "/respot/slack-token" in found["Slack token"]["summary"]
    # moto has no EC2 quotas: the doctor says it could not read them instead of guessing
    assert found["quota G and VT spot"]["status"] == "warn"


def test_bad_context_is_named_before_any_call(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["doctor", "--cdk-json", str(tmp_path / "none.json"), "-c", "vpc_id=vpc-1"]
    )
    assert result.exit_code == 1
    assert "vpc_id and subnet_ids together" in result.stderr


def test_user_text_is_printed_literally(capsys: pytest.CaptureFixture[str]) -> None:
    from respot.cli.doctor import _print
    from respot.doctor import Target
    from respot.doctor.findings import blocker

    _print(
        [
            blocker(
                "[bold]x",
                "[red]not markup[/red] arn:aws:secretsmanager:r:1:secret:x",
                "[link=evil]fix[/link]",
            )
        ],
        Target(region="us-east-1", instance_types=("g5.xlarge",)),
    )
    out = capsys.readouterr().out
    assert "[red]not markup[/red]" in out and "[link=evil]fix[/link]" in out
    assert ":secret:x" in out  # not turned into an emoji


def test_doctor_checks_each_extra_region_from_cdk_json(
    moto_endpoint: str, aws_credentials: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a cdk.json with an extra region whose satellite stack is not deployed
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    cdk_json = tmp_path / "cdk.json"
    context = {"instance_types": ["g4dn.xlarge"], "extra_regions": "us-west-2", "stage": "doc"}
    cdk_json.write_text(json.dumps({"app": "python app.py", "context": context}))
    # WHEN the doctor runs
    result = CliRunner().invoke(app, ["doctor", "--cdk-json", str(cdk_json), "--json"])
    # THEN the region is checked where the control plane would read it, and blocks
    assert result.exit_code == 1, result.output
    found = {f["check"]: f for f in json.loads(result.stdout)["findings"]}
    satellite = found["satellite us-west-2"]
    assert satellite["status"] == "blocker"
    assert "no parameter /respot/doc/satellite in us-west-2" in satellite["summary"]
    assert satellite["fix"] == "cdk deploy Respot-doc-us-west-2 -c extra_regions=us-west-2"
    assert found["instance type g4dn.xlarge (us-west-2)"]["status"] == "ok"
