"""`python -m respot.agent` with RESPOT_SHUTDOWN=poweroff: after its last report the agent
waits to be terminated before it powers the instance off.

Why (docs/agent.md, step 7): the instance's shutting-down event reaches the control plane by
EventBridge, the last report by SQS. An instance that goes down before its report is handled
is judged lost and replaced: the chaos e2e test saw, under load, every job that completed get
a new spot instance launched (and an interruption counted) after its final step, because
the agent powered off right after sending AgentCompleted.
"""

from __future__ import annotations

from typing import Any

import pytest

from respot.agent import __main__ as agent_main
from respot.agent.runner import AgentResult

ENV = {
    "RESPOT_BUCKET": "b",
    "RESPOT_AGENT_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/agent",
    "RESPOT_SHUTDOWN": "poweroff",
}


def run_main(monkeypatch: pytest.MonkeyPatch, result: AgentResult | Exception) -> list[Any]:
    """Run `main()` with an agent that ends with `result`; what it did, in order."""
    done: list[Any] = []
    for name in list(ENV):
        monkeypatch.setenv(name, ENV[name])

    def run(self: Any) -> AgentResult:
        if isinstance(result, Exception):
            raise result
        return result

    monkeypatch.setattr(agent_main.Agent, "run", run)
    monkeypatch.setattr(agent_main.time, "sleep", lambda s: done.append(("sleep", s)))
    monkeypatch.setattr(
        agent_main.subprocess, "run", lambda argv, **_: done.append(("run", list(argv)))
    )
    agent_main.main()
    return done


@pytest.mark.parametrize("outcome", ["completed", "preempted", "failed"])
def test_after_its_last_report_the_agent_waits_to_be_terminated_before_powering_off(
    monkeypatch: pytest.MonkeyPatch, outcome: Any
) -> None:
    # GIVEN an attempt that ended with a last report (AgentCompleted/Preempted/Failed)
    result = AgentResult(outcome, "job-1", 2, step=400)
    # WHEN the agent's process ends on an instance whose agent powers off
    done = run_main(monkeypatch, result)
    # THEN it gives the control plane its time to terminate the instance, then powers off
    assert done == [
        ("sleep", agent_main.LINGER_SECONDS),
        ("run", agent_main.POWEROFF_ARGV),
    ]
    assert agent_main.LINGER_SECONDS >= 60  # minutes of SQS lag, not a token pause


def test_an_agent_that_sent_no_last_report_powers_off_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN an agent that could not run the attempt (no report: the instance going down is
    # how the control plane learns of it)
    done = run_main(monkeypatch, RuntimeError("no tags in IMDS"))
    # THEN nothing is waited for
    assert done == [("run", agent_main.POWEROFF_ARGV)]
