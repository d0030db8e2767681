"""The digits example: interrupted twice and resumed, it ends bit-identical to one clean run."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from respot.agent.standalone import run_standalone
from respot.spec import validate_spec

from .conftest import REPO

EXAMPLE = REPO / "examples" / "digits"


@pytest.fixture(scope="module")
def digits_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    sys.path.insert(0, str(EXAMPLE))
    try:
        from prepare_data import write_digits_npz
    finally:
        sys.path.remove(str(EXAMPLE))
    data_dir = tmp_path_factory.mktemp("digits-data")
    write_digits_npz(data_dir / "digits")
    return data_dir


def test_the_job_file_is_a_valid_spec() -> None:
    spec = validate_spec(yaml.safe_load((EXAMPLE / "job.yaml").read_text()))
    assert spec.entry_point == "digits.train:DigitsSession"
    assert [(d.s3_uri, d.local_path) for d in spec.data] == [
        ("s3://respot-demo-data/digits/", "digits")
    ]


@pytest.mark.slow
def test_interrupted_twice_gives_bit_identical_weights(digits_data: Path, tmp_path: Path) -> None:
    # Small enough for a few seconds; dropout on, so the RNG state must survive a resume too.
    spec = validate_spec(
        {
            "name": "digits-test",
            "entry_point": "digits.train:DigitsSession",
            "hyperparameters": {"epochs": 5, "hidden": 128, "checkpoint_every": 40},
            "seed": 11,
        }
    )

    def run(name: str, stops: list[int]) -> Path:
        return run_standalone(
            spec,
            code_dir=EXAMPLE,
            data_dir=digits_data,
            work_dir=tmp_path / name,
            interrupt_at_steps=stops,
        )

    with ThreadPoolExecutor(max_workers=2) as pool:
        plain = pool.submit(run, "plain", [])
        cut = pool.submit(run, "cut", [30, 130])
        plain_out, cut_out = plain.result(), cut.result()
    attempts = sorted(p.name for p in (tmp_path / "cut" / "attempts").iterdir())
    assert attempts == ["0001", "0002", "0003"]  # really interrupted twice
    logs = [(tmp_path / "cut" / "attempts" / a / "session.log").read_text() for a in attempts]
    assert "interrupted: saved step" in logs[0] and "resumed at step" in logs[1]
    digest = (plain_out / "weights.sha256").read_text()
    assert len(digest.strip()) == 64
    assert (cut_out / "weights.sha256").read_text() == digest
    assert (cut_out / "model.pt").read_bytes() == (plain_out / "model.pt").read_bytes()
