"""A sweep end to end through the local runtime: the study, trials as jobs, an interruption,
pruning, Slack: the real handlers, the real agent processes, the sweep Lambda on its FIFO queue.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest

from infra.local.market import ChaosSchedule
from infra.local.runtime import LocalRuntime, RuntimeOptions
from respot.sweep import study as studies
from respot.sweep.model import TrialState
from respot.sweep.spec import validate_sweep
from respot.wire.messages import new_job_id

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sweep"


@pytest.fixture(scope="module")
def rt() -> Iterator[LocalRuntime]:
    options = RuntimeOptions(time_scale=1.0 / 30.0, chaos=ChaosSchedule(job_ids=set()))
    with LocalRuntime(options) as runtime:
        yield runtime


# A trial is interrupted once its record shows step 60. The record lags the session by up to
# a scaled heartbeat (2 s, 100 steps of 0.02 s), and the notice reaches the session within
# its 1-s hold and an IMDS poll: 600 steps leave it 8 s or more to land before the trial
# ends (300 left under 3 s on a loaded machine). The same margin lets the pruner stop the
# diverging trial before it ends.
STEPS = 600


def ridge_sweep(name: str, **changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": name,
        "metric": "val_loss",
        "n_trials": 3,
        "parallelism": 2,
        "search_space": {"lr": {"type": "float", "low": 0.01, "high": 0.5, "log": True}},
        "sampler": {"name": "random", "seed": 1},
        "pruner": {"name": "none"},
        "job": {
            "entry_point": "ridge.train:RidgeSession",
            "source_dir": str(EXAMPLE),
            "hyperparameters": {"steps": STEPS, "eval_every": 25, "step_sleep": 0.02},
            "max_runtime": "10m",
        },
    }
    spec.update(changes)
    return spec


def interrupt_when_training(rt: LocalRuntime, job_id: str, step: int) -> None:
    """Send the two-minute notice to the job's instance once its record shows `step`."""
    assert rt.fleet is not None
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        record = rt.job_record(job_id)
        if record is not None and (record.progress.step or 0) >= step:
            for inst in rt.fleet.of_job(job_id):
                assert rt.fleet.interrupt(inst.instance_id)
                return
        time.sleep(0.1)
    raise AssertionError(f"{job_id} never reached step {step}")


def trial_job_id(handle: Any, number: int) -> str:
    """The job id the sweep gave trial `number` (random: read from the record once asked)."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        record = handle.record()
        found = [t.job_id for t in (record.trials if record else []) if t.number == number]
        if found:
            return found[0]
        time.sleep(0.1)
    raise AssertionError(f"trial {number} was never asked")


def grid_seed_running_first(spec: dict[str, Any], first: list[float]) -> int:
    """A grid seed whose first points are the learning rates `first`, in order."""
    for seed in range(200):
        checked = validate_sweep({**spec, "sampler": {"name": "grid", "seed": seed}})
        if [p["lr"] for p in studies.grid_points(checked)[: len(first)]] == first:
            return seed
    raise AssertionError("no seed found")


def test_a_sweep_runs_trials_through_an_interruption_and_prunes_a_bad_one(
    rt: LocalRuntime,
) -> None:
    # GIVEN a 3-trial sweep, 2 at a time, over a grid of learning rates: two learn well and
    # run first (the grid seed is chosen so), the third diverges (lr 40) and runs last. At
    # every step lr 0.3 is better than 0.05 (examples/sweep), so the median pruner, which
    # compares with completed trials, can only stop the diverging one.
    spec = ridge_sweep(
        "ridge",
        search_space={"lr": {"type": "categorical", "choices": [0.05, 0.3, 40.0]}},
        pruner={"name": "median", "n_startup_trials": 1, "n_warmup_steps": 0},
    )
    spec["sampler"] = {"name": "grid", "seed": grid_seed_running_first(spec, [0.05, 0.3])}
    sweep_id = new_job_id("ridge")
    handle = rt.sweep(spec, sweep_id=sweep_id)
    # WHEN trial 1's instance is interrupted once it has trained 60 steps
    interrupt_when_training(rt, trial_job_id(handle, 1), step=60)
    # AND the sweep runs on with nobody watching (the laptop only reads the result)
    final = handle.wait(timeout=600, poll_seconds=0.5)
    # THEN the two good trials completed with a value, and the study agrees with the record
    assert final.state == "COMPLETED", final.record
    good, other, bad = final.trials
    assert [good.state, other.state] == [TrialState.COMPLETE] * 2, final.trials
    assert all(t.value is not None and t.value < 1.0 for t in (good, other))
    study = handle.study()
    assert [t.state for t in study.trials[:2]] == [optuna.trial.TrialState.COMPLETE] * 2
    assert study.best_value == pytest.approx(final.best.value if final.best else None)
    # AND the interrupted trial resumed as the same job, with its number and parameters
    interrupted = rt.job_record(trial_job_id(handle, 1))
    assert interrupted is not None and interrupted.state.value == "COMPLETED"
    assert interrupted.interruptions == 1 and len(interrupted.attempts) == 2
    assert (interrupted.attempts[1].restored_step or 0) >= 60
    assert interrupted.spec.hyperparameters["lr"] == other.params["lr"]
    assert interrupted.submission.sweep is not None and interrupted.submission.sweep.trial == 1
    # AND the diverging trial is PRUNED (not failed) and its job was stopped early
    assert bad.params["lr"] == 40.0 and bad.state is TrialState.PRUNED, bad
    assert study.trials[2].state is optuna.trial.TrialState.PRUNED
    job = rt.job_record(bad.job_id)
    assert job is not None and job.state.value == "CANCELLED"
    assert "pruned" in (job.reason or "")
    assert (job.progress.step or 0) < STEPS
    assert rt.fleet is not None
    deadline = time.monotonic() + 15
    while any(i.job_id == bad.job_id for i in rt.fleet.live()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(i.job_id == bad.job_id for i in rt.fleet.live())
    # AND the sweep's Slack thread has the card, a reply per trial and the end
    # (the sweep's record is written before its Slack posts: wait for the last card edit)
    assert rt.slack is not None
    deadline = time.monotonic() + 30
    record = handle.record()
    while time.monotonic() < deadline:
        record = handle.record()
        if record is not None and record.slack:
            thread = rt.slack.thread(record.slack["channel"], record.slack["ts"])
            if "3/3 trials" in thread.parent.text and "best is trial" in thread.replies[-1].text:
                break
        time.sleep(0.3)
    assert record is not None and record.slack
    thread = rt.slack.thread(record.slack["channel"], record.slack["ts"])
    assert "3/3 trials" in thread.parent.text
    texts = [m.text for m in thread.replies]
    assert sum("complete:" in t for t in texts) == 2, texts
    assert sum("pruned:" in t for t in texts) == 1, texts
    assert "best is trial" in texts[-1]
