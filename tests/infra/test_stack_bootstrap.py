"""The instance user data (env file + bootstrap script), run for real under a root prefix
(RESPOT_ROOT) with stand-ins for aws/systemctl."""

from __future__ import annotations

import importlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from infra.userdata import render_user_data

# Third-party packages `import respot.agent` loads (the bootstrap checks that import).
AGENT_IMPORTS = (
    "pydantic",
    "pydantic_core",
    "typing_extensions",
    "annotated_types",
    "typing_inspection",
)
ENV = {
    "RESPOT_BUCKET": "jobs-bucket",
    "RESPOT_AGENT_QUEUE_URL": "https://sqs.eu-west-1.amazonaws.com/123456789012/agent-events",
    "AWS_REGION": "eu-west-1",
    "RESPOT_SHUTDOWN": "poweroff",
    "RESPOT_AGENT_ASSET_BUCKET": "cdk-assets",
    "RESPOT_AGENT_ASSET_KEY": "abc123.zip",
    "RESPOT_FRAMEWORK_PYTHON": "/opt/pytorch/bin/python",
}


@pytest.fixture
def sandbox(tmp_path: Path) -> dict[str, Path]:
    """A root for the user data's absolute paths, and logging stand-ins."""
    root = tmp_path / "root"
    root.mkdir()

    # The agent package as the asset carries it, for this interpreter's version: respot and
    # what `import respot.agent` needs, taken from this test environment.
    site = f"site-{sys.version_info.major}.{sys.version_info.minor}"
    package = tmp_path / "agent.zip"
    with zipfile.ZipFile(package, "w") as zf:
        for name in ("respot", *AGENT_IMPORTS):
            module = importlib.import_module(name)
            origin = Path(module.__file__ or "")
            files = origin.parent.rglob("*") if origin.name == "__init__.py" else [origin]
            base = origin.parent.parent if origin.name == "__init__.py" else origin.parent
            for f in files:
                if f.is_file() and "__pycache__" not in f.parts:
                    zf.write(f, f"{site}/{f.relative_to(base)}")

    # The "AMI": its framework Python is this (bare) interpreter.
    python_dir = root / "opt/pytorch/bin"
    python_dir.mkdir(parents=True)
    (python_dir / "python").symlink_to(getattr(sys, "_base_executable", sys.executable))

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.log"
    (bin_dir / "systemctl").write_text(f'#!/bin/sh\necho "systemctl $*" >> {calls}\n')
    (bin_dir / "aws").write_text(
        f'#!/bin/sh\necho "aws $*" >> {calls}\nfor last; do :; done\ncp {package} "$last"\n'
    )
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    return {"tmp": tmp_path, "root": root, "bin": bin_dir, "python": python_dir, "calls": calls}


def run(sandbox: dict[str, Path], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    (sandbox["tmp"] / "user-data").write_text(render_user_data(env))
    path = f"{sandbox['bin']}:/usr/bin:/bin"
    return subprocess.run(
        ["bash", str(sandbox["tmp"] / "user-data")],
        env={"PATH": path, "HOME": str(sandbox["tmp"]), "RESPOT_ROOT": str(sandbox["root"])},
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
    venv_python = sandbox["root"] / "opt/respot/venv/bin/python"
    probe = subprocess.run(
        [str(venv_python), "-c", "import respot.agent, sys; print(respot.__file__)"],
        env={"PYTHONPATH": "", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert "/opt/respot/agent/site-3.1" in probe.stdout  # found through the venv's .pth
    # The agent's venv is isolated: the framework's (here: the base interpreter's) packages
    # are not on its path, only the standard library and the agent package.
    paths = subprocess.run(
        [str(venv_python), "-c", "import sys; print('\\n'.join(sys.path))"],
        env={"PYTHONPATH": "", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert not [p for p in paths if p.endswith("site-packages") and "opt/respot/venv" not in p]
    unit = (sandbox["root"] / "etc/systemd/system/respot-agent.service").read_text()
    assert "ExecStart=" in unit and "/opt/respot/venv/bin/python -m respot.agent" in unit
    assert "EnvironmentFile=" in unit and "/etc/respot/respot.env" in unit
    assert "ExecStopPost=/usr/bin/systemctl --no-block poweroff" in unit


def test_a_broken_deployment_powers_the_instance_off(sandbox):
    env = {k: v for k, v in ENV.items() if k != "RESPOT_AGENT_ASSET_KEY"}
    result = run(sandbox, env)
    assert result.returncode != 0
    assert "RESPOT_AGENT_ASSET_KEY missing" in result.stdout  # the log goes to stdout too
    log = (sandbox["root"] / "var/log/respot-bootstrap.log").read_text()
    assert "RESPOT_AGENT_ASSET_KEY missing" in log
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
