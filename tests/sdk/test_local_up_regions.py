"""`respot local up --extra-regions`: bad names are refused before anything starts, and the
local runtime refuses IAM enforcement with satellites instead of failing every function."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from infra.local.runtime import LocalRuntime, RuntimeOptions
from respot.cli import app


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("us-east-1", "us-east-1 is the local runtime's home region"),
        ("us-west-2,us-west-2", "names a region twice"),
        ("uswest2", "'uswest2' is not a region name; write e.g. us-west-2"),
        ("us-west-2;id", "is not a region name"),
    ],
)
def test_bad_extra_regions_are_named_before_anything_starts(
    given: str, said: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RESPOT_LOCAL_STATE", str(tmp_path / "local.json"))
    result = CliRunner().invoke(app, ["local", "up", "--extra-regions", given])
    assert result.exit_code != 0
    assert said in " ".join(result.output.split())
    assert not (tmp_path / "local.json").exists()


def test_iam_with_extra_regions_is_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match="iam=True does not cover extra_regions yet"):
        LocalRuntime(RuntimeOptions(iam=True, extra_regions=("us-west-2",)))
