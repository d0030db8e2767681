"""Each rule of benchmarks/spot-policy.md, pinned on small hand-made traces."""

from __future__ import annotations

import math

import pytest

from respot.policy import Choice, Job, OnDemandPolicy, make_policy, on_demand_cost, simulate
from respot.policy.model import Trace

SP, OD, NO = Choice.SPOT, Choice.ON_DEMAND, Choice.NONE


def test_new_instance_pays_the_changeover_and_the_whole_tick(scripted, tick_price):
    # GIVEN spot always available, G = 10, d = 4, C = 30
    job = Job(work_seconds=30, deadline_seconds=100, changeover_seconds=4)
    # WHEN the job holds spot from the first tick
    out = simulate(scripted([SP] * 10), [1] * 11, job, 10)
    # THEN the first tick progresses G - d = 6, then 10 a tick: 6, 16, 26, 30 -> done at 40 s
    assert out.finish_seconds == 40
    assert out.spot_ticks == 4 and out.on_demand_ticks == 0 and out.changeovers == 1
    assert out.cost == pytest.approx(4 * tick_price(SP, 10))
    assert not out.missed


def test_changeover_longer_than_a_tick_spans_ticks(scripted):
    # GIVEN d = 25 > G = 10 and C = 15
    job = Job(work_seconds=15, deadline_seconds=100, changeover_seconds=25)
    # WHEN on-demand is held throughout
    policy = scripted([OD] * 10)
    out = simulate(policy, [0] * 11, job, 10)
    # THEN r goes 25 -> 15 -> 5 -> 0 with progress 0, 0, 5, then 10: done after 4 ticks
    assert [o.remaining_changeover_seconds for o in policy.seen] == [0, 15, 5, 0]
    assert [o.done_seconds for o in policy.seen] == [0, 0, 0, 5]
    assert out.finish_seconds == 40
    # AND that is ceil((C + d) / G) ticks, the on-demand-only formula
    assert out.on_demand_ticks == math.ceil((15 + 25) / 10)


def test_spot_when_unavailable_counts_as_none(scripted):
    # GIVEN spot unavailable in tick 0, a changeover pending from an on-demand tick before
    job = Job(work_seconds=100, deadline_seconds=100, changeover_seconds=25)
    policy = scripted([OD, SP, OD])
    # WHEN the policy asks for spot in a tick where it is unavailable
    out = simulate(policy, [0] * 11, job, 10)
    # THEN that tick is NONE: nothing billed, held NONE, the pending changeover dropped
    assert out.choices[:3] == (OD, NO, OD)
    assert out.on_demand_ticks == 2 and out.spot_ticks == 0
    assert policy.seen[2].held is NO
    assert policy.seen[2].remaining_changeover_seconds == 0
    assert out.changeovers == 2


def test_none_drops_everything_and_bills_nothing(scripted):
    # GIVEN d = 15 > G: an on-demand instance mid-changeover
    job = Job(work_seconds=100, deadline_seconds=200, changeover_seconds=15)
    policy = scripted([OD, NO, OD, OD])
    out = simulate(policy, [1] * 21, job, 10)
    # THEN holding nothing resets r; the next instance pays the whole d again
    assert [o.remaining_changeover_seconds for o in policy.seen[:4]] == [0, 5, 0, 5]
    assert [o.done_seconds for o in policy.seen[:4]] == [0, 0, 0, 0]
    assert out.on_demand_ticks == 3


def test_switching_between_instance_types_pays_the_changeover(scripted):
    # GIVEN spot always available, d = 4
    job = Job(work_seconds=100, deadline_seconds=200, changeover_seconds=4)
    policy = scripted([SP, OD, OD, SP])
    simulate(policy, [1] * 21, job, 10)
    # THEN each change of instance type costs d of progress
    assert [o.done_seconds for o in policy.seen[:4]] == [0, 6, 12, 22]
    assert [o.held for o in policy.seen[1:4]] == [SP, OD, OD]


def test_preemption_at_the_tick_boundary_keeps_work_and_resets_r(scripted):
    # GIVEN spot lost at tick 2, back at tick 3
    job = Job(work_seconds=50, deadline_seconds=100, changeover_seconds=4)
    policy = scripted([SP] * 10)
    out = simulate(policy, [1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1], job, 10)
    # THEN after tick 1 the instance is gone (held NONE), the work done (16) is kept,
    # tick 2 holds nothing and tick 3 pays the changeover again
    assert policy.seen[2].held is NO and policy.seen[2].done_seconds == 16
    assert out.choices[2] is NO
    assert policy.seen[4].done_seconds == 22
    assert out.changeovers == 2


