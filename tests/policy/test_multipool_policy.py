"""respot's multi-pool policy: one pool is today's policy, no deadline is missed, it is online."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from respot.policy import (
    Choice,
    Job,
    Mode,
    MultiPoolPolicy,
    Placement,
    Pool,
    PoolsObservation,
    RespotPolicy,
    RunLengths,
    simulate,
    simulate_pools,
)
from respot.policy.history import RunStatistics
from respot.policy.multipool import PoolsDecision
from respot.policy.placement_bench import make_pools_policy
from respot.policy.pool_baselines import single_view
from respot.policy.pools import NOTHING, ON_DEMAND
from respot.policy.respot_policy import SPOT_PRICE_PER_SECOND, Decision

ZONES = ["us-east-1a", "us-east-1b", "us-west-2a", "us-west-2b"]


@st.composite
def feasible_jobs(draw):
    """A job that on-demand alone finishes in time (G need not divide C, D or d; d > G too)."""
    gap = draw(st.integers(1, 900))
    changeover = draw(st.integers(0, 3 * gap))
    ticks = draw(st.integers(1, 70))
    deadline = ticks * gap + draw(st.integers(0, gap - 1))
    most_work = ticks * gap - changeover
    if most_work < 1:
        changeover = draw(st.integers(0, ticks * gap - 1))
        most_work = ticks * gap - changeover
    return Job(draw(st.integers(1, most_work)), deadline, changeover), gap


@st.composite
def runs_window(draw, length):
    """Availability drawn as runs, so that long and short runs both occur."""
    runs = draw(st.lists(st.tuples(st.booleans(), st.integers(1, 12)), min_size=1, max_size=25))
    window = [int(up) for up, n in runs for _ in range(n)]
    return (window * (length // len(window) + 2))[:length]


@st.composite
def pool_cases(draw, max_pools=4):
    job, gap = draw(feasible_jobs())
    n = draw(st.integers(1, max_pools))
    zones = draw(st.permutations(ZONES))[:n]
    pools = [Pool.named(f"{zone}_gpu_1") for zone in zones]
    window = [draw(runs_window(job.ticks(gap) + 1)) for _ in pools]
    return job, gap, pools, window


@settings(max_examples=300, deadline=None)
@given(feasible_jobs(), st.data())
def test_with_one_pool_it_decides_exactly_as_the_single_zone_policy(case, data):
    job, gap = case
    window = data.draw(runs_window(job.ticks(gap) + 1))
    single = simulate(RespotPolicy(), window, job, gap)
    pool = Pool.named("us-west-2a_v100_1")
    pooled = simulate_pools(MultiPoolPolicy(), [pool], [window], job, gap)
    as_choices = tuple(p.choice for p in pooled.placements)
    assert as_choices == single.choices
    assert pooled.cost == single.cost and pooled.missed == single.missed is False


@settings(max_examples=300, deadline=None)
@given(pool_cases())
def test_no_policy_misses_a_feasible_deadline_across_pools(case):
    job, gap, pools, window = case
    assert job.feasible(gap)
    for name in ["respot", "up-round-robin", "up-home", "greedy-any"]:
        out = simulate_pools(make_pools_policy(name), pools, window, job, gap)
        assert not out.missed, name


@settings(max_examples=100, deadline=None)
@given(pool_cases())
def test_decisions_depend_on_the_observation_alone(case):
    # GIVEN one object reused over a window (incremental caches), and a fresh object per
    # tick fed plain tuples (what a Lambda would do)
    job, gap, pools, window = case
    cached = MultiPoolPolicy()
    recorded: list[Placement] = []
    fresh: list[Placement] = []

    class Recording:
        name = "recording"

        def place(self, obs: PoolsObservation) -> Placement:
            recorded.append(cached.place(obs))
            return recorded[-1]

    class FreshEachTick:
        name = "fresh"

        def place(self, obs: PoolsObservation) -> Placement:
            plain = replace(obs, histories=tuple(tuple(h) for h in obs.histories))
            fresh.append(MultiPoolPolicy().place(plain))
            return fresh[-1]

    simulate_pools(Recording(), pools, window, job, gap)
    simulate_pools(FreshEachTick(), pools, window, job, gap)
    # THEN both make exactly the same decisions
    assert recorded == fresh


@settings(max_examples=100, deadline=None)
@given(pool_cases(), st.data())
def test_the_future_does_not_change_past_decisions(case, data):
    job, gap, pools, window = case
    cut = data.draw(st.integers(1, len(window[0]) - 1))
    other = [row[:cut] + [1 - a for a in row[cut:]] for row in window]
    first = simulate_pools(MultiPoolPolicy(), pools, window, job, gap).placements
    second = simulate_pools(MultiPoolPolicy(), pools, other, job, gap).placements
    # decisions of ticks < cut - 1 saw only a[..cut-1] (a[cut] decides a preemption at cut - 1)
    assert first[: cut - 1] == second[: cut - 1]


def observation(held, available, histories, *, home="us-east-1", zones=None, done=0):
    zones = zones or ["us-east-1a", "us-east-1b"]
    tick = len(histories[0])
    return PoolsObservation(
        tick=tick,
        gap_seconds=600,
        work_seconds=48 * 3600,
        deadline_seconds=70 * 3600,
        changeover_seconds=180,
        done_seconds=done,
        remaining_changeover_seconds=0,
        held=held,
        home=home,
        pools=tuple(Pool.named(z) for z in zones),
        available=tuple(available),
        histories=tuple(tuple(h) for h in histories),
    )


def test_it_keeps_a_live_spot_and_picks_the_pool_whose_runs_last():
    # pool 0 flickers (runs of one tick), pool 1 has long runs; both are up now
    flicker = [1, 0] * 30
    steady = ([1] * 20 + [0]) * 2 + [1] * 18
    obs = observation(NOTHING, [True, True], [flicker, steady], done=60 * 500)
    assert MultiPoolPolicy().place(obs) == Placement.spot(1)
    # held on pool 0 and still up: it stays (a move would pay a changeover now)
    held = replace(obs, held=Placement.spot(0))
    assert MultiPoolPolicy().place(held) == Placement.spot(0)


def test_a_transfer_fee_keeps_it_at_home_when_lives_are_alike():
    same = ([1] * 10 + [0]) * 5 + [1] * 5
    zones = ["us-west-2a", "us-east-1a"]
    obs = observation(NOTHING, [True, True], [same, same], zones=zones, done=55 * 500)
    # home is us-east-1: pool 1 is at home, pool 0 would move the checkpoint
    assert MultiPoolPolicy().place(obs) == Placement.spot(1)
    assert MultiPoolPolicy().place(replace(obs, home="us-west-2")) == Placement.spot(0)


def test_with_hours_of_slack_it_waits_for_the_checkpoints_region_rather_than_pay_the_fee():
    # GIVEN the checkpoint's region (us-east-1) has a pool whose outages last one tick and
    # which went down this tick, and another region's pool is up
    home = ([1] * 29 + [0]) * 6 + [1] * 19
    away = [1] * 199
    zones = ["us-east-1a", "us-west-2a"]
    obs = observation(NOTHING, [False, True], [home, away], zones=zones, done=199 * 600 - 6000)
    assert obs.slack_seconds > 20 * 3600
    # THEN it waits a tick: the home pool is likely back, and a tick of slack is worth little
    assert MultiPoolPolicy().decide(obs) == PoolsDecision(NOTHING, Mode.WAIT)
    # without a fee to save it takes the other pool at once, when the job's last 100 minutes
    # of work are left (with 16 h of work left and a tick of slack worth nothing, the young-
    # run lookahead may still wait for the 33-hour run to go on: E[min(progress, W)] grows
    # with its age while progress < W is possible)
    last = replace(obs, home="us-west-2", done_seconds=obs.work_seconds - 6000)
    assert MultiPoolPolicy().place(last) == Placement.spot(1)
    # live, with the other pool not asked yet this tick (assumed up), it waits just the same:
    # the region rule reads the home pool's outage, which was seen
    assert MultiPoolPolicy().decide(replace(obs, observed=(True, False))).mode is Mode.WAIT
    # and with little slack left (a tick of waiting is still safe) it pays the fee
    tight = replace(obs, work_seconds=obs.work_seconds + 20 * 3600)
    assert 600 + 180 < tight.slack_seconds < 3600
    assert MultiPoolPolicy().place(tight) == Placement.spot(1)


def test_a_pool_with_no_run_of_its_own_yet_is_judged_with_the_other_pools_runs():
    # GIVEN pool 0 has been down all window and came up a tick ago (no completed run of its
    # own: its run's life is the Lindy prior's alone, a long tail); pool 1's runs last ten
    # ticks and its run came back a tick ago too; pool 2 (down now) has runs of two ticks
    def runs(up, down, length):
        return (([1] * up + [0] * down) * length)[:length]

    fresh = [0] * 59 + [1]
    tens = [*runs(10, 1, 58), 0, 1]
    twos = [*runs(2, 2, 59), 0]
    zones = ["us-east-1a", "us-east-1b", "us-east-1c"]
    obs = observation(NOTHING, [True, True, False], [fresh, tens, twos], zones=zones)
    obs = replace(obs, work_seconds=obs.work_seconds + 10 * 3600)  # 2 h of slack: no wait
    assert 3600 < obs.slack_seconds < 3 * 3600
    # THEN choosing among the pools up, the others' completed runs join pool 0's prior
    # (weighing one prior run together): its young run no longer looks likelier to last
    # than pool 1's ten-tick runs, and the job takes pool 1
    assert MultiPoolPolicy().place(obs) == Placement.spot(1)


def test_with_hours_of_slack_it_lets_a_new_run_prove_itself_before_paying_a_changeover():
    # GIVEN pool 0's runs mostly last one tick and one of them starts now; pool 1, which the
    # job held, was just lost
    flicker = ([1, 0, 0] * 10 + [1] * 20 + [0] * 10) * 3 + [0] * 19
    steady = [1] * 199
    obs = observation(NOTHING, [True, False], [flicker, steady], done=199 * 600 - 6000)
    # THEN it waits a tick rather than start an instance that likely lives one tick
    assert MultiPoolPolicy().decide(obs) == PoolsDecision(NOTHING, Mode.WAIT)
    # but not when the slack is short: then a tick of waiting costs more than the risk
    tight = replace(obs, work_seconds=obs.work_seconds + 18 * 3600)
    assert MultiPoolPolicy().place(tight) == Placement.spot(0)
    # nor at the first tick: with nothing seen, a run's age is unknown, not zero
    first = replace(obs, tick=0, done_seconds=0, histories=((), ()))
    assert MultiPoolPolicy().place(first) == Placement.spot(0)


def test_live_a_pool_nobody_asked_this_tick_is_asked_not_waited_for():
    # GIVEN the flickering pool of the test above, live: its history repeats its last
    # sighting (down), and nobody has asked it this tick, so it counts as available with a
    # run of unknown age
    flicker = ([1, 0, 0] * 10 + [1] * 20 + [0] * 10) * 3 + [0] * 20
    steady = [1] * 199 + [0]
    obs = observation(NOTHING, [True, False], [flicker[:199], steady[:199]], done=199 * 600 - 6000)
    # (asked of a market where the other pool has been down for 8 h: waiting that out,
    # `_stick_to_a_pool`, does not fit the slack, so only the flickering pool is in question)
    gone = [1] * 150 + [0] * 50
    unasked = replace(obs, observed=(False, True), histories=(obs.histories[0], tuple(gone[:199])))
    # THEN the job asks it now: read as a run that starts this tick, it would look new at
    # every tick and the job would wait for it until the safety net took on-demand
    assert MultiPoolPolicy().place(unasked) == Placement.spot(0)
    # and when the account did see it come up this tick (another job's launch), the run
    # rule applies as in the benchmark: the job lets it prove itself
    assert MultiPoolPolicy().decide(replace(obs, observed=(True, True))).mode is Mode.WAIT
    # tick after tick unasked (its history repeats its last sighting, down, as does the
    # steady pool's, seen down), it is never waited for
    for later in range(1, 6):
        histories = tuple(tuple(h) + (0,) * later for h in unasked.histories)
        ahead = replace(unasked, tick=obs.tick + later, histories=histories)
        assert MultiPoolPolicy().place(ahead) == Placement.spot(0)


def test_near_the_end_a_young_run_is_judged_by_the_work_it_can_still_do():
    # GIVEN pool 0's runs mostly last one tick but some last 60, one of them starts now, the
    # job held pool 1 (just lost), and half an hour of work is left with hours of slack
    flicker = ([1, 0] * 15 + [1] * 60 + [0]) * 2 + [0] * 17
    steady = [1] * 199
    obs = observation(NOTHING, [True, False], [flicker, steady], done=48 * 3600 - 1800)
    assert obs.slack_seconds > 30 * 3600
    # THEN it waits a tick: the run's mean life (its 60-tick tail) is far beyond the three
    # ticks of work left, but it most likely ends after one; only the work the job can still
    # use counts (E[min(progress, W)], not min(E[progress], W), which is W either way and
    # saw nothing to gain by waiting)
    assert MultiPoolPolicy().decide(obs) == PoolsDecision(NOTHING, Mode.WAIT)

    # once the run is older than the wait one start can afford it has proven itself: it
    # starts. With one start left, that is most of the spare slack (here about 17 h, so the
    # run must be 120 ticks old); younger, with a tick of slack worth nothing, it keeps
    # waiting (the affordable-wait lookahead; the slack it spends is spare by the reserve)
    def later(age):
        proven = ([1, 0] * 15 + [1] * 60 + [0]) * 2 + [0] * 12 + [1] * age
        pools = [proven, [1] * len(proven)]
        return observation(NOTHING, [True, False], pools, done=48 * 3600 - 1800)

    policy = MultiPoolPolicy()
    old = later(120)
    assert (
        policy._affordable_wait(old, policy._statistics(old), policy._union_statistics(old)) < 120
    )
    assert MultiPoolPolicy().place(old) == Placement.spot(0)
    assert MultiPoolPolicy().decide(later(5)) == PoolsDecision(NOTHING, Mode.WAIT)


def test_across_pools_it_leaves_on_demand_when_the_slack_likely_does_not_bind():
    # GIVEN two pools of one region, each up 40 ticks then down 5, together; both came back
    # 4 ticks ago; the job is on on-demand, behind the pace, with 1.8 h of slack and 34.5 h
    # of work in the 36.3 h left: the single-zone price is the lock-in price (the expected
    # outage time, about an eighth of the time left, exceeds the slack)
    history = tuple(([1] * 40 + [0] * 5) * 2 + [1] * 4)
    obs = PoolsObservation(
        tick=len(history),
        gap_seconds=600,
        work_seconds=48 * 3600,
        deadline_seconds=52 * 3600,
        changeover_seconds=720,
        done_seconds=48600,
        remaining_changeover_seconds=0,
        held=ON_DEMAND,
        home="us-east-1",
        pools=(Pool.named("us-east-1a_gpu_1"), Pool.named("us-east-1b_gpu_1")),
        available=(True, True),
        histories=(history, history),
    )
    assert obs.slack_seconds == 6600
    # THEN across pools slack is priced as the pool choice and the waits price it, by the
    # chance that it binds at all, and the job goes back to spot
    assert MultiPoolPolicy().decide(obs).mode is Mode.SWITCH
    # while the single-zone price would hold on-demand: two changeovers' slack at the
    # lock-in price outweigh a tick of on-demand on a 4-tick run
    view = single_view(obs, pool=0)
    union = RunStatistics()
    union.extend(history)
    prior = 1 - (1 - RespotPolicy().parameters.availability_prior) ** 2  # the union's
    held = RespotPolicy().wanted(view, supply=union, run=union, supply_prior=prior)
    assert held.mode is Mode.HOLD


def test_starting_in_a_union_outage_with_hours_of_slack_it_waits_rather_than_buy_on_demand():
    # GIVEN a job that started an hour ago into an outage of all three pools, 21 h of slack
    zones = ["us-east-1a", "us-east-1b", "us-east-1c"]
    obs = observation(NOTHING, [False] * 3, [[0] * 6] * 3, zones=zones)
    assert obs.slack_seconds == 21 * 3600
    # THEN it waits: the outage's likely remainder plus the union's prior outage share of
    # the rest (about 13 h) is below the slack, so on-demand now would likely be wasted
    # (the single-zone pace rule alone, counting the outage as the union's availability,
    # buys on-demand here)
    assert MultiPoolPolicy().decide(obs) == PoolsDecision(NOTHING, Mode.WAIT)
    # but when the window's past before this outage says spot is scarce (up 1 tick in 6),
    # the outage time ahead exceeds the slack and it buys on-demand
    scarce = [1, 0, 0, 0, 0, 0] * 10 + [0] * 6
    behind = observation(NOTHING, [False] * 3, [scarce] * 3, zones=zones, done=10 * 600)
    assert MultiPoolPolicy().decide(behind) == PoolsDecision(ON_DEMAND, Mode.CATCH_UP)


def test_in_a_union_outage_it_buys_on_demand_as_late_as_the_changeovers_ahead_allow():
    # GIVEN the pools were up half the time in runs of 30 ticks, all are down now, and the
    # outages ahead (half of the ~45 h left) will use all of the 6.5 h of slack
    zones = ["us-east-1a", "us-east-1b", "us-east-1c"]
    half = ([1] * 30 + [0] * 30) * 2 + [0] * 3
    obs = observation(NOTHING, [False] * 3, [half] * 3, zones=zones, done=30 * 600)
    assert obs.slack_seconds == 6.5 * 3600
    # the single-zone rule alone would start on-demand now
    policy = MultiPoolPolicy()
    union = policy._union_statistics(obs)
    view = single_view(obs, pool=None)
    wanted = policy.core.wanted(view, supply=union, run=union, supply_prior=0.875)
    assert wanted.choice is Choice.ON_DEMAND
    # THEN it waits: the restarts still ahead need about 1 h, so it can buy the on-demand
    # the outages will force later, knowing more
    assert MultiPoolPolicy().decide(obs) == PoolsDecision(NOTHING, Mode.WAIT)
    # and once another tick of waiting would leave less than that, it buys on-demand
    late = replace(obs, done_seconds=0, work_seconds=48 * 3600 + 1800)
    assert late.slack_seconds == 3600
    assert MultiPoolPolicy().decide(late) == PoolsDecision(ON_DEMAND, Mode.CATCH_UP)


def test_in_a_union_outage_it_buys_on_demand_while_on_demand_can_still_hand_back_to_spot():
    # GIVEN the pools were up 69 ticks in 70 for 58 h, all have been down for 10 ticks, 10 h
    # are left and the changeover is 0.2 h (d = 720 s > G = 600 s)
    zones = ["us-east-1a", "us-east-1b", "us-east-1c"]
    history = ([1] * 69 + [0]) * 5 + [0] * 10
    base = replace(
        observation(NOTHING, [False] * 3, [history] * 3, zones=zones), changeover_seconds=720
    )

    def with_slack(slack):
        obs = replace(base, work_seconds=base.work_seconds + base.slack_seconds - slack)
        assert obs.slack_seconds == slack
        return obs

    # the pace rule alone waits (as it did in a held-out window, down to a slack the net
    # then locked on on-demand): slack priced by the fluid slack value is not worth a tick
    # of on-demand
    last = with_slack(2759)
    policy = MultiPoolPolicy()
    union = policy._union_statistics(last)
    view = single_view(last, pool=None)
    value = policy._slack_value(last, union, policy._statistics(last))
    wanted = policy.core.wanted(
        view, supply=union, run=union, supply_prior=0.875, slack_value=value
    )
    assert wanted == Decision(Choice.NONE, Mode.WAIT)
    # THEN with slack for on-demand's changeover and a spot boot after it (s - d >= 2d) and
    # a tick of waiting would leave less (s - G - d < 2d), it buys on-demand now: later,
    # on-demand could never hand the job back to spot (the outage ahead, its 10 ticks'
    # Lindy remainder, exceeds the slack)
    assert MultiPoolPolicy().decide(last) == PoolsDecision(ON_DEMAND, Mode.CATCH_UP)
    assert MultiPoolPolicy().decide(with_slack(2160)) == PoolsDecision(ON_DEMAND, Mode.CATCH_UP)
    # and a tick before that threshold it still waits, as late as possible
    assert MultiPoolPolicy().decide(with_slack(2760)) == PoolsDecision(NOTHING, Mode.WAIT)


def test_with_ticks_shorter_than_a_changeover_it_looks_ahead_as_far_as_the_changeover():
    # GIVEN G = 60 s, d = 180 s, and pool 0's runs are mostly 4 ticks long (one in three
    # lasts 60); its run is 1 tick old, pool 1 (held) was just lost, and slack is plentiful
    short = ([1] * 4 + [0] * 2) * 8
    history = (short + [1] * 60 + [0] * 2) * 2 + [0, 1]
    obs = observation(NOTHING, [True, False], [history, [1] * len(history)])
    obs = replace(
        obs,
        gap_seconds=60,
        changeover_seconds=180,
        deadline_seconds=4000 * 60,
        work_seconds=2000 * 60,
    )
    # the next tick's hazard is small (runs end at age 4) so a one-tick lookahead would start
    # now; three ticks ahead (d / G) the likely 4-tick run has shown itself: it waits
    assert MultiPoolPolicy().decide(obs) == PoolsDecision(NOTHING, Mode.WAIT)


def test_with_slack_to_spare_it_looks_ahead_as_far_as_one_start_can_afford_to_wait():
    # GIVEN G = 10 min >= d = 3 min (a one-tick changeover lookahead); pool 0's runs mostly
    # end at 3 ticks (one in seven lasts 40), its run is 1 tick old; pool 1 (held) was just
    # lost; 20 h of slack, about 13 starts ahead
    short = ([1] * 3 + [0] * 2) * 6
    history = (short + [1] * 40 + [0] * 2) * 2 + [0, 1]
    steady = [1] * len(history)
    obs = observation(NOTHING, [True, False], [history, steady], done=len(history) * 600 - 6000)
    policy = MultiPoolPolicy()
    pools = policy._statistics(obs)
    union = policy._union_statistics(obs)
    assert policy._affordable_wait(obs, pools, union) >= 3
    # the next tick's hazard is small (runs end at age 3), so one tick ahead looks no better
    stats = pools[0]
    assert stats.hazard(1, stats.current_age(1), 1.0) < 0.1
    # THEN it waits: within the wait one start can afford (its share of the slack the
    # changeovers ahead spare) the likely 3-tick run shows itself
    assert MultiPoolPolicy().decide(obs) == PoolsDecision(NOTHING, Mode.WAIT)
    # with the slack the changeovers ahead need and little more, it looks a tick ahead only
    tight = replace(obs, work_seconds=obs.work_seconds + 17 * 3600)
    assert MultiPoolPolicy()._affordable_wait(tight, pools, union) == 0
    assert MultiPoolPolicy().place(tight) == Placement.spot(0)


def test_the_safety_net_overrides_every_wish():
    # no slack left for a new spot instance's changeover: on-demand
    obs = observation(NOTHING, [True, False], [[1] * 10, [0] * 10])
    tight = replace(obs, work_seconds=70 * 3600 - 10 * 600 - 200)
    decision = MultiPoolPolicy().decide(tight)
    assert decision.placement == ON_DEMAND and decision.mode is Mode.SAFETY_NET
    assert decision.placement.choice is Choice.ON_DEMAND


def as_runs(values):
    runs: list[list[int]] = []
    for v in values:
        if runs and runs[-1][0] == v:
            runs[-1][1] += 1
        else:
            runs.append([v, 1])
    return runs


@settings(max_examples=60, deadline=None)
@given(pool_cases())
def test_run_length_histories_decide_as_the_ticks_they_stand_for(case):
    # GIVEN the histories as the control plane keeps them: run-length pairs per pool
    job, gap, pools, window = case
    decisions: list[tuple[Placement, Placement]] = []

    class Both:
        name = "both"

        def place(self, obs: PoolsObservation) -> Placement:
            ticks = replace(obs, histories=tuple(tuple(h) for h in obs.histories))
            runs = replace(obs, histories=tuple(RunLengths(as_runs(h)) for h in obs.histories))
            decisions.append((MultiPoolPolicy().place(ticks), MultiPoolPolicy().place(runs)))
            return decisions[-1][0]

    simulate_pools(Both(), pools, window, job, gap)
    # THEN every decision is the same
    assert all(a == b for a, b in decisions)


def test_run_lengths_read_as_their_ticks_and_reject_bad_pairs():
    history = RunLengths([[1, 3], [0, 0], [1, 2], [0, 1]])
    assert list(history) == [1, 1, 1, 1, 1, 0] and len(history) == 6
    assert history[4] == 1 and history[-1] == 0 and history[1:3] == (1, 1)
    assert history.runs == ((1, 5), (0, 1))
    assert len(RunLengths([])) == 0
    for bad, field in [([[2, 1]], "value"), ([[1, -1]], "length"), ([[1]], "pair")]:
        with pytest.raises(ValueError, match=field):
            RunLengths(bad)


def test_a_wait_never_spends_the_slack_the_awaited_boot_needs() -> None:
    # GIVEN a 1 h job due in 2.5 h with a 30 min changeover (d > G = 10 min), preempted after
    # 8 ticks with one tick of work left and exactly 2d of slack, while two pools are up;
    # the window is aws-2022-10-26's `*_1.json` pools from tick 266 (tests/replay/test_plan.py)
    window = (
        (1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1),
        (0, 0, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1),
        (0,) * 16,
        (0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0),
    )
    pools = [
        Pool(f"us-west-2{zone}_{gpu}_1", "us-west-2") for zone in "ab" for gpu in ("k80", "v100")
    ]
    job = Job(3600, 9000, 1800)
    # WHEN the benchmark's respot (waits on) runs it
    outcome = simulate_pools(MultiPoolPolicy(), pools, window, job, 600)
    # THEN it starts a new instance at once: waiting a tick would leave less slack than the
    # boot needs (2d), so the net would take on-demand
    assert outcome.placements[8].choice is Choice.SPOT
    assert outcome.on_demand_ticks == 0


def test_with_many_pools_slack_near_the_restarts_reserve_is_not_free():
    # GIVEN nine pools whose runs of 6 ticks are staggered, so that some pool always has
    # spot (the union was never down in 100 h), and a job with 20 h of work left in 26 h
    zones = [f"us-east-1{z}_t{k}" for z in "abc" for k in range(3)]
    histories = [([0] * k + ([1] * 6 + [0] * 3) * 70)[:600] for k in range(9)]
    obs = observation(NOTHING, [True] * 9, histories, zones=zones, done=28 * 3600)
    obs = replace(obs, work_seconds=48 * 3600, deadline_seconds=(600 * 600) + 26 * 3600)
    policy = MultiPoolPolicy()
    pools = policy._statistics(obs)
    union = policy._union_statistics(obs)
    assert union.runs[0] == 0 and union.up_ticks == 600
    reserve = policy._changeover_reserve(obs, pools, union)

    def value_at(slack):
        at = replace(obs, work_seconds=obs.work_seconds + obs.slack_seconds - slack)
        assert at.slack_seconds == slack
        return policy._slack_value(at, union, pools)

    # THEN a second of slack at the reserve the restarts ahead need is worth a good part
    # of the spot price (the slack binds about half the time): counting outages alone,
    # which the union has none of, it was worth ~0 and every wait looked free
    assert value_at(round(reserve)) > 0.25 * SPOT_PRICE_PER_SECOND
    # and with hours of slack above that reserve, little
    assert value_at(round(reserve) + 6 * 3600) < 0.01 * SPOT_PRICE_PER_SECOND


def test_a_run_found_up_at_an_arbitrary_tick_survives_as_the_renewal_mean_says():
    # GIVEN up-runs of 1, 2, 4 and 16 ticks (and outages between), seen over a history
    history = [1, 0, 1, 1, 0, 1, 1, 1, 1, 0] + [1] * 16 + [0]
    stats = RunStatistics(history)
    prior = 2.0
    horizon = stats.ticks
    # WHEN the age of a run found in progress is unknown
    found = stats.found_survival(1, horizon, prior)
    # THEN it is survival averaged over the renewal law of that age, P(A = a) ~ S(a)
    # (a brute-force sum of the same estimator; the closed-form prior tail included)
    s = [stats.survival(1, a, prior) for a in range(horizon)]
    assert found == pytest.approx(sum(x * x for x in s) / sum(s), rel=1e-9)
    # AND a run found is older than a new one: its survival is below a new run's (1) and
    # below that of a run of the mean age of new ones; with no history it is the prior's
    assert found < stats.survival(1, 0, prior) == 1.0
    fresh = RunStatistics()
    t = [1 / (a + 1) for a in range(50)]
    assert fresh.found_survival(1, 50, prior) == pytest.approx(
        sum(x * x for x in t) / sum(t), rel=1e-9
    )
    # AND longer runs make the found one likelier to be old: heavier tail, lower survival
    heavy = RunStatistics([1] * 40 + [0] + [1] + [0] + [1] * 40 + [0])
    light = RunStatistics(([1, 1, 0] * 27)[:83])
    assert heavy.found_survival(1, 83, prior) < light.found_survival(1, 83, prior)


def test_the_remaining_life_of_a_run_found_up_has_the_law_of_its_age():
    # GIVEN up-runs of 1, 2, 4 and 16 ticks (and outages between)
    history = [1, 0, 1, 1, 0, 1, 1, 1, 1, 0] + [1] * 16 + [0]
    stats = RunStatistics(history)
    prior = 2.0
    ages = stats.ticks
    # THEN the sum of P(R > t) over any span is the brute-force renewal sum (T(t) / T(0),
    # T(t) = sum over x >= t of S(x)), its prior part in closed form
    s = [stats.survival(1, x, prior) for x in range(ages)]
    tails = [sum(s[t:]) for t in range(ages)] + [0.0]
    for start, stop in [(0, 1), (1, 3), (2, 20), (5, ages + 10), (0, ages)]:
        brute = sum(tails[min(t, ages)] / tails[0] for t in range(start, stop))
        assert stats.found_lasting(1, start, stop, ages, prior) == pytest.approx(brute, rel=1e-9)
    # AND a run found in progress outlives a new one: more expected ticks over any horizon
    new = sum(stats.survival(1, t, prior) for t in range(12))
    assert stats.found_lasting(1, 0, 12, ages, prior) > new
