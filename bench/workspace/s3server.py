"""The local runtime's S3 (infra.local's moto server on 127.0.0.1) in a process of its own.

`bench.checkpoints` runs moto inside the benchmark's process, where moto's request handling
shares the interpreter lock with respot's client threads but not with the command-line tools
(processes of their own), which slows respot alone.
In a process of its own moto stands where S3 stands for every tool: elsewhere. Its CPU
seconds are read from /proc, so a figure can be split into what moto spent and the rest, and
it counts the requests it answers by S3 operation (from werkzeug's request log: the same for
every tool), so a figure can be explained by what each tool asked.

    python -m bench.workspace.s3server    # prints the endpoint; a line "counts" on stdin is
                                          # answered with a JSON line; serves until stdin closes
"""

from __future__ import annotations

import collections
import json
import logging
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

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

    def request_counts(self) -> dict[str, int]:
        """Requests answered so far, by operation ("HeadObject", "GetObject:404", ...)."""
        assert self._proc is not None and self._proc.stdin is not None
        assert self._proc.stdout is not None
        self._proc.stdin.write("counts\n")
        self._proc.stdin.flush()
        counts: dict[str, int] = json.loads(self._proc.stdout.readline())
        return counts

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


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def operation(method: str, target: str, code: str) -> str:
    """The S3 operation of a path-style request ("GET /bucket/key?x=1"), with ":<code>" added
    when it did not succeed."""
    parts = urlsplit(target)
    query = parse_qs(parts.query, keep_blank_values=True)
    has_key = "/" in parts.path.strip("/")
    if method == "HEAD":
        name = "HeadObject" if has_key else "HeadBucket"
    elif method == "GET":
        name = "GetObject" if has_key else "ListObjects"
    elif method == "PUT" and "partNumber" in query:
        name = "UploadPart"
    elif method == "PUT":
        name = "PutObject" if has_key else "CreateBucket"
    elif method == "POST":
        if "uploads" in query:
            name = "CreateMultipartUpload"
        elif "uploadId" in query:
            name = "CompleteMultipartUpload"
        else:
            name = "DeleteObjects" if "delete" in query else "POST"
    elif method == "DELETE":
        name = "AbortMultipartUpload" if "uploadId" in query else "DeleteObject"
    else:
        name = method
    return name if code.startswith("2") else f"{name}:{code}"


class _Counter(logging.Handler):
    """Counts werkzeug's request log lines by S3 operation."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()
        self.guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args
        if not isinstance(args, tuple) or len(args) < 2:
            return
        words = _ANSI.sub("", str(args[0])).split()
        if len(words) < 2:
            return
        with self.guard:
            self.counts[operation(words[0], words[1], str(args[1]))] += 1


def main() -> int:
    """Serve; answer "counts" lines; stop when stdin closes."""
    from infra.local import cloud

    server = cloud.MotoServer()  # sets werkzeug's logger to ERROR: counted from here on
    counter = _Counter()
    werkzeug = logging.getLogger("werkzeug")
    werkzeug.handlers = [counter]
    werkzeug.propagate = False
    werkzeug.setLevel(logging.INFO)
    print(server.start(), flush=True)
    try:
        for line in sys.stdin:
            if line.strip() == "counts":
                with counter.guard:
                    print(json.dumps(dict(counter.counts)), flush=True)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
