"""A workspace on the local runtime, through the laptop's tunnel (docs/notebooks.md): a file
written through Jupyter's contents API survives a spot interruption, and the replacement
serves it on the same local port (the tunnel follows the workspace by itself), with no kernel
of the old instance and the note that says why the page reloaded; left alone, it stops itself
(idle) and the job completes, saying why, with no instance left. Started again, it has its
files back, and `respot notebook stop` right after a file is saved keeps that file: the stop
is a cancel that checkpoints first (the supervisor syncs, then the job ends CANCELLED with that
snapshot as its checkpoint). (The token object's policies are evaluated in
tests/workspace/test_token_iam.py.)"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from infra.local.fleet import FleetTiming
from infra.local.market import ChaosSchedule
from infra.local.runtime import LocalRuntime, RuntimeOptions
from respot.core.job import AttemptEnd
from respot.core.states import JobState
from respot.storage.checkpoints import CheckpointStore
from respot.workspace import names, ops
from respot.workspace.tokens import ENV_DIR
from tests.e2e.helpers import job_story, wait_for, wait_no_live_instances

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

pytest.importorskip("jupyterlab")

# EC2's 120 s at 1/30 is 4 real seconds: a loaded machine may not stop JupyterLab's kernels and
# upload in that; the notice here lasts 30 real seconds (what is asserted needs no hurry).
SCALE = 1.0 / 30.0
NOTICE_SECONDS = 900.0
UP_SECONDS = 360.0  # bound: an instance boots, the agent prepares, JupyterLab starts


@pytest.fixture(scope="module")
def rt() -> Iterator[LocalRuntime]:
    options = RuntimeOptions(
        time_scale=SCALE,
        timing=FleetTiming(notice_seconds=NOTICE_SECONDS),
        chaos=ChaosSchedule(job_ids=set()),
    )
    with LocalRuntime(options) as r:
        yield r


def call(link: str, path: str, method: str = "GET", body: object = None) -> object:
    parts = urlparse(link)
    token = parse_qs(parts.query)["token"][0]
    request = urllib.request.Request(
        f"{parts.scheme}://{parts.netloc}{path}",
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read().decode() or "null")


def run_cell(link: str, kernel_id: str, code: str) -> str:
    """Execute `code` in the kernel through the tunnel, over Jupyter's kernel websocket (as
    JupyterLab does); its printed output. A cell that raises fails the test."""
    import asyncio
    import uuid

    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    parts = urlparse(link)
    token = parse_qs(parts.query)["token"][0]
    msg_id = uuid.uuid4().hex
    message = {
        "header": {"msg_id": msg_id, "username": "e2e", "session": uuid.uuid4().hex,
                   "msg_type": "execute_request", "version": "5.3"},
        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
        "content": {"code": code, "silent": False, "store_history": False,
                    "user_expressions": {}, "allow_stdin": False, "stop_on_error": True},
    }  # fmt: skip

    async def go() -> str:
        url = f"ws://{parts.netloc}/api/kernels/{kernel_id}/channels"
        ws = await websocket_connect(HTTPRequest(url, headers={"Authorization": f"token {token}"}))
        await ws.write_message(json.dumps(message))
        out: list[str] = []
        try:
            while True:  # until the kernel is idle after our request (bounded per message)
                raw = await asyncio.wait_for(ws.read_message(), UP_SECONDS)
                assert raw is not None, "the kernel's websocket closed"
                reply = json.loads(raw)
                if reply.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                kind, content = reply["msg_type"], reply["content"]
                if kind == "error":
                    raise AssertionError(f"the cell raised {content['ename']}: {content['evalue']}")
                if kind == "stream":
                    out.append(content["text"])
                if kind == "status" and content["execution_state"] == "idle":
                    return "".join(out)
        finally:
            ws.close()

    return asyncio.run(go())


def answers(link: str, path: str) -> bool:
    try:
        call(link, path)
    except (OSError, ValueError):  # 503 from the tunnel while it moves, or not up yet
        return False
    return True


def test_a_saved_file_survives_an_interruption_on_the_same_local_port(
    rt: LocalRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_DIR, str(tmp_path / "tokens"))
    deployment, session = rt.sdk_deployment(), rt.researcher_session()
    # GIVEN a workspace started as `respot notebook start e2e --local` does, opened
    # (idle after 1 minute without kernel activity or API use; Jupyter asked every 2 s)
    started = ops.start(deployment, session, "e2e", local=True,
                        idle_minutes=1, settings={"poll_seconds": 2})  # fmt: skip
    job_id = started.job_id
    wait_for(lambda: rt.job_record(job_id) is not None, 60, "the job's record")
    tunnel, link = ops.open_local(deployment, session, "e2e", rt.work_root)
    with tunnel:
        wait_for(lambda: answers(link, "/api/status"), UP_SECONDS, "JupyterLab via the tunnel")
        # a file saved through Jupyter's contents API, and a kernel (memory) on this instance
        call(link, "/api/contents/results.txt", "PUT",
             {"type": "file", "format": "text", "content": "accuracy 0.93"})  # fmt: skip
        # a notebook's session, as JupyterLab opens one: its kernel runs in the notebook's folder
        opened = call(link, "/api/sessions", "POST", {"path": "analysis.ipynb", "type": "notebook",
                      "name": "analysis.ipynb", "kernel": {"name": "python3"}})  # fmt: skip
        assert isinstance(opened, dict)
        kernel = opened["kernel"]
        # a cell that imports respot and writes a file: the kernel is a new process of the
        # instance's framework Python, which does not see respot (infra/local/sandbox.py)
        printed = run_cell(
            link,
            kernel["id"],
            "import pathlib, respot\n"
            "pathlib.Path('from_kernel.txt').write_text('written by ' + respot.__name__)\n"
            "print(respot.__file__)",
        )
        assert "/ipc/pylib/respot/" in printed  # respot alone, from the command's PYTHONPATH
        # WHEN the instance gets a spot interruption (`respot local interrupt`)
        status = call(link, "/api/status")
        assert isinstance(status, dict)
        first_server = status["started"]
        first = rt.interrupt_job(job_id, wait_seconds=120)

        def replacement_serves() -> bool:
            """Attempt 2 is current and its JupyterLab answers through the tunnel (the first
            one serves on through its save window, the tunnel with it: another start time)."""
            record = rt.job_record(job_id)
            current = record.current if record else None
            if not (current and current.number == 2 and answers(link, "/api/status")):
                return False
            try:
                now = call(link, "/api/status")
            except (OSError, ValueError):
                return False
            return isinstance(now, dict) and now["started"] != first_server

        wait_for(replacement_serves, UP_SECONDS + NOTICE_SECONDS * SCALE, "the replacement")
        # THEN the same local port reaches the replacement, which serves the saved file
        record = rt.job_record(job_id)
        assert record is not None and first.attempt == 1
        assert record.attempts[0].end is AttemptEnd.INTERRUPTED, job_story(rt, job_id)
        assert record.current is not None and record.current.instance_id != first.instance_id
        saved = call(link, "/api/contents/results.txt")
        assert isinstance(saved, dict) and saved["content"] == "accuracy 0.93"
        from_kernel = call(link, "/api/contents/from_kernel.txt")
        assert isinstance(from_kernel, dict) and from_kernel["content"] == "written by respot"
        # AND the kernels are fresh (memory is gone), and the page says why
        kernels = call(link, "/api/kernels")
        assert isinstance(kernels, list) and kernel["id"] not in [k["id"] for k in kernels]
        note = call(link, f"/api/contents/{names.NOTE_FILE}")
        assert isinstance(note, dict) and "Variables are gone; files are kept" in note["content"]
    # AND left alone, it stops by itself: completed (not failed), saying why; no instance left

    def over() -> bool:
        record = rt.job_record(job_id)
        return record is not None and record.state.is_terminal()

    wait_for(over, 60 * 1 + UP_SECONDS, "the idle stop")
    record = rt.job_record(job_id)
    assert record is not None and record.state is JobState.COMPLETED, job_story(rt, job_id)
    why = ops.idle_reason(deployment, session, job_id)
    assert why is not None and why.startswith("idle for"), why
    # AND the supervisor's idle report reached the record with the completion, and the job's
    # Slack thread says the idle stop, not just "completed"
    assert record.progress.metrics.get(names.IDLE_METRIC, 0) >= 1, record.progress.metrics
    wait_for(lambda: "minutes idle" in rt.slack_thread(job_id), 60, "Slack's idle-stop reply")
    thread = rt.slack_thread(job_id)
    assert "files are kept" in thread and "respot notebook start e2e" in thread, thread
    wait_no_live_instances(rt, job_id)

    # WHEN it is started again, and a file is saved just before `respot notebook stop` (the
    # periodic sync is every 60 s: only the stop's own sync can take it)
    again = ops.start(deployment, session, "e2e", local=True)
    assert again.restored_from == job_id
    wait_for(lambda: rt.job_record(again.job_id) is not None, 60, "the second job's record")
    tunnel, link = ops.open_local(deployment, session, "e2e", rt.work_root)
    with tunnel:
        wait_for(lambda: answers(link, "/api/status"), UP_SECONDS, "JupyterLab, started again")
        back = call(link, "/api/contents/results.txt")  # the files the idle stop synced
        assert isinstance(back, dict) and back["content"] == "accuracy 0.93"
        last = "saved just before the stop"
        call(link, "/api/contents/last.txt", "PUT",
             {"type": "file", "format": "text", "content": last})  # fmt: skip
        assert ops.stop(deployment, session, "e2e") == again.job_id
    # THEN the job ends CANCELLED by its owner's stop after checkpointing, not cut short
    status = ops.wait_stopped(deployment, session, again.job_id, UP_SECONDS, poll_seconds=0.5)
    record = rt.job_record(again.job_id)
    assert record is not None and status.state == "CANCELLED", job_story(rt, again.job_id)
    assert record.policy["stopping"]["cause"] == "owner", job_story(rt, again.job_id)
    assert record.reason is not None and "is kept in S3" in record.reason, record.reason
    assert record.attempts[-1].end is AttemptEnd.CANCELLED
    # AND the newest checkpoint, the one the record names, holds the file saved before the stop
    store = CheckpointStore(bucket=deployment.bucket, job_id=again.job_id, client=rt.client("s3"))
    kept = store.restore(tmp_path / "kept")
    assert kept is not None and record.checkpoint is not None
    assert kept.step == record.checkpoint.step
    assert (tmp_path / "kept" / "last.txt").read_text() == last
    wait_no_live_instances(rt, again.job_id)
