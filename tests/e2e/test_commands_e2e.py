"""The three examples as command jobs on the local runtime (docs/commands.md,
docs/integrations.md): a plain PyTorch script (`examples/plain`), a Hugging Face `Trainer`
(`examples/huggingface`) and a Lightning `Trainer` (`examples/lightning`) with
respot.integrations' callbacks, each run as it is, interrupted twice by `respot local
interrupt` (the runtime's `interrupt_job` behind it), resumed from its notice checkpoints,
and finished with the very weights of an uninterrupted run (all three resume
deterministically on CPU: docs/integrations.md says why the Lightning example picks its
batches by the global step)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from infra.local.market import ChaosSchedule
from infra.local.runtime import LocalRuntime, RuntimeOptions
from respot.core.job import AttemptEnd
from respot.spec.training import TrainingEnvVar
from respot.wire.messages import new_job_id
from tests.e2e.helpers import job_story, output, wait_no_live_instances

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@dataclass(frozen=True)
class Example:
    modules: tuple[str, ...]  # what it imports beyond torch (skipped when not installed)
    args: tuple[str, ...]  # steps and periodic saves: the uninterrupted run's too
    steps: int
    step_seconds: float
    interrupt_at: tuple[int, int]  # the reported steps the two notices wait for


EXAMPLES_RUN = {
    # 400 steps; periodic checkpoints at 150 and 300
    "plain": Example((), ("--steps", "400", "--save-every", "150"), 400, 0.02, (80, 200)),
    # few steps (each attempt imports torch and the framework): periodic saves at 40, 80
    "huggingface": Example(
        ("transformers", "accelerate"),
        ("--steps", "120", "--save-steps", "40"),
        120,
        0.05,
        (15, 60),
    ),
    "lightning": Example(
        ("lightning",), ("--steps", "120", "--save-every", "40"), 120, 0.05, (15, 60)
    ),
}


@pytest.fixture(scope="module")
def rt() -> Iterator[LocalRuntime]:
    options = RuntimeOptions(time_scale=1.0 / 30.0, chaos=ChaosSchedule(job_ids=set()))
    with LocalRuntime(options) as runtime:
        yield runtime


def uninterrupted_weights(tmp_path: Path, source: Path, args: tuple[str, ...]) -> str:
    """The script run once, start to end, on this machine, outside respot."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RESPOT_")}
    env |= {"RESPOT_CHECKPOINT_DIR": str(tmp_path / "c"), "RESPOT_OUTPUT_DIR": str(tmp_path / "o")}
    subprocess.run(
        [sys.executable, str(source / "train.py"), *args],
        env=env,
        check=True,
        timeout=300,
        capture_output=True,
    )
    return (tmp_path / "o" / "weights.sha256").read_text()


@pytest.mark.parametrize("name", sorted(EXAMPLES_RUN))
def test_an_example_interrupted_twice_ends_with_an_uninterrupted_runs_weights(
    rt: LocalRuntime, tmp_path: Path, name: str
) -> None:
    example = EXAMPLES_RUN[name]
    for module in example.modules:
        pytest.importorskip(module)
    source = EXAMPLES / name
    # GIVEN the example as a command job, as it is
    argv = ["python", "train.py", *example.args, "--step-seconds", str(example.step_seconds)]
    spec = TrainingEnvVar(name=name, command=argv, source_dir=str(source))
    job_id = new_job_id(spec.name)
    handle = rt.run(spec, job_id=job_id)
    # WHEN its instance is interrupted once it reported a first step, and its replacement's
    # once the job reported a later one (the second notice with EC2's rebalance first)
    at_first, at_second = example.interrupt_at
    first = rt.interrupt_job(job_id, at_step=at_first, wait_seconds=300)
    second = rt.interrupt_job(job_id, at_step=at_second, rebalance=True, wait_seconds=300)
    status = handle.wait(timeout=480, poll_seconds=0.3)
    record = status.record
    # THEN it completed on a third attempt, each one resumed where the one before stopped
    assert record is not None and status.state == "COMPLETED", job_story(rt, job_id)
    assert (first.attempt, second.attempt) == (1, 2)
    assert record.interruptions == 2 and len(record.attempts) == 3, job_story(rt, job_id)
    assert all(a.end is AttemptEnd.INTERRUPTED for a in record.attempts[:2])
    # from the checkpoints taken on the notices (not an earlier periodic one)
    assert all(a.notice_checkpoint_at is not None for a in record.attempts[:2])
    restored = [a.restored_step for a in record.attempts[1:]]
    stopped = [a.last_step for a in record.attempts[:2]]
    assert restored == stopped, (restored, stopped)  # no step lost at either notice
    assert restored[0] is not None and at_first <= restored[0] < example.steps
    assert restored[1] is not None and at_second <= restored[1] < example.steps
    assert record.attempts[2].last_step == example.steps
    assert "loss" in record.progress.metrics  # the metrics it reports reach the record
    # AND its weights are an uninterrupted run's, bit for bit
    assert output(rt, job_id, "weights.sha256") == uninterrupted_weights(
        tmp_path, source, example.args
    )
    wait_no_live_instances(rt, job_id)
