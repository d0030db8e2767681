"""`LiveView`: the multi-pool policy fed only what one job of an account sees live."""

from __future__ import annotations

import pytest

from respot.policy import Choice, Job, MultiPoolPolicy, Placement, Pool, simulate_pools
from respot.policy.live_view import MAX_SPOT_RETURNS, LiveView, backoff_cap_ticks
from respot.policy.pool_baselines import UniformProgressRoundRobin
from respot.policy.pools import PoolsObservation

POOLS = [Pool.named("us-east-1a_gpu_1"), Pool.named("us-east-1b_gpu_1")]
JOB = Job(3600, 3 * 3600, 600)  # 6 ticks of work in 18, a one-tick changeover
GAP = 600


class Recording:
    """Keeps what it runs, else takes pool 0's spot, else pool 1's, else on-demand; records
    every observation it was given."""

    name = "recording"

    def __init__(self) -> None:
        self.seen: list[PoolsObservation] = []

    def place(self, obs: PoolsObservation) -> Placement:
        self.seen.append(obs)
        held = obs.held
        if held.choice is not Choice.NONE and (held.pool is None or obs.available[held.pool]):
            return held  # keeps what it runs while it lasts
        for k, up in enumerate(obs.available):
            if up:
                return Placement.spot(k)
        return Placement(Choice.ON_DEMAND)


def test_it_sees_only_its_own_sightings_and_asks_in_the_policys_order() -> None:
    # GIVEN pool 0 down for the first 3 ticks, pool 1 always up
    window = [[0, 0, 0] + [1] * 16, [1] * 19]
    recording = Recording()
    outcome = simulate_pools(LiveView(recording), POOLS, window, JOB, GAP)
    first = recording.seen[:2]
    # THEN at tick 0 it believed both pools up (nobody asked yet), asked pool 0 (refused:
    # seen down now), then took pool 1
    assert first[0].available == (True, True) and first[0].observed == (False, False)
    assert first[1].available == (False, True) and first[1].observed == (True, False)
    assert outcome.placements[0] == Placement.spot(1)
    # AND later its history of pool 0 is the refusal held (0), never the truth it did not
    # ask about: pool 0 came back at tick 3, but the job kept running on pool 1
    later = next(obs for obs in recording.seen if obs.tick == 5)
    assert list(later.histories[0]) == [0] * 5
    assert list(later.histories[1]) == [1] * 5  # its running instance: seen up every tick
    assert later.held == Placement.spot(1) and later.observed == (False, True)


def test_with_every_pool_always_up_it_costs_what_the_benchmark_says() -> None:
    window = [[1] * 19, [1] * 19]
    full = simulate_pools(MultiPoolPolicy(), POOLS, window, JOB, GAP)
    live = simulate_pools(LiveView(), POOLS, window, JOB, GAP)
    assert live.cost == full.cost and live.placements == full.placements


def test_from_on_demand_it_returns_by_asking_unless_told_to_wait_for_sightings() -> None:
    # GIVEN no spot for the first 4 ticks, then pool 1 for good; a tight job goes on-demand
    window = [[0] * 25, [0] * 4 + [1] * 21]
    job = Job(3 * 3600, 4 * 3600, 600)
    asking = simulate_pools(LiveView(), POOLS, window, job, GAP)
    sightings = simulate_pools(LiveView(ask_from_on_demand=False), POOLS, window, job, GAP)
    # THEN asking, it goes back to spot once the policy would switch; waiting for a sighting
    # that no other job makes, it stays on on-demand to the end
    assert Choice.ON_DEMAND in [p.choice for p in asking.placements]
    assert asking.placements[-1] == Placement.spot(1)
    assert sightings.spot_ticks == 0 and not sightings.missed and not asking.missed
    assert asking.cost < sightings.cost


class AlwaysBack:
    """From on-demand, always wants pool 0's spot; otherwise on-demand."""

    name = "always-back"

    def place(self, obs: PoolsObservation) -> Placement:
        if obs.held.choice is Choice.ON_DEMAND and obs.available[0]:
            return Placement.spot(0)
        return Placement(Choice.ON_DEMAND)


