"""bench.queue's machinery on a tiny workload: the real planner never goes over the quota nor
has a launch refused, every job ends, `after:` is honoured, and plain FIFO is refused while
it waits (the figures themselves are bench.queue's, not a test's)."""

from __future__ import annotations

from bench.queue import load, simulate
from respot.queue import QueueLimits

LINES = [
    {"at": 0, "researcher": "heavy", "team": "a", "instance_type": "g5.xlarge", "hours": 1}
    for _ in range(8)
] + [
    {"at": 60, "researcher": "light", "team": "b", "instance_type": "g5.xlarge", "hours": 1},
    {
        "id": "then",
        "at": 61,
        "researcher": "light",
        "team": "b",
        "instance_type": "g5.2xlarge",
        "hours": 0.5,
        "after": ["j9"],
    },
]


def test_the_planner_keeps_the_quota_and_fifo_does_not_wait_politely() -> None:
    jobs = load(LINES)
    done, trace, refused, own = simulate(jobs, "respot", 16, 0, QueueLimits())
    # never more vCPUs in use than the quota; no launch refused; every job ran
    assert max(sum(p[4].values()) for p in trace.points) <= 16
    assert refused == own == 0
    assert all(j.ended is not None for j in done)
    by_id = {j.id: j for j in done}
    # the light user's first job went before the heavy user's queued ones (fair share)
    heavy_waiting = [j for j in done if j.researcher == "heavy" and j.started and j.started > 0]
    assert by_id["j9"].started is not None
    assert all(by_id["j9"].started <= j.started for j in heavy_waiting if j.started)
    # `after:` started the last job only once the one it names completed
    assert by_id["then"].started is not None and by_id["j9"].ended is not None
    assert by_id["then"].started >= by_id["j9"].ended
    fifo, _, fifo_refused, _ = simulate(jobs, "fifo", 16, 0, QueueLimits())
    assert fifo_refused > 0
    # (plain FIFO starts the light user's job only after all of the heavy user's)
    light = next(j for j in fifo if j.id == "j9")
    assert light.started is not None
    assert light.started > min(j.started for j in fifo if j.researcher == "heavy" and j.started)
