"""The bundles install what the tests ran with: the constraints file is the .venv's closure,
uv installs under it, the Lambda bundle carries the tested boto3, and the agent package is
built for the framework Python's version only. Offline: nothing here downloads."""

from __future__ import annotations

import importlib.metadata
import subprocess
from pathlib import Path
from typing import Any

import pytest

from infra import bundling
from infra.settings import DEFAULT_FRAMEWORK_PYTHON_VERSION, DeploySettings, DeploySettingsError


def _pins(text: str) -> tuple[dict[str, str], dict[str, str]]:
    tested: dict[str, str] = {}
    untested: dict[str, str] = {}
    for line in text.splitlines():
        if m := bundling._PIN.match(line):
            key = bundling._normalize(m.group(1))
            (untested if line.rstrip().endswith("# untested") else tested)[key] = (
                f"{m.group(1)}=={m.group(2)}"
            )
    return tested, untested


def test_the_constraints_file_pins_the_tests_versions_of_every_bundled_package():
    # python -m infra.bundling constraints regenerates it; stale after a requirements change
    names = sorted(
        {*bundling.LAMBDA_REQUIREMENTS, *bundling.package_dependencies(), *bundling.AGENT_EXTRAS}
    )
    found, missing = bundling.dependency_closure(names)
    tested, untested = _pins(bundling.CONSTRAINTS.read_text())
    assert tested == found
    # what only the targets' Python needs is pinned too, and marked as not tested here
    assert set(missing) <= set(untested)
    for name in ("pydantic-core", "botocore", "urllib3", "typing-extensions"):
        assert name in tested, name  # transitive packages are pinned, not only the top level


def test_uv_installs_the_bundles_under_the_constraints(monkeypatch, tmp_path):
    seen: list[list[str]] = []

    def run(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        seen.append(command)
        return subprocess.CompletedProcess(command, 1, "", "stopped by the test")

    monkeypatch.setattr(bundling, "BUILD_DIR", tmp_path)
    monkeypatch.setattr(bundling.subprocess, "run", run)
    with pytest.raises(bundling.BundlingError):
        bundling.third_party(("pydantic==2.14.3",), platform="manylinux_2_28_x86_64", python="3.12")
    (command,) = seen
    at = command.index("--constraint")
    assert Path(command[at + 1]) == bundling.CONSTRAINTS


def test_the_lambda_bundle_carries_the_tested_boto3():
    pins = bundling.pinned(bundling.LAMBDA_REQUIREMENTS)
    assert f"boto3=={importlib.metadata.version('boto3')}" in pins
    tested, _ = _pins(bundling.CONSTRAINTS.read_text())
    assert tested["botocore"] == f"botocore=={importlib.metadata.version('botocore')}"


def test_the_agent_package_is_built_for_the_framework_python_only():
    assert bundling.agent_package_asset().sites == (f"site-{DEFAULT_FRAMEWORK_PYTHON_VERSION}",)
    assert bundling.agent_package_asset(python="3.11").sites == ("site-3.11",)
    assert DeploySettings(framework_python_version="3.11").framework_python_version == "3.11"
    with pytest.raises(DeploySettingsError, match=r"framework_python_version '3\.9'"):
        DeploySettings(framework_python_version="3.9")
