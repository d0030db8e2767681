"""A workspace's notice and idle stop on the local runtime (issue 27, "Measured").

    .venv/bin/python -m bench.workspace.lifecycle [--files 200] [--interruptions 3]
        [--idle-runs 2] [--json] [--no-write]

Two workspaces, started as `respot notebook start NAME --local` starts them (`workspace.ops`):

- **notice -> workspace committed in S3.** The first is opened through the laptop's tunnel;
  before each interruption `--files` small files (1-20 KiB, `bench.workspace.data`) are saved
  through Jupyter's contents API (as JupyterLab saves), and its periodic sync is set an hour
  apart, so the notice's sync carries all of them. `LocalRuntime.interrupt_job` (what
  `respot local interrupt` calls) sends the notice; the figure runs from then (taken when it
  returns, as `bench.commands` does) to the agent's send time of its notice checkpoint
  (`notice_checkpoint_at`, sent once the manifest is written). Real seconds: the supervisor,
  the snapshot and the upload are not scaled; EC2's notice is 120 real seconds. Each saved
  file is then read back from the replacement through the same tunnel (nothing lost).
- **idle stop -> instance gone.** The second is never opened (no browser, no kernel), with
  `idle_minutes` 1 (the least) and Jupyter asked every second. The figure runs from the
  moment the supervisor's "idle for ..." line appears in the attempt's log (read every 50 ms)
  to the local fleet's instance entering shutting-down (instance usage is not billed from
  there: the EC2 User Guide's instance lifecycle table) and to it being
  terminated (the runtime's terminate delay, scaled, shown apart). In between: Jupyter
  stops, the final sync, the agent's endings (outputs, logs), the completed report, the
  control plane's terminate (or the instance powering itself off).

The local runtime's EC2 parts are simulated (time scale 1/30); S3 is moto on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlparse

import numpy as np

from bench import _report
from bench.workspace import data

SCALE = 1.0 / 30.0
NOTICE_SECONDS = 900.0  # simulated: 30 real seconds (a loaded machine stops JupyterLab slowly)
EC2_NOTICE_SECONDS = 120.0
UP_SECONDS = 600.0  # bound: an instance boots, the agent prepares, JupyterLab starts
IDLE_LINE = "respot workspace: idle for"


def wait_for(check: Callable[[], Any], seconds: float, what: str, every: float = 0.5) -> Any:
    """`check()`'s first truthy answer within `seconds`; RuntimeError naming `what` after."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        answer = check()
        if answer:
            return answer
        time.sleep(every)
    raise RuntimeError(f"{what}: not within {seconds:.0f} s")


