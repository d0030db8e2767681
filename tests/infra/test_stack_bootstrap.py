"""The instance bootstrap script, run for real in a sandbox with stand-ins for aws/systemctl."""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from infra.constructs.fleet import BOOTSTRAP_SCRIPT

REPO = Path(__file__).resolve().parents[2]
ENV = {
    "RESPOT_BUCKET": "jobs-bucket",
    "RESPOT_AGENT_QUEUE_URL": "https://sqs.eu-west-1.amazonaws.com/123456789012/agent-events",
    "AWS_REGION": "eu-west-1",
    "RESPOT_SHUTDOWN": "poweroff",
    "RESPOT_AGENT_ASSET_BUCKET": "cdk-assets",
    "RESPOT_AGENT_ASSET_KEY": "abc123.zip",
}


@pytest.fixture
def sandbox(tmp_path: Path) -> dict[str, Path]:
    """The script with its absolute paths moved under tmp_path, and logging stand-ins."""
    root = tmp_path / "root"
    script = BOOTSTRAP_SCRIPT.read_text()
    for path in ("/etc/respot", "/opt/respot", "/etc/systemd/system"):
        script = script.replace(path, f"{root}{path}")
    (root / "etc/respot").mkdir(parents=True)
    (root / "etc/systemd/system").mkdir(parents=True)
    (tmp_path / "bootstrap.sh").write_text(script)

    # the agent package: respot for both Pythons the asset carries
    package = tmp_path / "agent.zip"
    with zipfile.ZipFile(package, "w") as zf:
        for site in ("site-3.11", "site-3.12"):
            for f in (REPO / "sdk" / "respot").rglob("*.py"):
                zf.write(f, f"{site}/respot/{f.relative_to(REPO / 'sdk' / 'respot')}")

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.log"
    (bin_dir / "systemctl").write_text(f'#!/bin/sh\necho "systemctl $*" >> {calls}\n')
    (bin_dir / "aws").write_text(
        f'#!/bin/sh\necho "aws $*" >> {calls}\nfor last; do :; done\ncp {package} "$last"\n'
    )
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    return {"tmp": tmp_path, "root": root, "bin": bin_dir, "calls": calls}


def run(sandbox: dict[str, Path], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    (sandbox["root"] / "etc/respot/respot.env").write_text(
        "".join(f"{k}={v}\n" for k, v in env.items())
    )
    path = f"{sandbox['bin']}:/usr/local/bin:/usr/bin:/bin"
    python_dir = Path(shutil.which("python3") or "/usr/bin/python3").parent
    return subprocess.run(
        ["bash", str(sandbox["tmp"] / "bootstrap.sh")],
        env={"PATH": f"{path}:{python_dir}", "HOME": str(sandbox["tmp"])},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_installs_the_package_and_starts_the_agent_unit(sandbox):
    result = run(sandbox, ENV)
    assert result.returncode == 0, result.stderr
    calls = sandbox["calls"].read_text()
    assert "aws s3 cp --only-show-errors --region eu-west-1 s3://cdk-assets/abc123.zip" in calls
    assert "systemctl daemon-reload" in calls
    assert "systemctl enable --now respot-agent.service" in calls
    assert "poweroff" not in calls
    home = sandbox["root"] / "opt/respot"
    site = (home / "site").resolve()
    assert site.name in ("site-3.11", "site-3.12")
    assert (site / "respot" / "__init__.py").is_file()
    unit = (sandbox["root"] / "etc/systemd/system/respot-agent.service").read_text()
    assert "ExecStart=" in unit and "/opt/respot/python -m respot.agent" in unit
    assert "EnvironmentFile=" in unit and "/etc/respot/respot.env" in unit
    assert "ExecStopPost=/usr/bin/systemctl --no-block poweroff" in unit


def test_a_broken_deployment_powers_the_instance_off(sandbox):
    env = {k: v for k, v in ENV.items() if k != "RESPOT_AGENT_ASSET_KEY"}
    result = run(sandbox, env)
    assert result.returncode != 0
    assert "RESPOT_AGENT_ASSET_KEY missing" in result.stderr
    assert "systemctl --no-block poweroff" in sandbox["calls"].read_text()
    assert not (sandbox["root"] / "etc/systemd/system/respot-agent.service").exists()


def test_values_are_read_not_executed(sandbox):
    # GIVEN an env file value a shell would run if the file were sourced
    marker = sandbox["tmp"] / "pwned"
    result = run(sandbox, {**ENV, "RESPOT_AGENT_ASSET_KEY": f"$(touch {marker}).zip"})
    # THEN it is passed along as text (the stand-in aws copies the package anyway)
    assert result.returncode == 0, result.stderr
    assert not marker.exists()
    assert f"s3://cdk-assets/$(touch {marker}).zip" in sandbox["calls"].read_text()
