"""The transition table: every legal move, every illegal one, terminal states stay terminal."""

from __future__ import annotations

import itertools

import pytest

from respot.core.states import TERMINAL_STATES, TRANSITIONS, JobState, Transition, can, next_state
from respot.exceptions import IllegalTransitionError

EXPECTED = {
    (JobState.QUEUED, Transition.REQUEST): JobState.REQUESTED,
    (JobState.INTERRUPTED, Transition.REQUEST): JobState.REQUESTED,
    (JobState.REQUESTED, Transition.RETRY): JobState.REQUESTED,
    (JobState.REQUESTED, Transition.WAIT): JobState.QUEUED,
    (JobState.INTERRUPTED, Transition.WAIT): JobState.QUEUED,
    (JobState.REQUESTED, Transition.BIND): JobState.STARTING,
    (JobState.REQUESTED, Transition.START): JobState.RUNNING,
    (JobState.STARTING, Transition.START): JobState.RUNNING,
    (JobState.REQUESTED, Transition.INTERRUPT): JobState.INTERRUPTED,
    (JobState.STARTING, Transition.INTERRUPT): JobState.INTERRUPTED,
    (JobState.RUNNING, Transition.INTERRUPT): JobState.INTERRUPTED,
    # A return from on-demand to spot asks for spot while the on-demand attempt trains on,
    # and comes back to RUNNING on it when every pool refuses.
    (JobState.RUNNING, Transition.RETURN): JobState.REQUESTED,
    (JobState.REQUESTED, Transition.RETURN_REFUSED): JobState.RUNNING,
    # The team's queue (issue 26): a submission is held until admitted, then waits for capacity.
    (JobState.QUEUED, Transition.HOLD): JobState.HELD,
    (JobState.HELD, Transition.ADMIT): JobState.QUEUED,
    # Preempted for fair share: checkpointed, stopped, back in the team's queue.
    (JobState.RUNNING, Transition.REQUEUE): JobState.HELD,
}
for live in set(JobState) - TERMINAL_STATES:
    EXPECTED[(live, Transition.COMPLETE)] = JobState.COMPLETED
    EXPECTED[(live, Transition.FAIL)] = JobState.FAILED
    EXPECTED[(live, Transition.CANCEL)] = JobState.CANCELLED


@pytest.mark.parametrize(("state", "transition"), list(itertools.product(JobState, Transition)))
def test_every_pair_is_legal_exactly_when_expected(state: JobState, transition: Transition) -> None:
    # GIVEN a state and a transition WHEN the table is asked THEN it agrees with the design
    expected = EXPECTED.get((state, transition))
    assert can(state, transition) is (expected is not None)
    if expected is None:
        with pytest.raises(IllegalTransitionError, match=transition.value):
            next_state(state, transition)
    else:
        assert next_state(state, transition) is expected


def test_terminal_states_have_no_way_out() -> None:
    for state, transition in itertools.product(TERMINAL_STATES, Transition):
        assert not can(state, transition)
        assert state.is_terminal()


def test_every_transition_is_in_the_table_and_leads_somewhere_reachable() -> None:
    assert set(TRANSITIONS) == set(Transition)
    targets = {target for _, target in TRANSITIONS.values()}
    assert targets | {JobState.QUEUED} == set(JobState)
