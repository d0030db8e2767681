"""Launch pacing in the lifecycle (issue 26): a launch the account's pacing held back is not "no
capacity": the same pool is launched again at the next tick, never marked tried, bounded, and
the job's timeline says why; `Ec2Capacity` sends nothing to EC2 without a token."""

from __future__ import annotations

from typing import Any

from respot.aws.capacity import Ec2Capacity
from respot.aws.pacing import PACED_ERROR, Grant, Pacing
from respot.core.effects import LaunchInstance, LookAgainLater
from respot.core.events import CapacityUnavailable, ReconcileTick, Submitted
from respot.core.failures import MAX_PACED_LAUNCHES, launch_error_kind
from respot.core.states import JobState
from tests.core.factories import SETTINGS, at, submission
from tests.core.test_lifecycle import Driver


def _paced(d: Driver, t: float) -> None:
    last = d.launches()[-1]
    d.apply(CapacityUnavailable(last.attempt, last.client_token, PACED_ERROR, "paced"), t)


def test_a_paced_launch_is_tried_again_at_the_next_tick_on_the_same_pool() -> None:
    assert launch_error_kind(PACED_ERROR) == "paced"
    d = Driver()
    d.apply(Submitted(submission()))
    first = d.launches()[-1]
    _paced(d, 1)
    # THEN nothing else is asked, the pool is not tried, and it is not counted as no capacity
    assert d.state is JobState.REQUESTED and len(d.launches()) == 1
    assert d.job is not None and d.job.current is not None and d.job.current.tried == []
    kinds = [e.kind for e in d.job.timeline]
    assert "paced" in kinds and "waiting" not in kinds and "capacity" not in kinds
    assert "capacity_misses" not in d.job.policy
    assert "not a lack of capacity" in d.job.timeline[-1].text
    # WHEN the next tick comes (one policy tick later, well before the launch timeout)
    tick = SETTINGS.policy_tick.total_seconds()
    assert tick < SETTINGS.launch_timeout.total_seconds()
    d.apply(ReconcileTick(at(1 + tick - 1)), 1 + tick - 1)
    assert len(d.launches()) == 1
    d.apply(ReconcileTick(at(1 + tick)), 1 + tick)
    # THEN the same pool is launched again with the same client token
    again = d.launches()[-1]
    assert len(d.launches()) == 2
    assert (again.placement, again.client_token) == (first.placement, first.client_token)


def test_paced_launches_are_bounded_and_say_why_the_job_failed() -> None:
    d = Driver()
    d.apply(Submitted(submission()))
    tick = SETTINGS.policy_tick.total_seconds()
    t = 1.0
    for _ in range(MAX_PACED_LAUNCHES - 1):
        _paced(d, t)
        t += tick
        d.apply(ReconcileTick(at(t)), t)
    assert d.state is JobState.REQUESTED and len(d.launches()) == MAX_PACED_LAUNCHES
    _paced(d, t + 1)
    assert d.state is JobState.FAILED
    assert d.job is not None and d.job.reason is not None
    assert f"{MAX_PACED_LAUNCHES} times in a row" in d.job.reason
    assert "launch_pacing" in d.job.reason


class NoTokens:
    pacing = Pacing(rate_per_second=1.0, burst=10)

    def __init__(self) -> None:
        self.asked: list[str] = []

    def take(self, launch_id: str) -> Grant:
        self.asked.append(launch_id)
        return Grant(False, wait=0.7)


class Ec2NeverCalled:
    def run_instances(self, **kwargs: Any) -> Any:
        raise AssertionError("a paced launch reached EC2")


def test_a_launch_without_a_token_is_not_sent_to_ec2() -> None:
    d = Driver()
    d.apply(Submitted(submission()))
    effect = d.launches()[-1]
    assert isinstance(effect, LaunchInstance)
    pacer = NoTokens()
    cap = Ec2Capacity(launch_template_id="lt-1", client=Ec2NeverCalled(), pacer=pacer)  # type: ignore[arg-type]
    result = cap.launch(effect)
    assert isinstance(result, CapacityUnavailable) and result.error_code == PACED_ERROR
    assert pacer.asked == [effect.client_token]
    assert "launch_pacing" in result.message and "0.7s" in result.message


def test_a_paced_launch_with_a_reserved_token_is_launched_again_when_it_is_due() -> None:
    d = Driver()
    d.apply(Submitted(submission()))
    first = d.launches()[-1]
    # GIVEN a launch paced whose token (reserved for it) is due in 7.2 s
    d.apply(
        CapacityUnavailable(
            first.attempt, first.client_token, PACED_ERROR, "paced", retry_after=7.2
        ),
        1,
    )
    # THEN the lifecycle asks for a look in 8 s (whole seconds, not before it is due)
    looks = [e for e in d.effects if isinstance(e, LookAgainLater)]
    assert [(e.job_id, e.attempt, e.delay_seconds) for e in looks] == [
        (first.job_id, first.attempt, 8)
    ]
    assert d.job is not None and "in 8s, when its launch token is due" in d.job.timeline[-1].text
    # AND a look (the delayed one, or a tick) before then launches nothing
    d.apply(ReconcileTick(at(1 + 7)), 1 + 7)
    assert len(d.launches()) == 1
    # AND the look when it is due launches the same pool again, same client token
    d.apply(ReconcileTick(at(1 + 8)), 1 + 8)
    assert len(d.launches()) == 2
    again = d.launches()[-1]
    assert (again.placement, again.client_token) == (first.placement, first.client_token)
    # far before the launch timeout (the tick's own re-launch of a lost launch)
    assert SETTINGS.launch_timeout.total_seconds() > 60


def test_a_token_due_after_the_launch_timeout_is_looked_at_by_then() -> None:
    d = Driver()
    d.apply(Submitted(submission()))
    first = d.launches()[-1]
    timeout = SETTINGS.launch_timeout.total_seconds()
    d.apply(
        CapacityUnavailable(
            first.attempt, first.client_token, PACED_ERROR, "paced", retry_after=timeout + 300
        ),
        1,
    )
    (look,) = [e for e in d.effects if isinstance(e, LookAgainLater)]
    # THEN the look is bounded by the launch timeout, and the request is never dated ahead
    assert look.delay_seconds == int(timeout)
    assert d.job is not None and d.job.current is not None
    assert d.job.current.requested_at <= at(1)


def test_a_reserved_grant_tells_the_lifecycle_when_the_token_is_due() -> None:
    d = Driver()
    d.apply(Submitted(submission()))
    effect = d.launches()[-1]

    class Reserved(NoTokens):
        def take(self, launch_id: str) -> Grant:
            self.asked.append(launch_id)
            return Grant(False, wait=3.5, reserved=True)

    for pacer, due in ((Reserved(), 3.5), (NoTokens(), None)):
        cap = Ec2Capacity(launch_template_id="lt-1", client=Ec2NeverCalled(), pacer=pacer)  # type: ignore[arg-type]
        result = cap.launch(effect)
        assert isinstance(result, CapacityUnavailable) and result.error_code == PACED_ERROR
        assert result.retry_after == due
