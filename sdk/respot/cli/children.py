"""A server the CLI runs in the foreground (TensorBoard), ended with the command however it ends.

The child runs in a process group of its own; Ctrl-C, SIGTERM and SIGHUP to `respot` (and any
exception or normal exit) end that whole group, so neither the server nor a helper it
started (TensorBoard's data server) keeps a port after `respot` is gone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
from collections.abc import Sequence
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
GRACE_SECONDS = 10.0  # how long the group may take to exit after SIGTERM before SIGKILL


class _Stopped(BaseException):
    """Raised in the main thread by a stop signal, so `finally` blocks run."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """True if a server already listens on host:port (a bind, as a server would do it, fails)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def end_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the child's process group, SIGKILL it if it outlives the grace period."""
    pgid = proc.pid  # start_new_session: the child leads its own group
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=GRACE_SECONDS)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)  # what is left of the group (helpers included)
    proc.wait()


def run_in_own_group(argv: Sequence[str]) -> tuple[int, int | None]:
    """Run `argv` until it exits or `respot` is told to stop: (exit code, stop signal or None).

    The child's whole process group is ended before this returns, in every case. The stop
    signals are caught before the child starts (a SIGTERM between the two would end `respot`
    and leave the server running); one that comes while it starts is acted on once it has.
    """
    started: list[subprocess.Popen[bytes]] = []
    previous: dict[int, object] = {}
    stopping: list[int] = []

    def stop(signum: int, _frame: FrameType | None) -> None:
        if stopping:
            return  # already ending the group; a second Ctrl-C must not cut that short
        stopping.append(signum)
        if started:  # else Popen is still starting the child: checked right after it
            raise _Stopped(signum)

    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            previous[sig] = signal.signal(sig, stop)
    try:
        started.append(subprocess.Popen(list(argv), start_new_session=True))  # noqa: S603
        if stopping:
            return 0, stopping[0]
        return started[0].wait(), None
    except _Stopped as stopped:
        return 0, stopped.signum
    except KeyboardInterrupt:
        return 0, signal.SIGINT
    finally:
        try:
            if started:
                end_group(started[0])
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)  # type: ignore[arg-type]
