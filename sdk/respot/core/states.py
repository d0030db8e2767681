"""Job states and the one table of legal transitions between them.

    HELD --admit--> QUEUED (the team's queue admitted it: respot.queue; QUEUED --hold--> HELD
    on submission when the deployment's queue is on or the spec names `after:`/`queue:`)
    QUEUED --request--> REQUESTED --bind--> STARTING --start--> RUNNING --complete--> COMPLETED
      ^                   |  ^  |                |                 |
      |                   |  |  +----start-------|---------------->|
      +-----wait----------+  +--retry            +---interrupt-----+--> INTERRUPTED --request--> ...
    any live state --fail--> FAILED,  --cancel--> CANCELLED,  --complete--> COMPLETED
    RUNNING --requeue--> HELD (preempted for fair share: checkpointed, stopped, back in the
      team's queue; admitted again later, its next attempt restores the checkpoint)
    RUNNING (on-demand) --return--> REQUESTED (spot, the on-demand attempt trains on)
    REQUESTED (that return) --return refused--> RUNNING (on the on-demand attempt, unstopped)

Every change to a job record names a `Transition`; `next_state` checks it against
`TRANSITIONS` and raises `IllegalTransitionError` otherwise. Terminal states stay terminal.
The diagram is in docs/lifecycle.md too.
"""

from __future__ import annotations

import enum

from respot.exceptions import IllegalTransitionError


class JobState(enum.StrEnum):
    """Where a job is in its life."""

    # Submitted, not admitted yet: it waits for the team's queue (its turn in fair share, a
    # vCPU quota, a GPU limit, its named queue, the jobs its `after:` names). respot.queue.
    HELD = "HELD"
    # Recorded; waiting for capacity to be requested (just submitted, or no capacity right now).
    QUEUED = "QUEUED"
    # Capacity asked for (spot or on-demand); no instance has come up for this attempt yet.
    REQUESTED = "REQUESTED"
    # An instance is bound to the job and booting; its agent has not reported yet.
    STARTING = "STARTING"
    # The agent reported: restoring the checkpoint or training.
    RUNNING = "RUNNING"
    # The instance is being reclaimed or is gone; a replacement is not requested yet.
    INTERRUPTED = "INTERRUPTED"
    # Training finished and its outputs are in S3.
    COMPLETED = "COMPLETED"
    # The job cannot finish: the training code failed, a limit was reached, or input was bad.
    FAILED = "FAILED"
    # Someone cancelled the job.
    CANCELLED = "CANCELLED"

    def is_terminal(self) -> bool:
        """True for states a job never leaves."""
        return self in TERMINAL_STATES

    def has_instance(self) -> bool:
        """True for states in which an instance may be billed for the job."""
        return self in {JobState.REQUESTED, JobState.STARTING, JobState.RUNNING}


TERMINAL_STATES = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED})
LIVE_STATES = frozenset(JobState) - TERMINAL_STATES


class Transition(enum.StrEnum):
    """The named ways a job changes state."""

    # Capacity is requested for a new attempt (first placement, or a replacement).
    REQUEST = "request"
    # The placement tried failed (no capacity, price too low...): try the next one.
    RETRY = "retry"
    # Nothing could be placed now: wait in the queue for the next policy tick.
    WAIT = "wait"
    # The attempt's instance came up (spot fulfilment or instance running).
    BIND = "bind"
    # The agent on the attempt's instance reported that it runs.
    START = "start"
    # The instance got an interruption notice, or went away without finishing.
    INTERRUPT = "interrupt"
    # The training finished.
    COMPLETE = "complete"
    # The job cannot finish.
    FAIL = "fail"
    # Someone cancelled the job.
    CANCEL = "cancel"
    # A job training on on-demand asks for spot while its on-demand attempt trains on
    # (lifecycle `_begin_return`); the on-demand one is stopped only once spot launched.
    RETURN = "return"
    # Every spot pool refused that return: the job is RUNNING on its on-demand attempt again.
    RETURN_REFUSED = "return-refused"
    # Submitted into the team's queue: it waits there until admitted.
    HOLD = "hold"
    # The team's queue admitted it (a lease in the queue ledger): capacity may be requested.
    ADMIT = "admit"
    # Preempted for fair share (`core.lifecycle.stops`): its checkpoint saved and its
    # instance stopped, the job waits in the team's queue again.
    REQUEUE = "requeue"


_LIVE = frozenset(LIVE_STATES)

# The one table: transition -> (states it may start from, state it leads to).
TRANSITIONS: dict[Transition, tuple[frozenset[JobState], JobState]] = {
    Transition.REQUEST: (frozenset({JobState.QUEUED, JobState.INTERRUPTED}), JobState.REQUESTED),
    Transition.RETRY: (frozenset({JobState.REQUESTED}), JobState.REQUESTED),
    Transition.WAIT: (frozenset({JobState.REQUESTED, JobState.INTERRUPTED}), JobState.QUEUED),
    Transition.BIND: (frozenset({JobState.REQUESTED}), JobState.STARTING),
    # An agent report may overtake the fulfilment event: REQUESTED -> RUNNING is legal.
    Transition.START: (frozenset({JobState.REQUESTED, JobState.STARTING}), JobState.RUNNING),
    Transition.INTERRUPT: (
        frozenset({JobState.REQUESTED, JobState.STARTING, JobState.RUNNING}),
        JobState.INTERRUPTED,
    ),
    # The old instance may finish during its two-minute notice, after a replacement was asked for.
    Transition.COMPLETE: (_LIVE, JobState.COMPLETED),
    Transition.FAIL: (_LIVE, JobState.FAILED),
    Transition.CANCEL: (_LIVE, JobState.CANCELLED),
    Transition.RETURN: (frozenset({JobState.RUNNING}), JobState.REQUESTED),
    Transition.RETURN_REFUSED: (frozenset({JobState.REQUESTED}), JobState.RUNNING),
    Transition.HOLD: (frozenset({JobState.QUEUED}), JobState.HELD),
    Transition.ADMIT: (frozenset({JobState.HELD}), JobState.QUEUED),
    Transition.REQUEUE: (frozenset({JobState.RUNNING}), JobState.HELD),
}


def next_state(current: JobState, transition: Transition) -> JobState:
    """The state `transition` leads to from `current`, or `IllegalTransitionError`."""
    sources, target = TRANSITIONS[transition]
    if current not in sources:
        allowed = ", ".join(sorted(s.value for s in sources))
        raise IllegalTransitionError(
            f"cannot {transition.value} a job in state {current.value} (allowed from: {allowed})"
        )
    return target


def can(current: JobState, transition: Transition) -> bool:
    """True if `transition` is legal from `current`."""
    return current in TRANSITIONS[transition][0]
