"""Boot to first training step in the local runtime, phase by phase, and the wheelhouse's effect.

Each repetition runs one job whose `requirements` name a fresh package (so its wheelhouse is
new: cold), interrupts it once it has a checkpoint, and lets the next attempt resume (the
wheelhouse cached in S3: warm). For each attempt, from the instance's own logs:

- user data: the boot script's start to "agent started" (fetch the agent package from S3,
  make the agent's venv, check that it imports, write and start the unit);
- agent start-up: the unit starting to the agent's first log line (interpreter, imports);
- code and data, environment (requirements: venv + pip from the wheelhouse), restore
  (the newest checkpoint from S3): the agent's own timings (its "phases:" log line);
- session start: the session process starting to its first report (imports, session set-up);
- total: the boot script's start to the first report.

Not included: EC2's simulated fulfilment and boot delays (constants of the emulator), and
anything of a real GPU instance (driver init, EBS warm-up, a real index's download times).
The "package index" is a local directory with one tiny wheel (no network), so the cold figure
is pip's own work (resolve, build the wheelhouse, install, zip and upload it), not downloads.

    python -m bench.boot --repeat 3
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import re
import secrets
import sys
import tempfile
import time
import zipfile
from datetime import datetime
from pathlib import Path
from typing import Any

from bench import _report
from infra.local.market import ChaosSchedule
from infra.local.runtime import LocalRuntime, RuntimeOptions
from infra.local.sandbox import AGENT_JOURNAL, BOOT_LOG
from respot.spec.training import TrainingEnvVar

SESSIONS = Path(__file__).resolve().parent / "sessions"
_ISO = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z")
_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def build_wheel(directory: Path, name: str, version: str) -> None:
    """A pure-Python wheel by hand: the benchmark's whole package index."""
    module = name.replace("-", "_")
    info = f"{module}-{version}.dist-info"
    files = {
        f"{module}/__init__.py": b"VALUE = 1\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }

    def digest(data: bytes) -> str:
        raw = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        return f"sha256={raw}"

    record = "".join(f"{p},{digest(d)},{len(d)}\n" for p, d in files.items()) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(directory / f"{module}-{version}-py3-none-any.whl", "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
        zf.writestr(f"{info}/RECORD", record)


def _iso(text: str, marker: str) -> float | None:
    for line in text.splitlines():
        if marker in line and (m := _ISO.search(line)):
            return datetime.fromisoformat(m.group(1)[:26]).timestamp()
    return None


def _log_time(line: str) -> float | None:
    m = _LOG_TIME.match(line)
    return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp() if m else None


def phases_of(boot_log: str, journal: str) -> dict[str, Any]:
    """One attempt's phases from its boot log and its agent's journal (local time stamps)."""
    start = _iso(boot_log, "respot bootstrap: start")  # UTC
    started = _iso(boot_log, "respot bootstrap: agent started")
    lines = journal.splitlines()
    first = next((t for ln in lines if (t := _log_time(ln)) is not None), None)
    agent_phases: dict[str, float] = {}
    wheelhouse = None
    session_at = step_at = None
    for line in lines:
        if "respot.agent: phases: " in line:
            text = line.split("phases: ", 1)[1]
            agent_phases = json.loads(text.split("; wheelhouse")[0])
            wheelhouse = text.rsplit("wheelhouse ", 1)[-1].strip()
        if session_at is None and " started (pid " in line:
            session_at = _log_time(line)
        if session_at is not None and step_at is None and "sent progress" in line:
            step_at = _log_time(line)
    row: dict[str, Any] = {
        "user_data": None if start is None or started is None else started - start,
        "agent_start": None,
        "code_and_data": agent_phases.get("code_and_data"),
        "environment": agent_phases.get("environment"),
        "restore": agent_phases.get("restore"),
        "session_start": None if session_at is None or step_at is None else step_at - session_at,
        "total": None,
        "wheelhouse": wheelhouse,
    }
    # The boot log's stamps are UTC; the journal's are local time: both from this machine.
    utc_shift = datetime.now().astimezone().utcoffset()
    shift = utc_shift.total_seconds() if utc_shift is not None else 0.0
    if started is not None and first is not None:
        row["agent_start"] = max(first - shift - started, 0.0)
    if start is not None and step_at is not None:
        row["total"] = step_at - shift - start
    return row


def run_once(rt: LocalRuntime, index: Path, n: int) -> list[dict[str, Any]]:
    """One job: cold attempt, interrupted after its first checkpoint, then the cached resume."""
    assert rt.fleet is not None
    package = f"respot-bootbench-{secrets.token_hex(3)}"
    build_wheel(index, package, "1.0")
    spec = TrainingEnvVar(
        name=f"boot-{n}",
        entry_point="bootbench:BootSession",
        source_dir=str(SESSIONS),
        requirements=[f"{package}==1.0"],
        hyperparameters={
            "package": package.replace("-", "_"),
            "steps": 300,
            "checkpoint_every": 20,
            "ballast_mb": 8,
        },
    )
    handle = rt.run(spec)
    end = time.monotonic() + 180
    while time.monotonic() < end:
        record = handle.record()
        if record is not None and record.checkpoint is not None:
            break
        time.sleep(0.2)
    (inst,) = [i for i in rt.fleet.live() if i.job_id == handle.job_id]
    rt.fleet.interrupt(inst.instance_id)
    status = handle.wait(timeout=240, poll_seconds=0.5)
    if status.state != "COMPLETED":
        raise RuntimeError(f"{handle.job_id} ended {status.state}")
    rows = []
    for attempt, i in enumerate(rt.fleet.of_job(handle.job_id), start=1):
        assert i.root is not None
        row = phases_of(i.root.log(BOOT_LOG), i.root.log(AGENT_JOURNAL))
        rows.append({"job": n, "attempt": attempt, **row})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    index = Path(tempfile.mkdtemp(prefix="respot-bench-index-"))
    options = RuntimeOptions(
        time_scale=1.0 / 30.0,
        chaos=ChaosSchedule(job_ids=set()),
        agent_env={"PIP_FIND_LINKS": str(index), "PIP_NO_INDEX": "1"},
    )
    rows: list[dict[str, Any]] = []
    with LocalRuntime(options) as rt:
        for n in range(args.repeat):
            rows += run_once(rt, index, n)
    keys = ("user_data", "agent_start", "code_and_data", "environment", "restore")
    keys += ("session_start", "total")
    payload: dict[str, Any] = {
        "repeat": args.repeat,
        "rows": rows,
        "cold": {k: _report.summary(r[k] for r in rows if r["attempt"] == 1) for k in keys},
        "resumed": {k: _report.summary(r[k] for r in rows if r["attempt"] > 1) for k in keys},
    }
    md = markdown(payload)
    if not args.no_write:
        command = "python -m bench.boot " + " ".join(argv or sys.argv[1:])
        _report.write("boot", payload, md, command=command)
    print(md)
    return 0


def markdown(p: dict[str, Any]) -> str:
    """The results as markdown."""
    names = {
        "user_data": "user data (boot script)",
        "agent_start": "agent start-up",
        "code_and_data": "code and data",
        "environment": "environment (requirements)",
        "restore": "restore",
        "session_start": "session start to first step",
        "total": "boot script start to first step",
    }
    rows = [
        [
            names[k],
            p["cold"][k]["median"],
            p["cold"][k]["max"],
            p["resumed"][k]["median"],
            p["resumed"][k]["max"],
        ]
        for k in names
    ]
    head = ["phase (s)", "first attempt: median", "max", "resumed attempt: median", "max"]
    return "\n".join(
        [
            f"{p['repeat']} jobs, each interrupted once after its first checkpoint (8 MiB). "
            "First attempt: cold wheelhouse (resolve, build, install, cache to S3); resumed "
            "attempt: wheelhouse from S3 (`pip install --no-index --find-links`) and a restore.",
            "",
            _report.table(head, rows),
        ]
    )


if __name__ == "__main__":
    raise SystemExit(main())