def test_a_return_every_pool_refuses_costs_nothing_and_returns_are_bounded() -> None:
    # GIVEN no spot anywhere, a job with hours of slack on on-demand, and a policy that
    # always wants to go back to spot
    window = [[0] * 25, [0] * 25]
    job = Job(3600, 4 * 3600, 600)
    live = LiveView(AlwaysBack())
    outcome = simulate_pools(live, POOLS, window, job, GAP)
    # THEN each return asked every pool and found nothing while the on-demand instance
    # trained on (spot first): one changeover in all, the job done after it and its 6 ticks
    # of work; the returns 1, 2, 4, ... ticks apart, at most two changeovers (2 ticks here):
    # at ticks 1, 2, 4 and 6
    assert backoff_cap_ticks(job.changeover_seconds, GAP) == 2
    assert outcome.spot_ticks == 0 and not outcome.missed
    assert outcome.changeovers == 1 and outcome.finish_seconds == 7 * GAP
    assert live._refused == 4 and not live.restarted
    # AND stop first (as live did until 2026-11-24) each refused one cost a changeover
    stop_first = LiveView(AlwaysBack(), stop_first=True)
    before = simulate_pools(stop_first, POOLS, window, job, GAP)
    assert stop_first._refused == 4 and before.changeovers == 1 + 4
    assert before.finish_seconds == 11 * GAP and before.cost > outcome.cost
    # AND bounded: over a long outage, about one refused return per two changeovers, and
    # never more than MAX_SPOT_RETURNS returns that moved the job
    capped = LiveView(AlwaysBack())
    capped_outcome = simulate_pools(capped, POOLS, [[0] * 400] * 2, Job(3600, 66 * 3600, 600), GAP)
    assert capped._returns - capped._refused <= MAX_SPOT_RETURNS and not capped_outcome.missed
    assert capped._refused <= 2 + 400 // 2


def test_a_lone_job_moves_to_another_region_rather_than_wait_out_its_regions_outage() -> None:
    # GIVEN a 4-h job in 10 h (G = 5 min, d = 3 min): the checkpoint's region (us-east-1)
    # has spot for the first 2 h, then none for the rest of the window; a pool of us-west-2
    # has spot throughout (issue 28: a job waited tick after tick for its region at a
    # slack value near zero, the pools it had not asked reading as up, then bought on-demand)
    gap = 300
    job = Job(4 * 3600, 10 * 3600, 180)
    ticks = job.ticks(gap) + 1
    pools = [Pool.named("us-east-1a_gpu_1"), Pool.named("us-west-2a_gpu_1")]
    window = [[1] * 24 + [0] * (ticks - 24), [1] * ticks]
    outcome = simulate_pools(LiveView(), pools, window, job, gap)
    # THEN it moves once (one transfer) and buys no on-demand: it may wait for its region
    # while the wait its outage is expected to last, by its age, fits the slack (the plan
    # of `_stick_to_a_pool`, which would save the fee), but gives up long before the
    # slack is spent (here after 14 ticks), and pays no more than moving at once
    assert not outcome.missed and outcome.on_demand_ticks == 0 and outcome.transfers == 1
    moved = next(t for t, x in enumerate(outcome.placements) if x == Placement.spot(1))
    slack_ticks = (job.deadline_seconds - job.work_seconds) // gap
    assert moved <= 24 + slack_ticks // 2, outcome.placements
    at_once = simulate_pools(UniformProgressRoundRobin(), pools, window, job, gap)
    assert at_once.placements[24] == Placement.spot(1) and outcome.cost <= at_once.cost