def call(link: str, path: str, method: str = "GET", body: object = None) -> Any:
    """Jupyter's REST API through the tunnel, with the workspace's token."""
    parts = urlparse(link)
    token = parse_qs(parts.query)["token"][0]
    request = urllib.request.Request(
        f"{parts.scheme}://{parts.netloc}{path}",
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.loads(answer.read().decode() or "null")


def answers(link: str) -> bool:
    try:
        call(link, "/api/status")
    except (OSError, ValueError):
        return False
    return True


def saved_files(n: int, seed: int) -> dict[str, str]:
    """`n` small text files (1-20 KiB), as a researcher's notebooks and notes."""
    rng = np.random.default_rng(seed)
    out = {}
    for i in range(n):
        size = data.draw_size(rng, 1, 20)
        kind = data.KINDS[i % len(data.KINDS)]
        if not kind.text:
            kind = data.KINDS[1]
        out[f"bench/s{seed}/f{i:04d}.txt"] = data.content(rng, kind, size, f"f{i} s{seed}").decode()
    return out


def notice_to_committed(
    rt: Any, files: int, interruptions: int, say: Callable[[str], None], simulated_ec2_s: float
) -> list[dict[str, Any]]:
    """Interrupt an open workspace `interruptions` times; one row per notice."""
    from respot.workspace import ops

    deployment, session = rt.sdk_deployment(), rt.researcher_session()
    started = ops.start(
        deployment, session, "bench-notice", local=True, settings={"sync_seconds": 3600}
    )
    job_id = started.job_id
    wait_for(lambda: rt.job_record(job_id) is not None, 120, "the workspace's job record")
    tunnel, link = ops.open_local(deployment, session, "bench-notice", rt.work_root)
    rows = []
    with tunnel:
        wait_for(lambda: answers(link), UP_SECONDS, "JupyterLab through the tunnel")
        for k in range(1, interruptions + 1):
            written = saved_files(files, seed=k)
            for folder in ("bench", f"bench/s{k}"):
                call(link, f"/api/contents/{folder}", "PUT", {"type": "directory"})
            for path, text in written.items():
                call(link, f"/api/contents/{path}", "PUT",
                     {"type": "file", "format": "text", "content": text})  # fmt: skip
            hit = rt.interrupt_job(job_id, wait_seconds=UP_SECONDS)
            sent = datetime.now(UTC)

            def committed(attempt: int = k) -> datetime | None:
                record = rt.job_record(job_id)
                if record is None or len(record.attempts) < attempt:
                    return None
                at: datetime | None = record.attempts[attempt - 1].notice_checkpoint_at
                return at

            def replacement_serves(attempt: int = k) -> bool:
                record = rt.job_record(job_id)
                current = record.current if record else None
                return bool(current and current.number == attempt + 1 and answers(link))

            at = wait_for(committed, NOTICE_SECONDS * SCALE + 60, "the notice checkpoint")
            wait_for(replacement_serves, UP_SECONDS, "the replacement through the tunnel", 0.1)
            answering = (datetime.now(UTC) - sent).total_seconds()
            lost = [p for p, text in written.items() if _read(link, p) != text]
            seconds = (at - sent).total_seconds()
            rows.append(
                {
                    "attempt": hit.attempt,
                    "files_saved_before_notice": len(written),
                    "bytes_saved_before_notice": sum(len(t) for t in written.values()),
                    "notice_to_committed_s": round(seconds, 3),
                    "share_of_ec2_notice": round(seconds / EC2_NOTICE_SECONDS, 4),
                    "files_lost": len(lost),
                    # The laptop's page answers again (the tunnel reaches the replacement's
                    # JupyterLab): the runtime's simulated EC2 request and boot are a part
                    # of it, the rest is respot's (agent, restore, JupyterLab's start).
                    "notice_to_jupyter_answering_s": round(answering, 3),
                    "simulated_ec2_s": round(simulated_ec2_s, 3),
                    "respot_share_s": round(max(answering - simulated_ec2_s, 0.0), 3),
                }
            )
            say(
                f"notice {k}: committed after {seconds:.2f} s; JupyterLab answering again after "
                f"{answering:.2f} s ({simulated_ec2_s:.2f} s of it the simulated EC2 boot); "
                f"{len(lost)} of {files} lost"
            )
    ops.stop(deployment, session, "bench-notice")
    return rows


def _read(link: str, path: str) -> str | None:
    try:
        body = call(link, f"/api/contents/{path}")
    except (OSError, ValueError):
        return None
    return body.get("content") if isinstance(body, dict) else None


def idle_to_gone(rt: Any, run: int, say: Callable[[str], None]) -> dict[str, Any]:
    """Start an unopened workspace with idle_minutes 1; the idle stop's timings."""
    from respot.workspace import ops

    deployment, session = rt.sdk_deployment(), rt.researcher_session()
    name = f"bench-idle-{run}"
    job_id = ops.start(
        deployment, session, name, local=True, idle_minutes=1, settings={"poll_seconds": 1}
    ).job_id
    inst = wait_for(lambda: rt.fleet.of_job(job_id), UP_SECONDS, "the idle workspace's instance")[0]
    log = wait_for(
        lambda: next(iter(inst.work_dir.rglob("session.log")), None), UP_SECONDS, "its log"
    )

    def said_idle() -> bool:
        try:
            return IDLE_LINE in log.read_text(errors="replace")
        except OSError:
            return False

    wait_for(said_idle, UP_SECONDS + 120, "the idle stop", every=0.05)
    decided = time.monotonic()
    wait_for(lambda: inst.state == "terminated", 300, "the instance's end", every=0.05)
    gone = time.monotonic()
    record = wait_for(
        lambda: (r := rt.job_record(job_id)) is not None and r.state.is_terminal() and r,
        120,
        "the job's end",
    )
    shutting = (inst.ended_at - decided) if inst.ended_at else None
    say(
        f"idle {run}: shutting-down after {shutting:.2f} s, terminated after {gone - decided:.2f} s"
    )
    return {
        "job_state": record.state.value,
        "end_reason": inst.end_reason,
        "idle_to_shutting_down_s": None if shutting is None else round(shutting, 3),
        "idle_to_terminated_s": round(gone - decided, 3),
    }


def _modelled_ec2_s() -> float:
    """Spot request -> the replacement's libraries read, as infra/local/boot.py models EC2."""
    from infra.local.boot import Ec2BootModel

    model = Ec2BootModel()
    return model.fulfil_seconds + model.boot_seconds


def run(
    files: int, interruptions: int, idle_runs: int, say: Callable[[str], None]
) -> dict[str, Any]:
    """Both measurements on one local runtime."""
    from infra.local.fleet import FleetTiming
    from infra.local.market import ChaosSchedule
    from infra.local.runtime import LocalRuntime, RuntimeOptions
    from respot.workspace.tokens import ENV_DIR

    tokens = tempfile.mkdtemp(prefix="respot-bench-ws-tokens-")
    os.environ[ENV_DIR] = tokens  # the laptop's token copies: a throwaway folder
    timing = FleetTiming(notice_seconds=NOTICE_SECONDS)
    options = RuntimeOptions(time_scale=SCALE, timing=timing, chaos=ChaosSchedule(job_ids=set()))
    try:
        with LocalRuntime(options) as rt:
            ec2 = (timing.fulfil_seconds + timing.boot_seconds) * SCALE
            notices = (
                notice_to_committed(rt, files, interruptions, say, ec2) if interruptions else []
            )
            idles = [idle_to_gone(rt, n, say) for n in range(1, idle_runs + 1)]
    finally:
        shutil.rmtree(tokens, ignore_errors=True)
    return {
        "time_scale": SCALE,
        "notice_real_seconds": NOTICE_SECONDS * SCALE,
        "terminate_real_seconds": timing.terminate_seconds * SCALE,
        "notices": notices,
        "notice_to_committed_s": _report.summary(r["notice_to_committed_s"] for r in notices),
        "files_lost": sum(r["files_lost"] for r in notices),
        "notice_to_jupyter_answering_s": _report.summary(
            r["notice_to_jupyter_answering_s"] for r in notices
        ),
        "respot_share_s": _report.summary(r["respot_share_s"] for r in notices),
        # With EC2's boot as infra/local/boot.py models it from its documented or measured
        # phases (its cold torch read included, which a workspace pays only when a kernel
        # imports torch) in place of the runtime's simulated one.
        "with_modelled_ec2_boot_s": _report.summary(
            r["respot_share_s"] + _modelled_ec2_s() for r in notices
        ),
        "modelled_ec2_boot_s": round(_modelled_ec2_s(), 1),
        "idle_stops": idles,
        "idle_to_shutting_down_s": _report.summary(r["idle_to_shutting_down_s"] for r in idles),
        "idle_to_terminated_s": _report.summary(r["idle_to_terminated_s"] for r in idles),
    }


def markdown(payload: dict[str, Any]) -> str:
    c, j, r, m, s, t = (
        payload["notice_to_committed_s"],
        payload["notice_to_jupyter_answering_s"],
        payload["respot_share_s"],
        payload["with_modelled_ec2_boot_s"],
        payload["idle_to_shutting_down_s"],
        payload["idle_to_terminated_s"],
    )
    lines = [
        f"Local runtime at time scale {payload['time_scale']:.4f}; notice window "
        f"{payload['notice_real_seconds']:g} real s (EC2's: {EC2_NOTICE_SECONDS:g} s); "
        f"terminate delay {payload['terminate_real_seconds']:g} real s (simulated).",
        "",
        _report.table(
            ["measure", "n", "median s", "p95 s", "max s"],
            [
                ["notice -> workspace committed in S3", c["n"], c["median"], c["p95"], c["max"]],
                ["notice -> JupyterLab answering again", j["n"], j["median"], j["p95"], j["max"]],
                [
                    "  of which respot's (not the simulated EC2 boot)",
                    r["n"],
                    r["median"],
                    r["p95"],
                    r["max"],
                ],
                [
                    f"  with EC2's modelled boot ({payload['modelled_ec2_boot_s']:g} s)",
                    m["n"],
                    m["median"],
                    m["p95"],
                    m["max"],
                ],
                ["idle stop -> instance shutting-down", s["n"], s["median"], s["p95"], s["max"]],
                ["idle stop -> instance terminated", t["n"], t["median"], t["p95"], t["max"]],
            ],
        ),
        "",
        f"Files saved before a notice and lost: {payload['files_lost']}.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.workspace.lifecycle", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--files", type=int, default=200, help="files saved before each notice")
    parser.add_argument("--interruptions", type=int, default=3)
    parser.add_argument("--idle-runs", type=int, default=2)
    parser.add_argument("--name", default="workspace-lifecycle")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    if args.files < 1 or args.interruptions < 0 or args.idle_runs < 0:
        parser.error("--files at least 1; --interruptions and --idle-runs at least 0")
    payload = run(
        args.files,
        args.interruptions,
        args.idle_runs,
        lambda line: print(line, file=sys.stderr, flush=True),
    )
    md = markdown(payload)
    if not args.no_write:
        words = argv if argv is not None else sys.argv[1:]
        _report.write(
            args.name,
            payload,
            md,
            command=" ".join(["python -m bench.workspace.lifecycle", *words]),
        )
    print(json.dumps(payload, indent=1) if args.json else md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
