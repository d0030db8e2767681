"""Fair-share preemption in the planner (issue 26): whom it preempts and when it does not.

A quota of 16 vCPUs (four g5.xlarge); bo runs four one-GPU jobs with hours left; ann and cy
share nothing yet. Each rule of `respot.queue.preemption` is checked by a case that the rule
alone decides, and a property: the leases kept plus the jobs admitted never exceed the quota
in any plan, preemption or not."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from respot.queue import (
    Lease,
    Plan,
    Preemptions,
    QueueLimits,
    QuotaRoom,
    Usage,
    WaitingJob,
    Waits,
    plan,
)

T0 = datetime(2026, 1, 5, 12, tzinfo=UTC)
KEY = "spot/G and VT"
ROOM = {KEY: QuotaRoom(limit=16)}
ON = QueueLimits()
_NONE = Waits("none", "")


def _lease(job_id: str, who: str, minutes_ago: int, hours: float = 3.0, size: int = 1) -> Lease:
    admitted = T0 - timedelta(minutes=minutes_ago)
    return Lease(
        job_id=job_id,
        researcher=who,
        team="t",
        quota_key=KEY,
        vcpus=4 * size,
        gpus=size,
        admitted_at=admitted,
        ends_at=admitted + timedelta(hours=hours),
    )


def _job(job_id: str, who: str, size: int = 1, hours: float = 1.0) -> WaitingJob:
    return WaitingJob(
        job_id=job_id,
        researcher=who,
        team="t",
        submitted_at=T0 - timedelta(minutes=1),
        quota_key=KEY,
        vcpus=4 * size,
        gpus=size,
        hours=hours,
    )


def _bo(n: int = 4) -> list[Lease]:
    return [_lease(f"bo{i}", "bo", minutes_ago=10 * (n - i)) for i in range(n)]  # bo3 newest


def _plan(waiting, leases, known=None, limits=ON):
    return plan(waiting, leases, ROOM, limits, {}, {}, T0, None, known or Preemptions())


def test_the_newest_job_of_the_researcher_most_over_share_is_preempted() -> None:
    p = _plan([_job("a1", "ann")], _bo())
    assert [job for job, _ in p.preempt] == ["bo3"]
    assert "preempted for fair share" in p.preempt[0][1]
    assert p.admit == [] and "room is being freed" in p.waits["a1"].reason


def test_nothing_is_preempted_without_preemptions_known_or_with_the_setting_off() -> None:
    assert plan([_job("a1", "ann")], _bo(), ROOM, ON, {}, {}, T0).preempt == []
    off = QueueLimits(preemption=False)
    assert _plan([_job("a1", "ann")], _bo(), limits=off).preempt == []


def test_a_victim_never_ends_below_the_preemptor_s_final_share() -> None:
    # ann and bo hold two GPUs each: ann's third would put her above bo once he lost one
    leases = [*_bo(2), _lease("an0", "ann", 5), _lease("an1", "ann", 4)]
    assert _plan([_job("a2", "ann")], leases).preempt == []
    # cy, with nothing, may take one of bo's or ann's (equal: the newest, ann's an1)
    p = _plan([_job("c0", "cy")], leases)
    assert [job for job, _ in p.preempt] == ["an1"]


def test_a_researcher_s_own_jobs_are_never_preempted_for_her() -> None:
    leases = [_lease(f"an{i}", "ann", 10 - i) for i in range(4)]
    assert _plan([_job("a9", "ann")], leases).preempt == []


def test_a_victim_is_never_larger_than_the_job_it_makes_room_for() -> None:
    # bo's newest is a 3-GPU job: for ann's 1-GPU job his older 1-GPU job goes instead
    leases = [_lease("bo1", "bo", 30), _lease("big", "bo", 10, size=3)]
    assert [j for j, _ in _plan([_job("a1", "ann")], leases).preempt] == ["bo1"]


def test_a_job_preempted_within_its_own_length_is_not_preempted_again() -> None:
    leases = [_lease("bo0", "bo", 10), _lease("bo1", "bo", 5), _lease("cy0", "cy", 50)]
    leases += [_lease("cy1", "cy", 40)]
    # bo1 was preempted 20 minutes ago (its length: 3 h): bo0 goes instead
    known = Preemptions(last={"bo1": T0 - timedelta(minutes=20)})
    assert [j for j, _ in _plan([_job("a1", "ann")], leases, known).preempt] == ["bo0"]
    # both of bo's protected: cy's newest
    known = Preemptions(last={"bo1": T0 - timedelta(minutes=20), "bo0": T0})
    assert [j for j, _ in _plan([_job("a1", "ann")], leases, known).preempt] == ["cy1"]
    # once its length has passed it may be preempted again
    known = Preemptions(last={"bo1": T0 - timedelta(hours=3, minutes=1)})
    assert [j for j, _ in _plan([_job("a1", "ann")], leases, known).preempt] == ["bo1"]


def test_no_preemption_when_the_drain_is_shorter_than_the_changeover() -> None:
    # one of bo's jobs ends in 3 minutes: 3 min x 1 GPU < 6 min x 1 GPU of changeover
    leases = [*_bo(3), _lease("bo9", "bo", minutes_ago=57, hours=1.0)]
    assert _plan([_job("a1", "ann")], leases).preempt == []
    # in 10 minutes: worth it
    leases = [*_bo(3), _lease("bo9", "bo", minutes_ago=50, hours=1.0)]
    assert len(_plan([_job("a1", "ann")], leases).preempt) == 1


def test_jobs_already_stopping_are_counted_and_nothing_more_is_preempted() -> None:
    known = Preemptions(stopping=frozenset({"bo3"}), last={"bo3": T0})
    p = _plan([_job("a1", "ann")], _bo(), known)
    assert p.preempt == [] and p.admit == []  # bo3's room is ann's once it has stopped
    # and a job behind ann neither takes that room meanwhile nor preempts (one preemptor
    # per quota and pass: the fairest pick)
    p = _plan([_job("a1", "ann"), _job("c1", "cy")], _bo(), known)
    assert p.admit == [] and p.preempt == []


def test_only_jobs_that_may_be_stopped_now_are_chosen() -> None:
    known = Preemptions(running=frozenset({"bo0", "bo1"}))
    assert [j for j, _ in _plan([_job("a1", "ann")], _bo(), known).preempt] == ["bo1"]
    assert _plan([_job("a1", "ann")], _bo(), Preemptions(running=frozenset())).preempt == []


def test_no_preemption_unless_it_makes_the_job_fit() -> None:
    # ann's 4-GPU job: bo may give up only 2 of his 4 before he is below her final share
    leases = [*_bo(2), _lease("cy0", "cy", 30), _lease("cy1", "cy", 20)]
    assert _plan([_job("a4", "ann", size=4)], leases).preempt == []


def test_then_jobs_of_researchers_above_the_preemptor_s_final_share_before_the_pass() -> None:
    # ann's 2-GPU job (a share is 16/3 vCPUs: it is above hers alone). bo runs 3 GPUs, cy 1.
    # The final-share rule allows one of bo's (he keeps 2 = ann's 2) and no more; Kueue's
    # second strategy then allows another of bo's (3 before the pass > ann's 2 after), never
    # cy's (1 before the pass).
    leases = [*_bo(3), _lease("cy0", "cy", 30)]
    p = _plan([_job("a2", "ann", size=2)], leases)
    assert [j for j, _ in p.preempt] == ["bo2", "bo1"]
    assert p.admit == [] and "room is being freed" in p.waits["a2"].reason
    # strictly above: with bo at 2 before the pass (= ann's 2 after) nothing is preempted
    leases = [*_bo(2), _lease("cy0", "cy", 30), _lease("cy1", "cy", 20)]
    assert _plan([_job("a2", "ann", size=2)], leases).preempt == []


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["bo", "ann", "cy"]), st.sampled_from([1, 2])), max_size=6),
    st.lists(
        st.tuples(st.sampled_from(["bo", "ann", "cy"]), st.sampled_from([1, 2, 3])), max_size=6
    ),
    st.lists(st.integers(0, 5), max_size=3),
)
def test_preemption_never_exceeds_the_quota_and_only_stops_leases_of_others(
    running: list[tuple[str, int]], waiting: list[tuple[str, int]], stopping: list[int]
) -> None:
    leases, used = [], 0
    for i, (who, size) in enumerate(running):
        if used + 4 * size <= 16:
            leases.append(_lease(f"l{i}", who, 5 + i, size=size))
            used += 4 * size
    jobs = [_job(f"w{i}", who, size=size) for i, (who, size) in enumerate(waiting)]
    known = Preemptions(stopping=frozenset(f"l{i}" for i in stopping if i < len(leases)))
    p = _plan(jobs, leases, known)
    assert used + sum(j.vcpus for j in p.admit) <= 16  # stopping leases still hold their room
    ids = {le.job_id: le for le in leases}
    for job_id, _ in p.preempt:
        assert job_id in ids and job_id not in known.stopping
    assert len({j for j, _ in p.preempt}) == len(p.preempt)
    freed = [w for w in jobs if "room is being freed" in p.waits.get(w.job_id, _NONE).reason]
    assert len(freed) == (1 if p.preempt else 0)  # one preemptor per quota and pass
    for job_id, _ in p.preempt:
        assert ids[job_id].researcher != freed[0].researcher
        assert ids[job_id].vcpus <= freed[0].vcpus


# The third strategy: recent use, and only against room that would otherwise sit idle.
# ann's 2-GPU job waits with 4 of 16 vCPUs free; bo holds 1 GPU (at or below anyone's
# share by GPUs held, so Kueue's two strategies allow nothing) but has used 40 GPU-hours
# lately; cy holds 2 and has used little.
def _behind(bo_used: float, ann_used: float, bo_lease: Lease | None = None) -> Plan:
    leases = [bo_lease or _lease("bo0", "bo", 30), *_cy()]
    usage = {"bo": Usage(bo_used, T0), "ann": Usage(ann_used, T0)}
    return plan([_job("a2", "ann", size=2)], leases, ROOM, ON, usage, {}, T0, None, Preemptions())


def test_a_researcher_with_more_recent_use_is_preempted_so_that_free_room_does_not_idle() -> None:
    p = _behind(bo_used=40.0, ann_used=5.0)
    assert [j for j, _ in p.preempt] == ["bo0"]  # never cy's: less recent use than ann
    assert "more GPU-hours recently" in p.preempt[0][1] and "idle" in p.preempt[0][1]
    assert p.admit == [] and "room is being freed" in p.waits["a2"].reason


def test_a_researcher_with_less_recent_use_than_the_job_s_is_not() -> None:
    assert _behind(bo_used=0.0, ann_used=40.0).preempt == []


def test_the_third_strategy_needs_idle_room_worth_more_than_the_changeover() -> None:
    # bo's job ends in 5 minutes: 4 idle vCPUs x 5 min < his 4 vCPUs x 6 min of changeover
    # (the GPU rule alone would allow it: 5 min x 2 GPUs > 6 min x 1 GPU)
    ending = _lease("bo0", "bo", minutes_ago=175)
    assert _behind(bo_used=40.0, ann_used=5.0, bo_lease=ending).preempt == []
    # nothing idle (bo's second job fills the room): nothing to keep busy, no preemption
    full = [_lease("bo0", "bo", 30), _lease("bo1", "bo", 25), *_cy()]
    usage = {"bo": Usage(40.0, T0), "ann": Usage(5.0, T0)}
    p = plan([_job("a2", "ann", size=2)], full, ROOM, ON, usage, {}, T0, None, Preemptions())
    assert p.preempt == []


def _cy() -> list[Lease]:
    return [_lease("cy0", "cy", 30), _lease("cy1", "cy", 20)]
