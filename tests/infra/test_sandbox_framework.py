"""The local image's framework Python is laid out as the AMI's: it cannot import respot.

On the AMI respot exists only in the agent package; a process the framework Python starts on
its own (Papermill's kernel) must be given respot, and only respot. The local image used to
let the framework Python see this checkout's respot, which hid a notebook job's failure.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from unittest import mock

import pytest

from infra.local.sandbox import LocalImage
from respot.agent.notebook import kernel_pythonpath

PROBE = """
import importlib.util, json, sys
found = {n: importlib.util.find_spec(n) is not None for n in ("respot", "infra", "lambdas")}
import numpy
found["numpy"] = numpy.__file__
if found["respot"]:
    import respot, respot.training.notebook
    found["respot_file"] = respot.__file__
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def framework(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("image")
    image = LocalImage.build(root, mock.MagicMock(), "agent-assets")
    return image.framework_dir / "bin" / "python"


def probe(python: Path, cwd: Path, **env: str) -> dict[str, object]:
    import json

    clean = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), **env}
    done = subprocess.run(
        [str(python), "-c", PROBE], cwd=cwd, env=clean, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_the_framework_python_sees_the_framework_packages_not_respot(
    framework: Path, tmp_path: Path
) -> None:
    found = probe(framework, tmp_path)
    assert found["respot"] is False and found["infra"] is False and found["lambdas"] is False
    assert found["numpy"]  # torch, numpy, papermill ...: the framework's own packages


def test_a_kernel_gets_respot_alone(framework: Path, tmp_path: Path) -> None:
    # The PYTHONPATH NotebookSession gives its kernel: a directory with respot and nothing else
    pythonpath = kernel_pythonpath(tmp_path / "respot-alone", None)
    assert sorted(os.listdir(pythonpath)) == ["respot"]
    found = probe(framework, tmp_path, PYTHONPATH=pythonpath)
    assert found["respot"] is True
    assert str(found["respot_file"]).startswith(pythonpath)
    # ... and numpy is still the framework's: nothing of the agent's site shadows it
    assert not str(found["numpy"]).startswith(pythonpath)


def test_a_kept_work_root_gets_the_layout_too(tmp_path: Path) -> None:
    import site

    # GIVEN an image directory kept from a runtime of the old layout (it saw the checkout)
    root = tmp_path / "image"
    image = LocalImage.build(root, mock.MagicMock(), "agent-assets")
    python = image.framework_dir / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    old = "".join(f'import site; site.addsitedir("{p}")\n' for p in site.getsitepackages())
    Path(purelib, "framework.pth").write_text(old)
    assert probe(python, tmp_path)["respot"] is True
    # WHEN a new runtime builds its image there THEN its framework Python no longer sees respot
    LocalImage.build(root, mock.MagicMock(), "agent-assets")
    assert probe(python, tmp_path)["respot"] is False