def test_a_lone_job_on_on_demand_returns_when_the_pools_come_back_unseen() -> None:
    # GIVEN three pools down for the first hour of a 24-h job due in 26 h (G = 5 min,
    # d = 12 min): the job is refused everywhere, buys on-demand in the outage, and nobody
    # asks the pools while it trains there; then every pool has spot to the end
    gap = 300
    job = Job(24 * 3600, 26 * 3600, 720)
    ticks = job.ticks(gap) + 1
    pools = [Pool.named(f"us-east-1{z}_gpu_1") for z in "abc"]
    window = [[0] * 12 + [1] * (ticks - 12) for _ in pools]
    outcome = simulate_pools(LiveView(), pools, window, job, gap)
    # THEN it returns to spot soon after they come back: a run found up by asking is one
    # in progress, not one that starts that very tick (issue 28: such runs read as the
    # likeliest to end, and the job held on-demand for good)
    assert not outcome.missed and outcome.on_demand_ticks > 0
    back = next(t for t, x in enumerate(outcome.placements) if t > 12 and x.choice is Choice.SPOT)
    assert back <= 12 + 2 * backoff_cap_ticks(job.changeover_seconds, gap), outcome.placements


def test_a_lone_job_on_on_demand_returns_while_a_pool_it_does_not_see_has_spot_for_hours():
    # GIVEN a 40-h job due in 44 h (G = 10 min, d = 12 min): for 10 h pool a flickers (3
    # ticks up, 1 down) and pool b has no spot; both are down for an hour, the job buys
    # on-demand; then pool a has spot to the end, which nobody sees while the job trains
    # on on-demand (aws-2022-10-26, 52 h / 0.2 h, window 26, issue 28: the switch budget
    # read the run found up as a new one, survival 1, and held on-demand for 76 ticks)
    gap = 600
    job = Job(40 * 3600, 44 * 3600, 720)
    ticks = job.ticks(gap) + 1
    pools = [Pool.named(f"us-west-2{z}_gpu_1") for z in "ab"]
    flicker = ([1, 1, 1, 0] * 15)[:60]
    window = [flicker + [0] * 6 + [1] * (ticks - 66), [0] * ticks]
    outcome = simulate_pools(LiveView(), pools, window, job, gap)
    # THEN it goes back to spot in the first quarter of the hours pool a has spot (before
    # the change: after 180 of its 199 ticks), and buys no on-demand after that
    assert not outcome.missed
    back = next(t for t, x in enumerate(outcome.placements) if t > 66 and x.choice is Choice.SPOT)
    assert back < 66 + (ticks - 66) // 4, outcome.placements
    assert all(x.choice is Choice.SPOT for x in outcome.placements[back:]), outcome.placements


