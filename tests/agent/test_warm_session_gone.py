"""A warm session process that ends after it said ready is never resumed (warmstart.py).

Before: its exit was consumed by the warm-up watcher (nothing is forwarded before the
resume), so the agent resumed a dead process and then waited for an exit that had already
happened, sending heartbeats all the while: the job stayed RUNNING at a frozen step. Now
`resume` says the process is gone and the agent starts the session cold.
"""

from __future__ import annotations

from typing import Any

from respot.agent.process import SessionExited
from respot.agent.protocol import ReadyLine
from respot.agent.warmstart import WarmSession


class FakeProcess:
    """Stands in for `SessionProcess`: records what the agent told it."""

    def __init__(self) -> None:
        self.resumed: list[int | None] = []
        self.terminated = False

    def start(self) -> None:
        pass

    def resume(self, step: int | None) -> None:
        self.resumed.append(step)

    def terminate(self, grace_seconds: float = 0.0) -> None:
        self.terminated = True


def _warm() -> tuple[WarmSession, FakeProcess, list[Any]]:
    process = FakeProcess()
    forwarded: list[Any] = []
    warm = WarmSession(lambda on_event: process, forward=forwarded.append)  # type: ignore[arg-type,return-value]
    return warm.start(), process, forwarded


def test_a_warm_session_that_ended_after_ready_is_not_resumed() -> None:
    # GIVEN a warm session that said ready
    warm, process, _ = _warm()
    warm.on_event(ReadyLine(seconds=0.2))
    assert warm.wait_ready(give_up=lambda: False)
    assert warm.gone is None
    # WHEN its process ends while the agent waits for the handoff and restores
    warm.on_event(SessionExited(exit_code=-9))
    # THEN the agent learns it is gone, with why, and resuming it returns nothing to wait on
    assert warm.gone is not None and "ended while warming up" in warm.gone, warm.gone
    assert warm.resume(40) is None
    assert process.resumed == []


def test_a_resumed_warm_session_forwards_its_exit_to_the_agent() -> None:
    # GIVEN a warm session that was ready and resumed
    warm, process, forwarded = _warm()
    warm.on_event(ReadyLine(seconds=0.2))
    assert warm.wait_ready(give_up=lambda: False)
    assert warm.resume(40) is process  # type: ignore[comparison-overlap]
    assert process.resumed == [40]
    # WHEN it ends, THEN the agent's loop hears of it (and `gone` no longer applies)
    warm.on_event(SessionExited(exit_code=0))
    assert forwarded == [SessionExited(exit_code=0)]
    assert warm.gone is None
