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
        # Interrupt every job's first instance 4 s (120 simulated seconds) after it boots.
        [
            *RESPOT,
            "local",
            "up",
            "--time-scale",
            "1/30",
            "--interrupt-after",
            "120",
            "--interruptions",
            "1",
        ],
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
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()


def test_other_processes_use_the_runtime_local_up_runs(
    env: dict[str, str], local_up: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    state = Path(env["RESPOT_LOCAL_STATE"])
    # GIVEN `respot local up` running in its own process
    wait_for(lambda: state.exists() or local_up.poll() is not None, 240, "the state file")
    assert local_up.poll() is None, (tmp_path / "up.log").read_text()
    status = json.loads(respot(env, "local", "status", "--json").stdout)
    assert status["running"] is True and status["pid"] == local_up.pid
    assert status["endpoint_url"].startswith("http://127.0.0.1:")
    # AND `respot local interrupt` reaches it from another process (an unknown job: refused,
    # naming it, after a bounded wait; nothing sent)
    unknown = respot(env, "local", "interrupt", "no-such-job", "--wait", "1")
    assert unknown.returncode == 1
    assert "no job no-such-job in this local runtime" in unknown.stderr, unknown.stderr

    # WHEN another process submits a job file to it (RESPOT_LOCAL=1 instead of --local), and a
    # third follows its logs while the runtime interrupts its first instance
    job = tmp_path / "job.yaml"
    job.write_text(
        f"name: shell-two\nentry_point: e2esessions.counting:CountingSession\n"
        f"source_dir: {SESSIONS}\n"
        # Interrupted 4 s after boot, holding the notice at most 1 s (3 s of its 4 s are kept
        # to save), the first attempt trains at most 5 s, 125 steps of 0.04 s: it cannot
        # finish 300 even if the notice comes seconds late; the resumed attempt runs fast.
        "hyperparameters: {steps: 300, step_seconds: 0.04, resumed_step_seconds: 0.01,"
        " checkpoint_every: 30}\n"
    )
    ran = respot({**env, "RESPOT_LOCAL": "1"}, "run", str(job), "--json")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    job_id = json.loads(ran.stdout)["job_id"]
    followed = respot(env, "logs", job_id, "--local", "--follow")
    # THEN the followed logs cover both instances, in order, and end when the job does
    assert followed.returncode == 0, followed.stderr
    hparams = [line for line in followed.stdout.splitlines() if "| HPARAMS" in line]
    assert [line.split()[0] for line in hparams] == ["a1", "a2"], followed.stdout
    done = json.loads(respot(env, "status", job_id, "--local", "--json").stdout)
    assert done["state"] == "COMPLETED" and done["interruptions"] == 1
    assert hparams[1].startswith(f"a2 {done['attempts'][1]['instance_id']} | ")

    # WHEN a Python script calls run() with RESPOT_LOCAL=1 THEN it submits to the same runtime
    script = (
        "import json, sys\n"
        "from respot import run\n"
        "job = run({'name': 'from-python', "
        "'entry_point': 'e2esessions.counting:CountingSession', "
        f"'source_dir': {str(SESSIONS)!r}, "
        "'hyperparameters': {'steps': 40, 'step_seconds': 0.02, 'checkpoint_every': 10}})\n"
        "status = job.wait(timeout=360)\n"
        "print(json.dumps({'job_id': job.job_id, 'state': status.state}))\n"
    )
    scripted = subprocess.run(
        [sys.executable, "-c", script],
        env={**env, "RESPOT_LOCAL": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert scripted.returncode == 0, scripted.stdout + scripted.stderr
    from_python = json.loads(scripted.stdout.strip().splitlines()[-1])
    assert from_python["state"] == "COMPLETED"
    listed = json.loads(respot(env, "status", from_python["job_id"], "--local", "--json").stdout)
    assert listed["state"] == "COMPLETED"

    port = free_port()
    # Started as in a terminal, where Ctrl-C reaches it. A suite run in the background (`&`
    # in a script, as bench/busy/run.sh does) has SIGINT ignored, which its children inherit,
    # and then no SIGINT could stop the command (it hung here twice). A handler in this
    # process is not inherited: exec gives the child SIGINT's default, as a terminal's job.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
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
    finally:
        signal.signal(signal.SIGINT, signal.SIG_DFL if previous is None else previous)
    try:
        runs: list[str] = []

        def served() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/data/runs", timeout=2) as r:
                    runs[:] = json.loads(r.read())
                return job_id in runs
            except OSError:
                return False

        wait_for(served, 240, "TensorBoard to serve the job's run")
    finally:
        board.send_signal(signal.SIGINT)  # Ctrl-C, as a researcher stops it
        board.wait(timeout=80)

    # WHEN the runtime is stopped from a third process THEN it is gone, state file and all
    down = respot(env, "local", "down")
    assert down.returncode == 0, down.stderr
    assert local_up.wait(timeout=120) == 0
    assert not state.exists()
    after = respot(env, "ls", "--local")
    assert after.returncode == 1 and "respot local up" in after.stderr


def test_local_up_with_a_satellite_region_and_the_doctor_checks_it(
    env: dict[str, str], tmp_path: Path
) -> None:
    state = Path(env["RESPOT_LOCAL_STATE"])
    log = (tmp_path / "up-regions.log").open("wb")
    # GIVEN `respot local up` with a satellite in us-west-2
    proc = subprocess.Popen(
        [*RESPOT, "local", "up", "--extra-regions", "us-west-2"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: state.exists() or proc.poll() is not None, 240, "the state file")
        assert proc.poll() is None, (tmp_path / "up-regions.log").read_text()
        # WHEN another shell runs the doctor against it
        doctor = respot({**env, "RESPOT_LOCAL": "1"}, "doctor", "--json")
        # THEN the satellite is checked as a deployed one: parameter, launch template and
        # instance profile, forwarding rules and their empty dead-letter queue
        assert doctor.returncode == 0, doctor.stdout + doctor.stderr
        found = {f["check"]: f["status"] for f in json.loads(doctor.stdout)["findings"]}
        for check in ("satellite", "forwarding", "forward dead letters"):
            assert found[f"{check} us-west-2"] == "ok", found
        assert found["quotas (us-west-2)"] == "skipped"
    finally:
        down = respot(env, "local", "down")
        assert down.returncode == 0, down.stderr
        assert proc.wait(timeout=120) == 0
        log.close()