def _long_and_flickering(ticks: int) -> list[list[int]]:
    """Pool a: 4-h runs and 20-min outages; pool b: 10 min up, 5 min down (G = 5 min)."""
    a = ([1] * 48 + [0] * 4) * (ticks // 52 + 1)
    b = [1, 1, 0] * (ticks // 3 + 1)
    return [a[:ticks], b[:ticks]]


def test_a_lone_job_with_slack_waits_out_a_pool_whose_runs_last_rather_than_hop():
    # GIVEN a 24-h job due in 36 h (G = 5 min, d = 3 min) and two pools of one region: a has
    # 4-h runs and 20-min outages, b flickers (aws-2023-04-19: us-east-1d's runs last
    # hours, its outages minutes; the others' runs are short)
    gap = 300
    job = Job(24 * 3600, 36 * 3600, 180)
    ticks = job.ticks(gap) + 1
    pools = [Pool.named(f"us-east-1{z}_gpu_1") for z in "ab"]
    outcome = simulate_pools(LiveView(), pools, _long_and_flickering(ticks), job, gap)
    # THEN once it has seen one of a's outages it waits out the next ones (a plan: the
    # waits fit the slack, and a's new runs need far fewer restarts than b's) instead of
    # starting b's short runs: no tick on b through a's 2nd to 5th outages
    assert not outcome.missed and outcome.on_demand_ticks == 0
    on_b = [t for t, x in enumerate(outcome.placements) if x == Placement.spot(1)]
    assert not [t for t in on_b if 52 <= t < 256], outcome.placements
    assert outcome.changeovers <= 10  # one start a run of a, and the hops at the ends


def test_a_lone_job_without_the_slack_for_the_waits_takes_the_pool_that_has_spot():
    # GIVEN the same pools, the same 24-h job due in 24.8 h: 48 min of slack, less than
    # a's outages and restarts ahead need
    gap = 300
    job = Job(24 * 3600, int(24.8 * 3600), 180)
    ticks = job.ticks(gap) + 1
    pools = [Pool.named(f"us-east-1{z}_gpu_1") for z in "ab"]
    outcome = simulate_pools(LiveView(), pools, _long_and_flickering(ticks), job, gap)
    # THEN it does not wait for a through its outages: b's spot (or on-demand) covers them
    assert not outcome.missed
    idle = [t for t, x in enumerate(outcome.placements) if x.choice is Choice.NONE]
    assert len(idle) <= 2, outcome.placements


def test_the_accounts_sightings_head_the_histories_and_order_the_asking() -> None:
    # GIVEN an account that saw pool 0 refuse for its last 3 ticks and never observed pool 1,
    # and a window where both pools have spot throughout
    window = [[1] * 19, [1] * 19]
    recording = Recording()
    live = LiveView(recording, account=[[1, 0, 0, 0], None])
    outcome = simulate_pools(live, POOLS, window, JOB, GAP)
    first = recording.seen[0]
    # THEN at tick 0 the policy sees the account's 4 ticks before its own, pool 0 as the
    # refusals and pool 1 as never observed (up); it still asks pool 0 first (nobody asked
    # it this tick), finds spot and takes it
    assert list(first.histories[0]) == [1, 0, 0, 0] and list(first.histories[1]) == [1] * 4
    assert outcome.placements[0] == Placement.spot(0)
    # AND its own sightings follow the account's: at tick 5, 4 + 5 ticks
    later = next(obs for obs in recording.seen if obs.tick == 5)
    assert list(later.histories[0]) == [1, 0, 0, 0] + [1] * 5
    # AND what it hands a later job is its own ticks only, the last one repeated past its end
    assert live.sightings(3) == [[1, 1, 1], None]
    assert live.sightings(12)[0] == [1] * 12


def test_without_an_account_it_is_the_job_alone_and_a_bad_account_is_refused() -> None:
    window = [[0, 0, 0] + [1] * 16, [1] * 19]
    alone = simulate_pools(LiveView(), POOLS, window, JOB, GAP)
    empty = simulate_pools(LiveView(account=[None, None]), POOLS, window, JOB, GAP)
    assert empty.placements == alone.placements and empty.cost == alone.cost
    with pytest.raises(ValueError, match="different ticks"):
        LiveView(account=[[1, 0], [1]])
    with pytest.raises(ValueError, match="3 pools, not 2"):
        simulate_pools(LiveView(account=[[1], [1], [1]]), POOLS, window, JOB, GAP)


def test_what_other_jobs_see_while_it_runs_is_seen_before_it_asks() -> None:
    # GIVEN pool 0 with spot throughout and pool 1 from tick 1; another job of the account
    # was refused on pool 0 at tick 0 and saw it up again at tick 2
    window = [[1] * 19, [0] + [1] * 18]
    recording = Recording()
    live = LiveView(recording, beside={0: [(0, 0)], 2: [(0, 1)]})
    outcome = simulate_pools(live, POOLS, window, JOB, GAP)
    first = recording.seen[0]
    # THEN at tick 0 pool 0 is seen down (observed, by the other job) before anything is
    # asked, so the job asks pool 1 only, is refused, and takes on-demand
    assert first.available == (False, True) and first.observed == (True, False)
    assert outcome.placements[0] == Placement(Choice.ON_DEMAND)
    # AND pool 0's history holds what the other job saw: down at 0 and 1, up from 2
    later = next(obs for obs in recording.seen if obs.tick == 4)
    assert list(later.histories[0]) == [0, 0, 1, 1]
    # AND what this job tells the account is its own sightings only: pool 1's refusal
    assert live.made == [(0, 1, 0)]
