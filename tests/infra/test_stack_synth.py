"""`python app.py` for real: local bundling, cdk-nag on every synth, cfn-lint on the template.

Slow (about 10 s with the third-party packages cached under .build/, about 25 s without).
"""

from __future__ import annotations

import csv
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from infra import bundling
from infra.wiring import WIRING

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("cdk.out")
    env = {
        **os.environ,
        "CDK_OUTDIR": str(out),
        "JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION": "1",
        "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    }
    result = subprocess.run(
        [sys.executable, "app.py"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    manifest = json.loads((out / "Respot.assets.json").read_text())
    assets = {
        Path(f["source"]["path"]).name: out / f["source"]["path"]
        for f in manifest["files"].values()
        if f["source"].get("packaging") == "zip"
    }
    return {"out": out, "template": out / "Respot.template.json", "assets": assets}


def test_template_passes_cfn_lint(synth):
    result = subprocess.run(
        [str(BIN / "cfn-lint"), str(synth["template"])],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_cdk_nag_report_has_no_unsuppressed_finding(synth):
    (report,) = synth["out"].glob("AwsSolutions-*-NagReport.csv")
    with report.open() as f:
        rows = list(csv.DictReader(f))
    assert rows, "cdk-nag wrote an empty report"
    assert [r for r in rows if r["Compliance"] == "Non-Compliant"] == []
    suppressed = [r for r in rows if r["Compliance"] == "Suppressed"]
    assert suppressed
    assert all(len(r["Exception Reason"]) > 40 for r in suppressed)


def _asset_with(assets: dict[str, Path], entry: str) -> Path:
    (found,) = [path for path in assets.values() if (path / entry).exists()]
    return found


def test_lambda_asset_has_respot_handlers_and_arm64_packages(synth):
    code = _asset_with(synth["assets"], "lambdas")
    for spec in WIRING.functions:
        assert (code / f"{spec.module.replace('.', '/')}.py").is_file(), spec.module
    assert (code / "respot" / "control" / "config.py").is_file()
    assert (code / "respot" / "data" / "on_demand_prices.json").is_file()
    assert (code / "aws_lambda_powertools").is_dir()
    # the boto3 the tests ran with, not the runtime's (infra/bundle-constraints.txt)
    (boto3_dist,) = code.glob("boto3-*.dist-info")
    assert boto3_dist.name == f"boto3-{importlib.metadata.version('boto3')}.dist-info"
    binaries = [p.name for p in (code / "pydantic_core").glob("*.so")]
    assert binaries and all("cpython-312-aarch64" in name for name in binaries)
    assert not list(code.rglob("__pycache__"))


def test_agent_asset_carries_one_site_built_for_the_framework_python(synth):
    # The package is built for the AMI's framework Python alone (3.12, x86_64); this machine's
    # Python may differ, so what can be checked without that Python is checked here: one site,
    # respot and the packages the agent imports in it, binaries for that Python and platform.
    package = _asset_with(synth["assets"], "site-3.12")
    assert sorted(p.name for p in package.glob("site-*")) == ["site-3.12"]
    site = package / "site-3.12"
    for name in ("respot/agent/__init__.py", "yaml/__init__.py", "boto3/__init__.py"):
        assert (site / name).is_file(), name
    binaries = [p.name for p in (site / "pydantic_core").glob("*.so")]
    assert binaries and all("cpython-312-x86_64" in name for name in binaries), binaries


def test_agent_asset_imports_with_this_python(synth):
    package = _asset_with(synth["assets"], "site-3.12")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    site = package / f"site-{version}"
    if not site.is_dir():
        pytest.skip(
            f"the agent package is built for Python 3.12 only; this is {version} (its "
            "structure is checked by the test before this one)"
        )
    probe = "import respot.agent, pydantic, yaml, boto3; print(respot.__file__, yaml.__file__)"
    result = subprocess.run(
        [sys.executable, "-s", "-c", probe],
        env={"PYTHONPATH": str(site), "PATH": os.environ.get("PATH", "")},
        cwd=synth["out"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert all(path.startswith(str(site)) for path in result.stdout.split())


def test_handlers_import_with_the_lambda_packages_alone(tmp_path):
    # GIVEN the Lambda asset's package list (plus boto3, which the runtime provides), built
    # for this machine since the real asset is arm64 / Python 3.12
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    host = "manylinux_2_28_x86_64"
    deps = bundling.third_party(
        bundling.pinned(bundling.LAMBDA_REQUIREMENTS), platform=host, python=python
    )
    runtime = bundling.third_party(bundling.pinned(("boto3",)), platform=host, python=python)
    shutil.copytree(REPO / "sdk" / "respot", tmp_path / "respot")
    shutil.copytree(REPO / "lambdas", tmp_path / "lambdas")
    modules = [spec.module for spec in WIRING.functions]
    probe = (
        f"import importlib, sys; sys.path[:0] = {[str(tmp_path), str(deps), str(runtime)]!r}\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
    )
    # WHEN every handler module is imported without site-packages (-S)
    result = subprocess.run(
        [sys.executable, "-S", "-c", probe],
        env={"PATH": os.environ.get("PATH", "")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # THEN nothing is missing from LAMBDA_REQUIREMENTS
    assert result.returncode == 0, result.stderr