def test_preemption_in_the_middle_of_a_changeover_resets_r(scripted):
    # GIVEN d = 15 > G = 10 and spot lost after tick 0
    job = Job(work_seconds=20, deadline_seconds=100, changeover_seconds=15)
    policy = scripted([SP] * 10)
    out = simulate(policy, [1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1], job, 10)
    # THEN tick 0 bought nothing, the instance is gone with r = 0, and the next one pays 15 again
    assert policy.seen[1].held is NO and policy.seen[1].remaining_changeover_seconds == 0
    assert policy.seen[3].remaining_changeover_seconds == 5
    assert out.finish_seconds == 60  # progress 0 | - | 0, 5, 10, 5 -> 20 at the end of tick 5


def test_job_finishes_at_the_end_of_the_tick_that_completes_the_work(scripted):
    # GIVEN G = 7 that does not divide C = 10, d = 0
    job = Job(work_seconds=10, deadline_seconds=70, changeover_seconds=0)
    policy = scripted([OD] * 10)
    out = simulate(policy, [0] * 11, job, 7)
    # THEN the job is done after 2 ticks, at 14 s, and nothing is billed afterwards
    assert out.finish_seconds == 14
    assert out.on_demand_ticks == 2
    assert len(policy.seen) == 2


def test_deadline_miss_when_work_remains_after_the_last_tick(scripted):
    # GIVEN D = 35 with G = 10: ticks 0, 1, 2 only (floor(D/G) - 1 = 2 is the last)
    job = Job(work_seconds=25, deadline_seconds=35, changeover_seconds=0)
    # WHEN the policy waits one tick, then runs on-demand
    policy = scripted([NO, OD, OD, OD])
    out = simulate(policy, [0] * 4, job, 10)
    # THEN only 20 s of work fit before the last tick ends: a miss, no finish time
    assert out.missed and out.finish_seconds is None
    assert [o.tick for o in policy.seen] == [0, 1, 2]


def test_on_demand_only_cost_formula_and_normalizer():
    for gap, work, changeover in [(600, 172800, 720), (195, 172800, 180), (32, 1000, 45)]:
        job = Job(work_seconds=work, deadline_seconds=work * 2, changeover_seconds=changeover)
        expected = math.ceil((work + changeover) / gap) * 3.06 * gap / 3600
        assert on_demand_cost(job, gap) == pytest.approx(expected)
        # AND on-demand only normalizes to exactly 1.0
        out = simulate(OnDemandPolicy(), [0] * (job.ticks(gap) + 1), job, gap)
        assert out.normalized_cost == 1.0


def test_window_starts_follow_the_formula():
    trace = Trace(name="t", gap_seconds=600, availability=(1,) * 100)
    # W = 21, N = 7: floor(k * (100 - 21) / 7)
    assert trace.window_starts(21, 7) == [0, 11, 22, 33, 45, 56, 67]
    assert trace.window(67, 21) == (1,) * 21 and len(trace.window(67, 21)) == 21


def test_policy_sees_only_the_past(scripted):
    job = Job(work_seconds=50, deadline_seconds=100, changeover_seconds=0)
    policy = scripted([NO] * 10)
    window = [1, 0, 0, 1, 1, 0, 1, 0, 1, 1, 0]
    simulate(policy, window, job, 10)
    for obs in policy.seen:
        assert list(obs.history) == window[: obs.tick]
        assert obs.spot_available == bool(window[obs.tick])


@pytest.mark.parametrize("name", ["on-demand", "greedy", "uniform-progress", "respot"])
def test_every_policy_finishes_in_time_on_a_hopeless_trace(name):
    # GIVEN no spot at all and a deadline just long enough for on-demand
    job = Job(work_seconds=3600, deadline_seconds=4200, changeover_seconds=300)
    out = simulate(make_policy(name), [0] * 8, job, 600)
    # THEN every policy ends up on on-demand in time, at the on-demand-only cost
    assert not out.missed
    assert out.normalized_cost == 1.0
