"""The researcher's day, end to end: `respot` commands against a local runtime over HTTP.

One runtime serves the module; its state file names this test process (as `respot local up`
would name its own), so every command below finds it with `--local` exactly as another shell
would. A counting job is interrupted once; then status, logs (from CloudWatch Logs in the
emulator), cost, the timeline picture, TensorBoard event files, a rerun and a cancel.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from infra.local.market import ChaosSchedule
from infra.local.runtime import LocalRuntime, RuntimeOptions
from respot.cli import app
from respot.client.localstate import LocalState, write_state

pytestmark = pytest.mark.e2e

SESSIONS = Path(__file__).parent / "sessions"
SCALE = 1.0 / 30.0
# The first attempt is interrupted 4 s after boot and holds the notice at most 1 s (3 s of
# the 4-s notice are kept to save): at most 5 s of training, 167 steps of 0.03 s. It cannot
# finish 400 even if the notice comes seconds late; the resumed attempt runs fast.
STEPS = 400
SEED = 3


@pytest.fixture(scope="module")
def rt() -> Iterator[LocalRuntime]:
    with LocalRuntime(RuntimeOptions(time_scale=SCALE, chaos=ChaosSchedule(job_ids=set()))) as r:
        yield r


@pytest.fixture(scope="module")
def state_file(rt: LocalRuntime, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("respot-home") / "local.json"
    deployment = rt.sdk_deployment()
    assert deployment.endpoint_url is not None
    write_state(
        LocalState(
            pid=os.getpid(),
            endpoint_url=deployment.endpoint_url,
            deployment={k: v for k, v in asdict(deployment).items() if v is not None},
            started_at=datetime.now(UTC).isoformat(),
            time_scale=SCALE,
            work_root=str(rt.work_root),
        ),
        path,
    )
    yield path


@pytest.fixture
def cli(state_file: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("RESPOT_LOCAL_STATE", str(state_file))
    monkeypatch.delenv("RESPOT_LOCAL", raising=False)
    runner = CliRunner()

    def invoke(*args: str, code: int = 0) -> str:
        result = runner.invoke(app, [*args, "--local"], catch_exceptions=False)
        assert result.exit_code == code, result.output
        return result.output

    return invoke


def job_file(tmp_path: Path, name: str, steps: int = STEPS) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(
        f"""
name: {name}
entry_point: e2esessions.counting:CountingSession
source_dir: {SESSIONS}
seed: {SEED}
hyperparameters:
  steps: {steps}
  step_seconds: 0.03
  resumed_step_seconds: 0.005
  checkpoint_every: 40
