"""The admission planner's invariants: never over a quota or a limit, never admitted twice,
order kept within a researcher, `after:` honoured, nothing waits forever."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from respot.queue import Lease, NamedQueue, Priority, QueueLimits, QuotaRoom, WaitingJob, plan
from respot.queue.admission import _rank

T0 = datetime(2026, 1, 5, tzinfo=UTC)
KEYS = ("spot/G and VT", "spot/P")
SIZES = ((4, 1), (8, 1), (16, 1), (48, 4))


@st.composite
def scenarios(draw):
    researchers = [f"r{i}" for i in range(draw(st.integers(1, 4)))]
    team = {r: draw(st.sampled_from(["a", "b"])) for r in researchers}
    limits = QueueLimits(
        researcher_gpus=draw(st.none() | st.integers(4, 12)),
        team_gpus=draw(st.none() | st.integers(4, 16)),
        queues={"serial": NamedQueue(max_running=1), "pair": NamedQueue(max_gpus=8)},
        team_weights={"a": draw(st.sampled_from([1.0, 2.0]))},
    )
    quotas = {
        k: QuotaRoom(
            limit=draw(st.sampled_from([48, 64, 96])), others=draw(st.sampled_from([0, 8]))
        )
        for k in KEYS
    }
    jobs = []
    for i in range(draw(st.integers(0, 25))):
        r = draw(st.sampled_from(researchers))
        vcpus, gpus = draw(st.sampled_from(SIZES))
        jobs.append(
            WaitingJob(
                job_id=f"j{i:02d}",
                researcher=r,
                team=team[r],
                submitted_at=T0 + timedelta(minutes=draw(st.integers(0, 600))),
                quota_key=draw(st.sampled_from(KEYS)),
                vcpus=vcpus,
                gpus=gpus,
                priority=draw(st.sampled_from(list(Priority))),
                queue=draw(st.sampled_from([None, None, "serial", "pair"])),
                after=tuple(
                    draw(st.lists(st.sampled_from(["d-ok", "d-run", "d-bad"]), max_size=1))
                ),
                hours=draw(st.none() | st.sampled_from([0.5, 1.0, 3.0])),
            )
        )
    now = T0 + timedelta(hours=draw(st.integers(10, 30)))
    return researchers, limits, quotas, jobs, now


STATES = {"d-ok": "COMPLETED", "d-run": "RUNNING", "d-bad": "FAILED"}


def _check_within(leases: list[Lease], limits: QueueLimits, quotas: dict[str, QuotaRoom]) -> None:
    by_r: dict[str, int] = defaultdict(int)
    by_t: dict[str, int] = defaultdict(int)
    by_q: dict[str, int] = defaultdict(int)
    runs_q: dict[str, int] = defaultdict(int)
    by_k: dict[str, int] = defaultdict(int)
    for lease in leases:
        by_r[lease.researcher] += lease.gpus
        by_t[lease.team] += lease.gpus
        by_k[lease.quota_key] += lease.vcpus
        if lease.queue:
            by_q[lease.queue] += lease.gpus
            runs_q[lease.queue] += 1
    for key, used in by_k.items():
        limit = quotas[key].limit
        assert limit is not None and used + quotas[key].others <= limit, (key, used)
    for r, g in by_r.items():
        assert limits.researcher_gpus is None or g <= limits.researcher_gpus, (r, g)
    for t, g in by_t.items():
        assert limits.team_gpus is None or g <= limits.team_gpus, (t, g)
    assert runs_q["serial"] <= 1
    assert by_q["pair"] <= 8


def _lease(j: WaitingJob, now: datetime) -> Lease:
    return Lease(j.job_id, j.researcher, j.team, j.quota_key, j.vcpus, j.gpus, now, j.queue)


@settings(max_examples=60, deadline=None)
@given(scenarios())
def test_passes_never_exceed_a_quota_or_limit_and_never_admit_twice(scenario) -> None:
    # GIVEN waiting jobs of several researchers, quotas partly used by other instances, limits
    _, limits, quotas, jobs, now = scenario
    leases: list[Lease] = []
    admitted: list[str] = []
    waiting = list(jobs)
    # WHEN passes run one after another as jobs are admitted (and a stale pass re-reads the
    # jobs it already admitted as waiting, as a duplicate event would)
    for step in range(4):
        stale = list(jobs) if step % 2 else waiting
        p = plan(stale, leases, quotas, limits, {}, STATES, now + timedelta(minutes=step))
        for j in p.admit:
            leases.append(_lease(j, now))
            admitted.append(j.job_id)
        gone = {j.job_id for j in p.admit} | {j.job_id for j, _ in p.fail}
        waiting = [j for j in waiting if j.job_id not in gone]
        # THEN no quota, researcher, team or queue limit is exceeded after any pass
        _check_within(leases, limits, quotas)
    # THEN no job is admitted twice; jobs whose `after` is unfinished or failed are never admitted
    assert len(admitted) == len(set(admitted))
    by_id = {j.job_id: j for j in jobs}
    for jid in admitted:
        assert all(STATES[a] == "COMPLETED" for a in by_id[jid].after)


@settings(max_examples=60, deadline=None)
@given(scenarios())
def test_a_researcher_s_jobs_are_admitted_in_priority_then_submission_order(scenario) -> None:
    # GIVEN one pass over waiting jobs with no named queue and no dependency
    _, limits, quotas, jobs, now = scenario
    jobs = [WaitingJob(**{**j.__dict__, "queue": None, "after": ()}) for j in jobs]
    p = plan(jobs, [], quotas, limits, {}, {}, now)
    admitted = {j.job_id for j in p.admit}
    # THEN for each researcher, a job admitted while an earlier one of theirs waits is only a
    # backfill: it has an estimate, uses the quota the first waiting one waits for, and that
    # one waits for room in that quota (never for a limit or a budget, which hold them all)
    for r in {j.researcher for j in jobs}:
        mine = sorted(
            (j for j in jobs if j.researcher == r),
            key=lambda j: (-_rank(j, now, limits), j.submitted_at, j.job_id),
        )
        first = next((j for j in mine if j.job_id not in admitted), None)
        if first is None:
            continue
        later = mine[mine.index(first) + 1 :]
        for j in later:
            if j.job_id in admitted:
                assert j.hours is not None and j.quota_key == first.quota_key, (r, j, first)
                assert p.waits[first.job_id].kind == "quota", (r, p.waits[first.job_id])
            else:
                assert p.waits[j.job_id].kind == "turn", (r, j.job_id, p.waits[j.job_id])


def test_a_later_job_backfills_only_room_its_earlier_job_cannot_use_before_it_could_start() -> None:
    # GIVEN a 64-vCPU quota with 44 vCPUs held by heavy's job that ends in 2 h, a light user's
    # 48-vCPU job that waits for them (the fairest pick: room is reserved for it from then,
    # leaving 16 vCPUs spare), and heavy's waiting jobs: a 48-vCPU one of 3 h (first), then
    # one-GPU jobs of 1 h and 4 h
    key = "spot/G and VT"
    room = {key: QuotaRoom(64)}
    leases = [Lease("run", "heavy", "a", key, 44, 4, T0, ends_at=T0 + timedelta(hours=2))]
    big = WaitingJob("big", "light", "b", T0, key, 48, 4, hours=1.0)
    h = [
        WaitingJob(f"h{i}", "heavy", "a", T0 + timedelta(minutes=i), key, vcpus, gpus, hours=hrs)
        for i, (vcpus, gpus, hrs) in enumerate([(48, 4, 3.0), (4, 1, 1.0), (4, 1, 4.0)])
    ]
    usage = {"heavy": __import__("respot.queue", fromlist=["Usage"]).Usage(200.0, T0)}
    # WHEN the free room is planned half an hour in
    p = plan([big, *h], leases, room, QueueLimits(), usage, {}, T0 + timedelta(minutes=30))
    # THEN heavy's 1-h job fills free room (it ends before the reservation begins, so neither
    # the light user's job nor heavy's first waits longer for it); the 4-h one, which would
    # fit the spare room but still run when heavy's first could start, waits behind that one;
    # every waiting job keeps its position
    assert [j.job_id for j in p.admit] == ["h1"]
    assert p.waits["big"].kind == "quota" and p.waits["h0"].kind == "quota"
    assert p.waits["h2"].kind == "turn" and "heavy's job h0" in p.waits["h2"].reason
    assert [p.waits[j].position for j in ("big", "h0", "h2")] == [1, 2, 3]


def test_after_fails_a_job_whose_dependency_failed_and_holds_one_that_runs() -> None:
    # GIVEN three jobs naming a failed, a running and an unknown job
    mk = lambda i, after: WaitingJob(  # noqa: E731
        f"j{i}", "ann", "a", T0, "spot/G and VT", 4, 1, after=(after,)
    )
    p = plan(
        [mk(1, "d-bad"), mk(2, "d-run"), mk(3, "nope")],
        [],
        {"spot/G and VT": QuotaRoom(64)},
        QueueLimits(),
        {},
        STATES,
        T0,
    )
    # THEN the first and third fail with the reason, the second waits naming its dependency
    failed = dict((j.job_id, why) for j, why in p.fail)
    assert "d-bad ended FAILED" in failed["j1"]
    assert "nope does not exist" in failed["j3"]
    assert p.admit == [] and p.waits["j2"].kind == "after" and "d-run" in p.waits["j2"].reason


def test_a_light_user_goes_before_a_heavy_user_s_fifty_queued_jobs() -> None:
    # GIVEN a heavy user holding the whole quota (16 one-GPU jobs) with 50 more waiting, and
    # one job of a light user submitted after all of them
    room = {"spot/G and VT": QuotaRoom(64)}
    leases = [
        Lease(f"h-run{i}", "heavy", "a", "spot/G and VT", 4, 1, T0) for i in range(15)
    ]  # one slot free
    heavy = [
        WaitingJob(f"h{i:02d}", "heavy", "a", T0 + timedelta(seconds=i), "spot/G and VT", 4, 1)
        for i in range(50)
    ]
    light = WaitingJob("l1", "light", "b", T0 + timedelta(minutes=5), "spot/G and VT", 4, 1)
    # WHEN the free slot is planned
    p = plan([*heavy, light], leases, room, QueueLimits(), {}, {}, T0 + timedelta(minutes=6))
    # THEN the light user's job takes it, and the heavy user's wait with their positions
    assert [j.job_id for j in p.admit] == ["l1"]
    assert p.waits["h00"].kind == "quota" and p.waits["h00"].position == 1


def test_a_serial_queue_runs_one_job_at_a_time_in_submission_order() -> None:
    # GIVEN three jobs of two researchers in a queue with max_running 1, one already running
    limits = QueueLimits(queues={"serial": NamedQueue(max_running=1)})
    jobs = [
        WaitingJob(
            f"s{i}", r, "a", T0 + timedelta(minutes=i), "spot/G and VT", 4, 1, queue="serial"
        )
        for i, r in enumerate(["bo", "ann", "bo"])
    ]
    room = {"spot/G and VT": QuotaRoom(64)}
    p = plan(jobs, [], room, limits, {}, {}, T0 + timedelta(hours=1))
    assert [j.job_id for j in p.admit] == ["s0"]
    running = [_lease(jobs[0], T0)]
    p = plan(jobs[1:], running, room, limits, {}, {}, T0 + timedelta(hours=1))
    # THEN the next one waits for the queue, not for its researcher's order
    assert p.admit == [] and p.waits["s1"].kind == "queue"
    p = plan(jobs[1:], [], room, limits, {}, {}, T0 + timedelta(hours=2))
    assert [j.job_id for j in p.admit] == ["s1"]


def test_a_job_that_waited_starve_hours_goes_first() -> None:
    # GIVEN a heavy user's job that waited past starve_hours and a fresh light user's job
    limits = QueueLimits(starve_hours=12)
    old = WaitingJob("old", "heavy", "a", T0, "spot/G and VT", 4, 1)
    new = WaitingJob("new", "light", "a", T0 + timedelta(hours=12), "spot/G and VT", 4, 1)
    usage = {"heavy": __import__("respot.queue", fromlist=["Usage"]).Usage(500.0, T0)}
    room = {"spot/G and VT": QuotaRoom(4)}
    p = plan([old, new], [], room, limits, usage, {}, T0 + timedelta(hours=12, minutes=1))
    # THEN the old job is admitted despite its owner's recent use
    assert [j.job_id for j in p.admit] == ["old"]


def test_a_researcher_or_team_at_its_budget_is_held_and_the_others_are_not() -> None:
    # GIVEN ann at her $100 budget, bo's team at its $50, and cy under both
    limits = QueueLimits(researcher_budgets={"ann": 100.0}, team_budgets={"nlp": 50.0})
    jobs = [
        WaitingJob("a1", "arn:aws:iam::1:user/ann", "vision", T0, "spot/G and VT", 4, 1),
        WaitingJob("b1", "bo", "nlp", T0, "spot/G and VT", 4, 1),
        WaitingJob("c1", "cy", "vision", T0, "spot/G and VT", 4, 1),
    ]
    spent = {
        "researcher:arn:aws:iam::1:user/ann": 100.0,
        "team:nlp": 50.01,
        "team:vision": 100.0,
    }
    p = plan(jobs, [], {"spot/G and VT": QuotaRoom(64)}, limits, {}, {}, T0, spent)
    # THEN only cy's job is admitted; the others wait, naming whose budget and how much
    assert [j.job_id for j in p.admit] == ["c1"]
    assert p.waits["a1"].kind == "budget" and "$100.00 of $100.00" in p.waits["a1"].reason
    assert p.waits["b1"].kind == "budget" and "team nlp" in p.waits["b1"].reason


def test_a_budget_below_zero_is_refused_naming_the_field() -> None:
    import pytest

    from respot.queue.settings import QueueSettingsError, parse_settings

    with pytest.raises(QueueSettingsError, match=r"team_budgets\.nlp: -5 .*below zero"):
        parse_settings({"team_budgets": {"nlp": -5}})
    assert parse_settings({"researcher_budget": 0})[1].researcher_budget == 0.0
