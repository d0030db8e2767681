"""The digits example: interrupted twice and resumed, it ends bit-identical to one clean run."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from respot.agent.standalone import run_standalone
from respot.spec.training import validate_spec

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


class ExactInterrupter:
    """A SessionHost that delivers an interruption notice at exact steps (in-process)."""

    def __init__(self, steps: set[int]) -> None:
        self.steps = steps
        self.session: Any = None

    def report(self, step: int, total_steps: int | None, metrics: dict[str, float]) -> None:
        if step in self.steps:
            self.steps.discard(step)
            self.session.request_interruption("spot-interruption")

    def checkpoint(self, step: int, reason: str) -> None:
        pass


def test_resuming_at_an_epoch_boundary_and_mid_epoch_is_exact(
    digits_data: Path, tmp_path: Path
) -> None:
    # 1437 training images / 32 = 45 steps per epoch: step 45 ends epoch 1, 70 is mid-epoch.
    sys.path.insert(0, str(EXAMPLE))
    try:
        from digits.train import DigitsSession
    finally:
        sys.path.remove(str(EXAMPLE))
    hparams = {"epochs": 3, "hidden": 32, "checkpoint_every": 1000}

    def run(name: str, stops: set[int]) -> tuple[str, list[int | None]]:
        host = ExactInterrupter(stops)
        resumed: list[int | None] = []
        resume_step = None
        while True:
            session = DigitsSession(
                checkpoint_dir=tmp_path / name / "ckpt",
                data_dir=digits_data,
                output_dir=tmp_path / name / "out",
                hparams=hparams,
                seed=3,
                resume_step=resume_step,
                host=host,
            )
            host.session = session
            resumed.append(resume_step)
            session.prepare()  # as the session runner does, before train()
            session.train()
            if not session.interruption_requested:
                return (tmp_path / name / "out" / "weights.sha256").read_text(), resumed
            resume_step = session.last_checkpoint_step

    plain, _ = run("plain", set())
    cut, resumed = run("cut", {45, 70})
    assert resumed == [None, 45, 70]
    assert cut == plain


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
