"""The local runtime's S3 (infra.local's moto server on 127.0.0.1) in a process of its own.

`bench.checkpoints` runs moto inside the benchmark's process, where moto's request handling
shares the interpreter lock with respot's client threads but not with the command-line tools
(processes of their own), which slows respot alone.
In a process of its own moto stands where S3 stands for every tool: elsewhere. Its CPU
seconds are read from /proc, so a figure can be split into what moto spent and the rest.

    python -m bench.workspace.s3server    # prints the endpoint, serves until stdin closes
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


class S3Server:
    """infra.local.cloud.MotoServer in a child process."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self) -> str:
        """Start it; returns its endpoint URL (http://127.0.0.1:PORT)."""
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "bench.workspace.s3server"],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().strip()
        if not line.startswith("http://127.0.0.1:"):
            self.stop()
            raise RuntimeError(f"the S3 server did not start (it said {line!r})")
        self.url = line
        return line

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def cpu_seconds(self) -> float:
        """User + system CPU seconds the server process has used so far (all its threads)."""
        return process_cpu_seconds(self.pid)

    def stop(self) -> None:
        """Stop it (stdin closed: it stops itself; killed if it does not within 30 s)."""
        if self._proc is None:
            return
        proc, self._proc = self._proc, None
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of a process from /proc/<pid>/stat, in seconds."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    # The command name (field 2) may hold spaces: split after its closing parenthesis.
    fields = stat[stat.rindex(")") + 2 :].split()
    ticks = int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5)
    return ticks / os.sysconf("SC_CLK_TCK")


def main() -> int:
    """Serve until stdin closes."""
    from infra.local import cloud

    server = cloud.MotoServer()
    print(server.start(), flush=True)
    try:
        sys.stdin.read()
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
