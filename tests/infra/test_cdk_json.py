"""`cdk.json` runs the app with the checkout's own virtualenv, activated or not."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_cdk_app_command_uses_the_checkout_venv():
    # `cdk synth` / `cdk deploy` from the checkout after `make setup` must not depend on
    # whichever python3 is first on PATH (it has no aws-cdk-lib outside the venv).
    app = shlex.split(json.loads((ROOT / "cdk.json").read_text())["app"])
    assert app[0] == ".venv/bin/python"
    assert app[1:] == ["app.py"]
