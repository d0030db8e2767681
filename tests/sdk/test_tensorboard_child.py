"""`respot tensorboard` ends its server with itself, and says so when the port is taken.

TensorBoard is replaced by a stand-in package (`tensorboard.main` first on PYTHONPATH) that
binds the port as TensorBoard does, exits 255 when it cannot, and starts a helper process
that holds the socket too (as TensorBoard's data server outlives a bare kill of its parent).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from respot.cli import app, observe
from respot.cli.children import port_in_use

FAKE_MAIN = textwrap.dedent(
    """
    import argparse, os, socket, subprocess, sys, time
    from pathlib import Path

    parser = argparse.ArgumentParser()
    parser.add_argument("--logdir")
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    args = parser.parse_args()
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        server.bind((args.host, args.port))
    except OSError:
        print(f"TensorBoard could not bind to port {args.port}", file=sys.stderr)
        sys.exit(255)
    server.listen()
    helper = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(3600)"], pass_fds=(server.fileno(),)
    )
    ready = Path(os.environ["FAKE_TB_READY"])
    ready.with_suffix(".tmp").write_text(f"{os.getpid()} {helper.pid}")
    ready.with_suffix(".tmp").replace(ready)  # whole when seen
    time.sleep(3600)
    """
)

# The command, with the deployment replaced: a finished job whose one event file is local.
SCRIPT = textwrap.dedent(
    """
    import sys
    from types import SimpleNamespace
    from respot.cli import app, observe

    record = SimpleNamespace(state=SimpleNamespace(is_terminal=lambda: True))
    observe.connect = lambda local: SimpleNamespace(record=lambda job_id: record)
    observe.download_tensorboard = lambda conn, job_id, run_dir: [run_dir / "events.out"]
    app(["tensorboard", "job-1", "--logdir", sys.argv[1], "--port", sys.argv[2]])
    """
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie may wait for a reaper that never comes)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture
def fake_tensorboard(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    package = tmp_path / "fake" / "tensorboard"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "main.py").write_text(FAKE_MAIN)
    ready = tmp_path / "ready"
    env = {"PYTHONPATH": str(package.parent), "FAKE_TB_READY": str(ready)}
    yield ready, env
    if ready.exists():  # whatever the test saw, leave no stand-in running
        for pid in map(int, ready.read_text().split()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_sigterm_ends_the_server_and_its_helpers(
    tmp_path: Path, fake_tensorboard: tuple[Path, dict[str, str]]
) -> None:
    ready, env = fake_tensorboard
    port = free_port()
    # GIVEN `respot tensorboard` serving (the stand-in has bound the port and started a helper)
    command = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "logs"), str(port)],
        env={**os.environ, **env},
    )
    deadline = time.monotonic() + 120  # a cap against a hang; the wait ends on the ready file
    while not ready.exists() and command.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.exists(), f"the stand-in never served (respot exited {command.returncode})"
    server, helper = map(int, ready.read_text().split())
    assert port_in_use(port)
    # WHEN respot is told to stop with SIGTERM (what `kill`, systemd or an IDE send)
    command.send_signal(signal.SIGTERM)
    code = command.wait(timeout=60)
    # THEN nothing of TensorBoard is left: neither process, and the port is free for the next
    # (respot has killed the group; the kernel may still be taking the helper down: a cap)
    deadline = time.monotonic() + 60
    while running(helper) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(server) and not running(helper)
    assert not port_in_use(port)
    assert code == 128 + signal.SIGTERM  # and respot says it was terminated


def test_a_taken_port_is_named_with_the_fix(
    tmp_path: Path,
    fake_tensorboard: tuple[Path, dict[str, str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, env = fake_tensorboard
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    record = SimpleNamespace(state=SimpleNamespace(is_terminal=lambda: True))
    monkeypatch.setattr(observe, "connect", lambda local: SimpleNamespace(record=lambda j: record))
    monkeypatch.setattr(observe, "download_tensorboard", lambda c, j, d: [d / "events.out"])
    # GIVEN something (a TensorBoard left behind) already listening on the port
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        result = CliRunner().invoke(
            app, ["tensorboard", "job-1", "--logdir", str(tmp_path), "--port", str(port)]
        )
    # THEN the error says the port is taken and how to choose another, not "code 255"
    assert result.exit_code == 1
    assert f"port {port} on 127.0.0.1 is in use" in result.stderr
    assert f"--port {port + 1}" in result.stderr
    assert "code 255" not in result.stderr


# A stop signal that comes while the child is starting (before Popen returns): respot must
# neither die of it (leaving the child) nor lose it (serving on).
SIGNAL_WHILE_STARTING = textwrap.dedent(
    """
    import os, signal, subprocess, sys
    from respot.cli import children

    real = subprocess.Popen

    def starting(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)  # handled at the next bytecode: still starting
        proc = real(*args, **kwargs)
        print(proc.pid, flush=True)
        return proc

    children.subprocess.Popen = starting
    print(children.run_in_own_group([sys.executable, "-c", "import time; time.sleep(3600)"]))
    """
)


def test_a_stop_signal_while_the_child_starts_ends_it(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", SIGNAL_WHILE_STARTING],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = result.stdout.split()
    child = int(lines[0]) if lines else None
    try:
        assert result.returncode == 0, result.stderr  # not killed by the signal
        assert result.stdout.splitlines()[1] == f"(0, {int(signal.SIGTERM)})"
        assert child is not None and not running(child)
    finally:
        if child is not None and running(child):
            os.kill(child, signal.SIGKILL)
