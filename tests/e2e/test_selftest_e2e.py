"""`respot selftest` on the local runtime: a job interrupted through FIS (the emulator stores
the experiment, the local stand-in carries it out) resumes from its checkpoint and completes."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from infra.local import cloud
from infra.local.runtime import LocalRuntime, RuntimeOptions
from respot.cli import app
from respot.client.localstate import LocalState, write_state
from respot.core.states import JobState
from respot.selftest import Selftest, SelftestPlan, SelftestTimeouts

pytestmark = pytest.mark.e2e

SCALE = 1.0 / 30.0
PLAN = SelftestPlan(steps=120, step_seconds=0.05, checkpoint_every=20, start_after_step=10)
TIMEOUTS = SelftestTimeouts(training=90, notice=30, resume=90, finish=90, poll=0.2)


@pytest.fixture(scope="module")
def rt() -> Iterator[LocalRuntime]:
    with LocalRuntime(RuntimeOptions(time_scale=SCALE)) as runtime:
        yield runtime


def test_selftest_passes_through_a_fis_interruption(rt: LocalRuntime) -> None:
    # WHEN the self-test runs against the local runtime
    result = Selftest(rt.sdk_deployment(), cloud.session(), plan=PLAN, timeouts=TIMEOUTS).run()
    # THEN it passed, and the interruption was the FIS experiment's, on the job's first instance
    assert result.passed, result.steps
    c = result.changeover
    assert c is not None and c.interrupted_attempt == 1
    assert rt.fis is not None and result.experiment_id is not None
    assert rt.fis.carried_out[result.experiment_id] == [c.instance_id]
    record = rt.job_record(result.job_id or "")
    assert record is not None and record.state is JobState.COMPLETED
    assert record.interruptions == 1 and len(record.attempts) == 2
    # the resume started from the checkpoint written on the notice: nothing lost
    assert c.resumed_from_step == c.checkpoint_step == c.step_at_notice
    assert c.resumed_from_step is not None and c.resumed_from_step >= PLAN.start_after_step
    assert c.lost_steps == 0
    assert c.notice_to_replacement_requested_s is not None
    assert c.notice_to_training_resumed_s is not None
    assert c.notice_to_replacement_requested_s < c.notice_to_training_resumed_s


def test_an_experiment_without_a_target_fails_with_the_reason(rt: LocalRuntime) -> None:
    fis = rt.client("fis")
    template = rt.sdk_deployment().fis_template_id
    experiment = fis.start_experiment(experimentTemplateId=template, clientToken="no-target")
    experiment_id = experiment["experiment"]["id"]
    end = time.monotonic() + 10
    state = fis.get_experiment(id=experiment_id)["experiment"]["state"]
    while state["status"] != "failed" and time.monotonic() < end:
        time.sleep(0.1)
        state = fis.get_experiment(id=experiment_id)["experiment"]["state"]
    assert state["status"] == "failed"
    assert "no running spot instance tagged" in state["reason"]


def test_a_wait_that_times_out_says_which_and_cancels_the_job(rt: LocalRuntime) -> None:
    # GIVEN a training wait far too short for any instance to boot
    timeouts = SelftestTimeouts(training=0.5, notice=1, resume=1, finish=1, poll=0.1)
    result = Selftest(rt.sdk_deployment(), cloud.session(), plan=PLAN, timeouts=timeouts).run()
    # THEN it failed, naming the wait, and the job is cancelled (nothing left running)
    assert not result.passed and result.experiment_id is None
    assert result.outcome.startswith("timed out after 0.5s waiting for the job to train")
    end = time.monotonic() + 30
    record = rt.job_record(result.job_id or "")
    while (record is None or record.state is not JobState.CANCELLED) and time.monotonic() < end:
        time.sleep(0.2)
        record = rt.job_record(result.job_id or "")
    assert record is not None and record.state is JobState.CANCELLED


def test_respot_selftest_local_from_the_command_line(
    rt: LocalRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the runtime's state file, as `respot local up` writes it
    path = tmp_path / "local.json"
    deployment = rt.sdk_deployment()
    assert deployment.endpoint_url is not None
    write_state(
        LocalState(
            pid=os.getpid(),
            endpoint_url=deployment.endpoint_url,
            deployment=json.loads(deployment.to_json()),
            started_at=datetime.now(UTC).isoformat(),
            time_scale=SCALE,
            work_root=str(rt.work_root),
            extra=rt.state_extra(),
        ),
        path,
    )
    monkeypatch.setenv("RESPOT_LOCAL_STATE", str(path))
    # WHEN `respot selftest --local --json` runs
    result = CliRunner().invoke(app, ["selftest", "--local", "--json"])
    # THEN it passed and printed the changeover figures
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["passed"] and report["changeover"]["lost_steps"] == 0
    assert report["experiment_status"] in {"running", "completed"}


def test_ctrl_c_cancels_the_job_and_stops_the_experiment(rt: LocalRuntime) -> None:
    # GIVEN a self-test that is stopped by Ctrl-C right after it started the experiment
    pressed: list[str] = []

    def echo(line: str) -> None:
        if "started FIS experiment" in line and not pressed:
            pressed.append(line)
            raise KeyboardInterrupt

    test = Selftest(rt.sdk_deployment(), cloud.session(), plan=PLAN, timeouts=TIMEOUTS, echo=echo)
    with pytest.raises(KeyboardInterrupt):
        test.run()
    # THEN the job is cancelled and the experiment ends: nothing is left running
    assert test.result.outcome == "stopped by Ctrl-C" and test.result.experiment_id
    # (The experiment lasts 4 s here; on a loaded machine it may be over before the clean-up
    # looks, and then there is nothing to stop. If it was still live, it must end stopped.)
    asked_to_stop = any("stopped FIS experiment" in s for s in test.result.steps)
    expected = "stopped" if asked_to_stop else "completed"
    fis = rt.client("fis")
    end = time.monotonic() + 30
    record = rt.job_record(test.result.job_id or "")
    status = ""
    while time.monotonic() < end:
        record = rt.job_record(test.result.job_id or "")
        status = fis.get_experiment(id=test.result.experiment_id)["experiment"]["state"]["status"]
        if record is not None and record.state is JobState.CANCELLED and status == expected:
            break
        time.sleep(0.2)
    assert record is not None and record.state is JobState.CANCELLED
    assert status == expected, test.result.steps
