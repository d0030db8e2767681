"""`respot local up` as a real process, and other `respot` processes that find and use it.

Exactly what a researcher does in two shells: one runs `respot local up`; the other runs a
job file with `--local --wait`, reads its logs, serves its TensorBoard on 127.0.0.1 and
finally stops the runtime with `respot local down`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SESSIONS = Path(__file__).parent / "sessions"
RESPOT = [sys.executable, "-m", "respot.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def respot(
    env: dict[str, str], *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RESPOT, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def wait_for(predicate: object, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "RESPOT_LOCAL_STATE": str(tmp_path / "state" / "local.json"),
        "RESPOT_LOCAL": "",
        "COLUMNS": "120",
    }


@pytest.fixture
def local_up(env: dict[str, str], tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    log = (tmp_path / "up.log").open("wb")
    proc = subprocess.Popen(
        [*RESPOT, "local", "up", "--time-scale", "1/30"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:  # the test failed before `respot local down`
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()


def test_other_processes_use_the_runtime_local_up_runs(
    env: dict[str, str], local_up: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    state = Path(env["RESPOT_LOCAL_STATE"])
    # GIVEN `respot local up` running in its own process
    wait_for(lambda: state.exists() or local_up.poll() is not None, 60, "the state file")
    assert local_up.poll() is None, (tmp_path / "up.log").read_text()
    status = json.loads(respot(env, "local", "status", "--json").stdout)
    assert status["running"] is True and status["pid"] == local_up.pid
    assert status["endpoint_url"].startswith("http://127.0.0.1:")

    # WHEN another process runs a job file against it, with RESPOT_LOCAL=1 instead of --local
    job = tmp_path / "job.yaml"
    job.write_text(
        f"name: shell-two\nentry_point: e2esessions.counting:CountingSession\n"
        f"source_dir: {SESSIONS}\nhyperparameters: {{steps: 40, step_seconds: 0.01}}\n"
    )
    ran = respot({**env, "RESPOT_LOCAL": "1"}, "run", str(job), "--wait", "--json")
    # THEN the job completes, and its logs and TensorBoard files come from that runtime
    assert ran.returncode == 0, ran.stdout + ran.stderr
    done = json.loads(ran.stdout)
    assert done["state"] == "COMPLETED"
    job_id = done["job_id"]
    logs = respot(env, "logs", job_id, "--local")
    assert (
        logs.returncode == 0 and f"a1 {done['attempts'][0]['instance_id']} | HPARAMS" in logs.stdout
    )

    port = free_port()
    board = subprocess.Popen(
        [
            *RESPOT,
            "tensorboard",
            job_id,
            "--local",
            "--port",
            str(port),
            "--logdir",
            str(tmp_path / "tb"),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        runs: list[str] = []

        def served() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/data/runs", timeout=2) as r:
                    runs[:] = json.loads(r.read())
                return job_id in runs
            except OSError:
                return False

        wait_for(served, 60, "TensorBoard to serve the job's run")
    finally:
        board.send_signal(signal.SIGINT)  # Ctrl-C, as a researcher stops it
        board.wait(timeout=20)

    # WHEN the runtime is stopped from a third process THEN it is gone, state file and all
    down = respot(env, "local", "down")
    assert down.returncode == 0, down.stderr
    assert local_up.wait(timeout=30) == 0
    assert not state.exists()
    after = respot(env, "ls", "--local")
    assert after.returncode == 1 and "respot local up" in after.stderr
