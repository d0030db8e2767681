"""A plain PyTorch script as a command job on the local runtime (docs/commands.md): run as it
is (`examples/plain/train.py`), interrupted twice by `respot local interrupt` (the runtime's
`interrupt_job` behind it), resumed from its notice checkpoints, and finished with the very
weights of an uninterrupted run."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.local.market import ChaosSchedule
from infra.local.runtime import LocalRuntime, RuntimeOptions
from respot.core.job import AttemptEnd
from respot.spec.training import TrainingEnvVar
from respot.wire.messages import new_job_id
from tests.e2e.helpers import job_story, output, wait_no_live_instances

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PLAIN = Path(__file__).resolve().parents[2] / "examples" / "plain"
ARGS = ["--steps", "400", "--save-every", "150", "--step-seconds", "0.02"]


@pytest.fixture(scope="module")
def rt() -> Iterator[LocalRuntime]:
    options = RuntimeOptions(time_scale=1.0 / 30.0, chaos=ChaosSchedule(job_ids=set()))
    with LocalRuntime(options) as runtime:
        yield runtime


def uninterrupted_weights(tmp_path: Path) -> str:
    """The script run once, start to end, on this machine, outside respot."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RESPOT_")}
    env |= {"RESPOT_CHECKPOINT_DIR": str(tmp_path / "c"), "RESPOT_OUTPUT_DIR": str(tmp_path / "o")}
    subprocess.run(
        [sys.executable, str(PLAIN / "train.py"), *ARGS[:4]],
        env=env,
        check=True,
        timeout=300,
        capture_output=True,
    )
    return (tmp_path / "o" / "weights.sha256").read_text()


def test_a_plain_script_interrupted_twice_ends_with_an_uninterrupted_runs_weights(
    rt: LocalRuntime, tmp_path: Path
) -> None:
    # GIVEN the plain example as a command job
    spec = TrainingEnvVar(
        name="plain", command=["python", "train.py", *ARGS], source_dir=str(PLAIN)
    )
    job_id = new_job_id(spec.name)
    handle = rt.run(spec, job_id=job_id)
    # WHEN its instance is interrupted once it reported step 80, and its replacement's
    # once the job reported step 200 (steps 150 and 300 are periodic checkpoints)
    first = rt.interrupt_job(job_id, at_step=80, wait_seconds=300)
    second = rt.interrupt_job(job_id, at_step=200, rebalance=True, wait_seconds=300)
    status = handle.wait(timeout=480, poll_seconds=0.3)
    record = status.record
    # THEN it completed on a third attempt, each one resumed where the one before stopped
    assert record is not None and status.state == "COMPLETED", job_story(rt, job_id)
    assert (first.attempt, second.attempt) == (1, 2)
    assert record.interruptions == 2 and len(record.attempts) == 3, job_story(rt, job_id)
    assert all(a.end is AttemptEnd.INTERRUPTED for a in record.attempts[:2])
    restored = [a.restored_step for a in record.attempts[1:]]
    stopped = [a.last_step for a in record.attempts[:2]]
    assert restored == stopped, (restored, stopped)  # no step lost at either notice
    assert restored[0] is not None and 80 <= restored[0] < 400
    assert restored[1] is not None and 200 <= restored[1] < 400
    # AND its weights are an uninterrupted run's, bit for bit
    assert output(rt, job_id, "weights.sha256") == uninterrupted_weights(tmp_path)
    wait_no_live_instances(rt, job_id)