"""
    )
    return path


@pytest.fixture(scope="module")
def finished_job(
    rt: LocalRuntime, state_file: Path, tmp_path_factory: pytest.TempPathFactory
) -> str:
    """A counting job submitted with `respot run`, interrupted once, followed to its end."""
    import re

    # GIVEN a job file, and the market set to interrupt the job's first instance 4 s after boot
    path = job_file(tmp_path_factory.mktemp("job"), "cli-count")
    runner = CliRunner()
    env = {"RESPOT_LOCAL_STATE": str(state_file)}
    assert rt.market is not None
    original = rt.market.chaos.delay_for

    def interrupt_first(inst: Any) -> float | None:
        return (
            120.0 if (inst.attempt == 1 and inst.job_id.startswith("cli-count")) else original(inst)
        )

    rt.market.chaos.delay_for = interrupt_first  # type: ignore[method-assign]
    try:
        # WHEN it is submitted and followed with --wait, off a terminal
        result = runner.invoke(
            app, ["run", str(path), "--wait", "--timeout", "120", "--local"], env=env
        )
    finally:
        rt.market.chaos.delay_for = original  # type: ignore[method-assign]
    # THEN it completes, and the plain output told the story as it happened
    assert result.exit_code == 0, result.output
    out = result.output
    assert "\x1b" not in out
    match = re.search(r"submitted (cli-count-\S+)", out)
    assert match is not None, out
    assert " interrupted " in out and " resumed " in out and " progress " in out
    assert f"COMPLETED: step {STEPS}/{STEPS} (100%), 1 interruption(s)" in out
    return match.group(1)


def test_status_shows_attempts_interruptions_checkpoint_and_provenance(
    cli: Any, finished_job: str
) -> None:
    data = json.loads(cli("status", finished_job, "--json"))
    assert data["state"] == "COMPLETED" and data["interruptions"] == 1
    first, second = data["attempts"]
    assert first["end"] == "interrupted" and second["restored_step"] == first["last_step"]
    assert data["checkpoint"]["step"] >= 40
    prov = data["submission"]["provenance"]
    assert prov["python_version"] and "respot" in prov["packages"]
    assert data["submission"]["spec"]["seed"] == SEED
    assert data["cost"]["paid_usd"] > 0
    text = cli("status", finished_job)
    assert "COMPLETED" in text and "interrupted" in text and f"seed {SEED}" in text
    assert second["instance_id"] in text


def test_logs_merge_every_attempt_in_order_from_cloudwatch(
    rt: LocalRuntime, cli: Any, finished_job: str
) -> None:
    # GIVEN the job's streams in the emulator's CloudWatch Logs (the agent shipped them live)
    streams = rt.client("logs").describe_log_streams(
        logGroupName=rt.sdk_deployment().log_group, logStreamNamePrefix=f"{finished_job}/"
    )["logStreams"]
    assert len(streams) == 2
    # WHEN the logs are read THEN each attempt's lines come in attempt order with their prefix
    lines = [json.loads(x) for x in cli("logs", finished_job, "--json").splitlines()]
    hparams = [x for x in lines if x["message"].startswith("HPARAMS")]
    assert [x["attempt"] for x in hparams] == [1, 2]
    assert [x["attempt"] for x in lines] == sorted(x["attempt"] for x in lines)
    assert all(x["timestamp_ms"] for x in lines)
    text = cli("logs", finished_job)
    assert f"a1 {hparams[0]['instance_id']} | HPARAMS" in text


def test_cost_ledger_has_every_attempt_and_the_on_demand_comparison(
    cli: Any, finished_job: str
) -> None:
    ledger = json.loads(cli("cost", finished_job, "--json"))
    assert [a["attempt"] for a in ledger["attempts"]] == [1, 2]
    for a in ledger["attempts"]:
        assert a["market"] == "spot" and a["price_per_hour"] > 0 and a["end"] is not None
        # Both figures are printed to 6 decimals: up to 5e-7 each from rounding alone.
        expected = a["hours"] * a["price_per_hour"]
        assert a["paid_usd"] == pytest.approx(expected, rel=1e-3, abs=1e-6)
    paid = sum(a["paid_usd"] for a in ledger["attempts"])
    assert ledger["paid_usd"] == pytest.approx(paid, abs=1e-5)
    assert ledger["on_demand_usd"] > ledger["paid_usd"] and ledger["savings_pct"] > 0
    recent = json.loads(cli("cost", "--json"))
    assert finished_job in [j["job_id"] for j in recent["jobs"]]
    assert "saved" in cli("cost", finished_job)


def test_timeline_picture_is_drawn_from_the_record(
    cli: Any, finished_job: str, tmp_path: Path
) -> None:
    import matplotlib.image

    png = tmp_path / "timeline.png"
    assert "wrote" in cli("timeline", finished_job, "--png", str(png))
    assert matplotlib.image.imread(png).shape[:2] == (930, 1800)
    data = json.loads(cli("timeline", finished_job, "--json"))
    assert len(data["attempts"]) == 2 and len(data["notices_seconds"]) == 1
    assert data["attempts"][1]["points"][-1]["step"] == STEPS


def test_tensorboard_event_files_decode_to_the_reported_scalars(
    cli: Any, finished_job: str, tmp_path: Path
) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    # WHEN the event files are brought down (without starting the server)
    data = json.loads(
        cli("tensorboard", finished_job, "--no-launch", "--json", "--logdir", str(tmp_path))
    )
    names = sorted(Path(f).name for f in data["files"])
    assert [n.rsplit(".", 1)[-1] for n in names] == ["attempt-0001", "attempt-0002"]
    # THEN TensorBoard reads them as one run whose "total" is the session's reported sum
    acc = EventAccumulator(str(tmp_path / finished_job))
    acc.Reload()
    points = acc.Scalars("total")
    assert points and points[-1].step == STEPS
    steps = [p.step for p in points]
    assert steps == sorted(set(steps))  # one curve across the interruption, nothing twice
    for p in points:
        assert p.value == pytest.approx((SEED + 1) * p.step * (p.step + 1) / 2, rel=1e-6)


def test_rerun_launches_the_same_job_with_the_same_code(
    rt: LocalRuntime, cli: Any, finished_job: str
) -> None:
    old = json.loads(cli("status", finished_job, "--json"))
    # WHEN the job is run again, faster (an override applies to a rerun too)
    fast = "hyperparameters.step_seconds=0.002"
    done = json.loads(
        cli("run", "--rerun", finished_job, "--set", fast, "--wait", "--timeout", "90", "--json")
    )
    # THEN it is the same job on the same code, with the one field changed

    assert done["state"] == "COMPLETED" and done["job_id"] != finished_job
    sub = done["submission"]
    assert sub["provenance"]["rerun_of"] == finished_job
    assert sub["code"]["sha256"] == old["submission"]["code"]["sha256"]
    assert sub["code"]["s3_uri"].endswith(
        f"/jobs/{done['job_id']}/code/{sub['code']['sha256']}.zip"
    )
    assert sub["spec"]["hyperparameters"] == {
        **old["submission"]["spec"]["hyperparameters"],
        "step_seconds": 0.002,
    }
    assert "rerun of" in cli("status", done["job_id"])


def test_ls_and_cancel(rt: LocalRuntime, cli: Any, finished_job: str, tmp_path: Path) -> None:
    submitted = json.loads(cli("run", str(job_file(tmp_path, "cancel-me", steps=5000)), "--json"))
    job_id = submitted["job_id"]
    listed = {j["job_id"]: j for j in json.loads(cli("ls", "--json"))}
    assert listed[finished_job]["state"] == "COMPLETED"
    cancelled = json.loads(cli("cancel", job_id, "--wait", "--json", "--reason", "changed my mind"))
    assert cancelled == {"job_id": job_id, "state": "CANCELLED", "cancelled": True}
    assert "already CANCELLED" in cli("cancel", job_id)
    assert "changed my mind" in cli("status", job_id)


def test_commands_explain_a_missing_job_and_a_missing_runtime(
    cli: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert "is not in the local runtime" in cli("status", "no-such-job", code=1)
    monkeypatch.setenv("RESPOT_LOCAL_STATE", str(tmp_path / "nothing.json"))
    assert "respot local up" in cli("ls", code=1)
