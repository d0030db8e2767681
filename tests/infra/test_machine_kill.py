"""A local instance's end kills every process it started, sessions of their own included."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infra.local.fleet import kill_machine

# A machine: its user data (a new session, as the fleet starts it) starts a process in a
# session of its own, as the agent starts a command job or a workspace's supervisor, which
# starts a child of its own. Each writes its pid to a file named after it, then sleeps.
SLEEPER = """
import os, subprocess, sys, time
out, name, then = sys.argv[1], sys.argv[2], sys.argv[3:]
if then:
    subprocess.Popen([sys.executable, __file__, out, *then], start_new_session=name == "machine")
(Path := __import__("pathlib").Path)(out, name).write_text(str(os.getpid()))
time.sleep(600)
"""
NAMES = ("machine", "own", "child")


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent to reap it counts as gone)."""
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="the descendants are read from /proc")
def test_killing_a_machine_kills_its_processes_in_sessions_of_their_own(tmp_path: Path) -> None:
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    argv = [sys.executable, str(script), str(tmp_path), *NAMES]
    machine = subprocess.Popen(argv, start_new_session=True)
    files = [tmp_path / n for n in NAMES]
    try:
        # bounded by the processes' start, not by a guess of how long they take
        deadline = time.monotonic() + 120
        while not all(f.exists() and f.read_text() for f in files):
            assert time.monotonic() < deadline, "the machine's processes never started"
            time.sleep(0.05)
        pids = {f.name: int(f.read_text()) for f in files}
        assert os.getpgid(pids["own"]) != os.getpgid(machine.pid)  # another group indeed
        # WHEN the machine is killed
        kill_machine(machine.pid)
        machine.wait(timeout=60)
        # THEN nothing it started is left running
        deadline = time.monotonic() + 60
        while any(alive(p) for p in pids.values()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [n for n, p in pids.items() if alive(p)] == []
    finally:
        for f in files:
            if f.exists() and f.read_text():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(f.read_text()), signal.SIGKILL)
        machine.kill()
