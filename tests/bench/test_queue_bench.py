"""bench.queue's machinery on a tiny workload: the real planner never goes over the quota nor
has a launch refused, every job ends, `after:` is honoured, and plain FIFO is refused while
it waits (the figures themselves are bench.queue's, not a test's)."""

from __future__ import annotations

from bench.queue import load, simulate
from respot.queue import QueueLimits
from respot.queue.preemption import CHANGEOVER_HOURS

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


def test_a_preempted_job_resumes_and_does_all_its_work_within_the_quota() -> None:
    jobs = load(LINES)
    done, trace, refused, _ = simulate(jobs, "respot", 16, 0, QueueLimits())
    assert max(sum(p[4].values()) for p in trace.points) <= 16 and refused == 0
    by_id = {j.id: j for j in done}
    # the light user's jobs came while the heavy user's four filled the quota: the heavy
    # user's were preempted (only theirs), each checkpointed and stopped, and resumed later
    # for the work it had left plus the changeover; every job ended
    preempted = [j for j in done if j.preemptions]
    assert preempted and {j.researcher for j in preempted} == {"heavy"}
    for victim in preempted:
        assert victim.ended is not None and victim.left is not None
        assert victim.run_from is not None
        assert victim.ended - victim.run_from == victim.left * 3600.0
        assert 0 < victim.left < victim.hours + CHANGEOVER_HOURS
    assert by_id["j9"].started is not None and by_id["j9"].started <= 180
    assert all(j.ended is not None for j in done)
    # with preemption off, nothing is preempted and the light job waits for an end
    off, _, _, _ = simulate(jobs, "respot", 16, 0, QueueLimits(preemption=False))
    assert not any(j.preemptions for j in off)
    assert next(j for j in off if j.id == "j9").started == 3600
