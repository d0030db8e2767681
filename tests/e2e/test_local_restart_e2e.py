"""`respot local down` then `respot local up`: the jobs, their outputs and logs are still there.

Real processes, as a researcher's shells: `local up`, a job run to completion and one left
running, `local down`, a new `local up` (a new moto, a new process), and then `status`,
`logs` and `pull` of the finished job, and the live one ended CANCELLED with the reason.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from infra.local.persist import CANCEL_REASON

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SESSIONS = Path(__file__).parent / "sessions"
RESPOT = [sys.executable, "-m", "respot.cli"]


def respot(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RESPOT, *args], env=env, capture_output=True, text=True, timeout=300, check=False
    )


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Until `predicate` holds; the timeout only bounds a run that never gets there."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "RESPOT_LOCAL_STATE": str(tmp_path / "state" / "local.json"),
        "RESPOT_LOCAL": "1",
        "COLUMNS": "200",
    }


@pytest.fixture
def runtimes(env: dict[str, str], tmp_path: Path) -> Iterator[Callable[[], None]]:
    """`up()` starts `respot local up` and returns once it is up; all are stopped at the end."""
    procs: list[subprocess.Popen[bytes]] = []
    state = Path(env["RESPOT_LOCAL_STATE"])

    def up() -> None:
        log = tmp_path / f"up-{len(procs)}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [*RESPOT, "local", "up"], env=env, stdout=out, stderr=subprocess.STDOUT
            )
        procs.append(proc)
        wait_for(lambda: state.exists() or proc.poll() is not None, 240, "local up")
        assert proc.poll() is None, log.read_text()

    yield up
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=180)
            except subprocess.TimeoutExpired:
                proc.kill()


def state_of(env: dict[str, str], job_id: str) -> dict[str, object]:
    shown = respot(env, "status", job_id, "--json")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    data: dict[str, object] = json.loads(shown.stdout)
    return data


def test_a_restart_keeps_jobs_outputs_and_logs(
    env: dict[str, str], runtimes: Callable[[], None], tmp_path: Path
) -> None:
    # GIVEN a runtime with one finished job and one still training
    runtimes()
    job = tmp_path / "job.yaml"
    job.write_text(
        f"name: kept\nentry_point: e2esessions.counting:CountingSession\nsource_dir: {SESSIONS}\n"
        "hyperparameters: {steps: 30, step_seconds: 0.01, checkpoint_every: 10}\n"
    )
    done = respot(env, "run", str(job), "--wait", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    finished = json.loads(done.stdout)["job_id"]
    long = respot(
        env,
        "run",
        str(job),
        "--json",
        "--set",
        "name=live",
        "--set",
        "hyperparameters.steps=100000",
    )
    assert long.returncode == 0, long.stdout + long.stderr
    live = json.loads(long.stdout)["job_id"]
    wait_for(lambda: state_of(env, live)["state"] == "RUNNING", 240, "the live job to run")

    # WHEN the runtime is stopped and a new one started (a new moto, nothing in memory)
    down = respot(env, "local", "down")
    assert down.returncode == 0, down.stdout + down.stderr
    assert "kept in" in down.stdout, down.stdout
    runtimes()

    # THEN the finished job is there, with its outputs and its session's output
    record = state_of(env, finished)
    assert record["state"] == "COMPLETED"
    logs = respot(env, "logs", finished)
    assert logs.returncode == 0 and "HPARAMS" in logs.stdout, logs.stdout + logs.stderr
    pulled = respot(env, "pull", finished, str(tmp_path / "pulled"))
    assert pulled.returncode == 0, pulled.stdout + pulled.stderr
    assert any((tmp_path / "pulled").rglob("session.log"))
    # AND the job that was live ended CANCELLED, saying why, with its instance gone
    cancelled = state_of(env, live)
    assert cancelled["state"] == "CANCELLED"
    assert str(cancelled["reason"]).startswith(CANCEL_REASON)
    listed = respot(env, "ls", "--json")
    assert {finished, live} <= {row["job_id"] for row in json.loads(listed.stdout)}
    # AND the restarted runtime runs a new job as the first one did
    again = respot(env, "run", str(job), "--wait", "--json", "--set", "name=after")
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads(again.stdout)["state"] == "COMPLETED"
