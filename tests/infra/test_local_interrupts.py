"""`respot local interrupt` (infra/local/interrupts.py): which instance gets the notice and
when, what is refused and why, and the request files another shell talks through."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from infra.local import interrupts
from infra.local.interrupts import Interrupted, InterruptError, JobInterrupts, RequestBox, ask
from respot.core.states import JobState


class FakeFleet:
    def __init__(self, market: str = "spot") -> None:
        self.market = market
        self.calls: list[tuple[str, str]] = []

    def live(self) -> list[Any]:
        return [
            SimpleNamespace(instance_id="i-old", noticed_at=1.0, market="spot", attempt=1),
            SimpleNamespace(instance_id="i-new", noticed_at=None, market=self.market, attempt=2),
        ]

    def rebalance(self, instance_id: str) -> bool:
        self.calls.append(("rebalance", instance_id))
        return True

    def interrupt(self, instance_id: str) -> bool:
        self.calls.append(("interrupt", instance_id))
        return True


def record(step: int | None, *, started: bool = True, state: JobState = JobState.RUNNING) -> Any:
    attempt = SimpleNamespace(started_at=1.0 if started else None, instance_id="i-new")
    return SimpleNamespace(
        job_id="j", state=state, attempts=[attempt], progress=SimpleNamespace(step=step)
    )


def test_the_notice_waits_for_the_step_then_goes_to_the_current_instance() -> None:
    # GIVEN a job that starts training, then reports steps 5, 40, 120
    seen = iter([None, record(None, started=False), record(5), record(40), record(120)])
    fleet = FakeFleet()
    job = JobInterrupts(fleet, lambda _: next(seen))  # type: ignore[arg-type]
    # WHEN it is asked to interrupt at step 100, with a rebalance first
    done = job.interrupt("j", at_step=100, rebalance=True, wait_seconds=30)
    # THEN the newest attempt's live instance got the rebalance, then the notice, at step 120
    assert fleet.calls == [("rebalance", "i-new"), ("interrupt", "i-new")]
    assert done == Interrupted("j", "i-new", 2, 120)


@pytest.mark.parametrize(
    ("fleet", "state", "says"),
    [
        (FakeFleet("on-demand"), JobState.RUNNING, "EC2 sends no interruption notice"),
        (FakeFleet(), JobState.COMPLETED, "is COMPLETED: nothing to interrupt"),
    ],
)
def test_what_cannot_be_interrupted_is_refused_and_nothing_sent(
    fleet: FakeFleet, state: JobState, says: str
) -> None:
    job = JobInterrupts(fleet, lambda _: record(10, state=state))  # type: ignore[arg-type]
    with pytest.raises(InterruptError, match=says):
        job.interrupt("j", wait_seconds=5)
    assert fleet.calls == []


def test_waits_are_bounded_and_say_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(interrupts, "POLL_SECONDS", 0.01)
    fleet = FakeFleet()
    never = JobInterrupts(fleet, lambda _: record(3))  # type: ignore[arg-type]
    with pytest.raises(InterruptError, match=r"did not reach step 50 .* nothing sent"):
        never.interrupt("j", at_step=50, wait_seconds=0.2)
    unknown = JobInterrupts(fleet, lambda _: None)  # type: ignore[arg-type]
    with pytest.raises(InterruptError, match="no job j in this local runtime"):
        unknown.interrupt("j", wait_seconds=0.2)
    assert fleet.calls == []


def test_another_shell_asks_through_request_files(tmp_path: Path) -> None:
    fleet = FakeFleet()
    box = RequestBox(
        tmp_path / "requests",
        JobInterrupts(fleet, lambda _: record(7)),  # type: ignore[arg-type]
    ).start()
    try:
        answer = ask(
            tmp_path / "requests", "j", at_step=5, rebalance=False, wait_seconds=10,
            alive=lambda: True,
        )  # fmt: skip
        refused = ask(
            tmp_path / "requests", "j", at_step=50, rebalance=False, wait_seconds=0.3,
            alive=lambda: True,
        )  # fmt: skip
    finally:
        box.stop()
    assert answer == {"ok": True, "job_id": "j", "instance_id": "i-new", "attempt": 2, "step": 7}
    assert refused["ok"] is False and "did not reach step 50" in refused["error"]
    assert list((tmp_path / "requests").iterdir()) == []  # nothing left behind
    gone = threading.Event()
    assert ask(
        tmp_path / "requests", "j", at_step=None, rebalance=False, wait_seconds=0.1,
        alive=gone.is_set,
    )["error"].startswith("the local runtime did not answer")  # fmt: skip


def test_respot_local_interrupt_asks_the_runtime_that_local_up_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from infra.local.interrupts import requests_dir
    from respot.cli import app
    from respot.client.localstate import LocalState, write_state

    # GIVEN the state file of a runtime up in this process, serving its request directory
    monkeypatch.setenv("RESPOT_LOCAL_STATE", str(tmp_path / "local.json"))
    write_state(
        LocalState(
            pid=os.getpid(),
            endpoint_url="http://127.0.0.1:9",
            deployment={},
            started_at="2026-11-26T00:00:00+00:00",
            time_scale=1 / 30,
            work_root=str(tmp_path),
        )
    )
    fleet = FakeFleet()
    box = RequestBox(
        requests_dir(tmp_path),
        JobInterrupts(fleet, lambda _: record(7)),  # type: ignore[arg-type]
    ).start()
    try:
        # WHEN another shell asks for job j's notice at step 5, then at step 50 (never reached)
        done = CliRunner().invoke(app, ["local", "interrupt", "j", "--at-step", "5"])
        never = CliRunner().invoke(
            app, ["local", "interrupt", "j", "--at-step", "50", "--wait", "0.3"]
        )
    finally:
        box.stop()
    # THEN the first is sent and said; the second fails saying why, and sent nothing
    assert done.exit_code == 0, done.output
    assert "interrupted i-new (attempt 2 of j) at step 7" in done.stdout
    assert never.exit_code == 1 and "did not reach step 50" in never.stderr
    assert fleet.calls == [("interrupt", "i-new")]
