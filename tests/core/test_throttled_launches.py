"""EC2 API throttling (`RequestLimitExceeded`) is not "no capacity": the same pool is launched
again after a backoff, never marked tried; the retries are bounded and say why they stopped."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from respot.aws.capacity import THROTTLE_BACKOFF, Ec2Capacity
from respot.core.effects import LaunchInstance
from respot.core.events import CapacityLaunched, CapacityUnavailable, ReconcileTick, Submitted
from respot.core.failures import (
    MAX_THROTTLED_LAUNCHES,
    MAX_UNAUTHORIZED_LAUNCHES,
    launch_error_kind,
)
from respot.core.states import JobState
from tests.core.factories import SETTINGS, at, submission
from tests.core.test_lifecycle import Driver

THROTTLED = "RequestLimitExceeded"


def _throttle(d: Driver, t: float) -> None:
    last = d.launches()[-1]
    d.apply(
        CapacityUnavailable(last.attempt, last.client_token, THROTTLED, "Request limit exceeded."),
        t,
    )


def test_a_throttled_launch_retries_the_same_pool_and_never_marks_it_tried() -> None:
    assert launch_error_kind(THROTTLED) == "throttle"
    d = Driver()
    d.apply(Submitted(submission()))
    first = d.launches()[-1]
    _throttle(d, 1)
    # THEN no other pool is asked, the pool is not tried, the job still waits for this launch
    assert d.state is JobState.REQUESTED
    assert len(d.launches()) == 1
    assert d.job is not None and d.job.current is not None
    assert d.job.current.tried == []
    assert "waiting" not in [e.kind for e in d.job.timeline]
    # WHEN the tick comes after the launch timeout (the backoff)
    wait = SETTINGS.launch_timeout.total_seconds()
    d.apply(ReconcileTick(at(1 + wait - 1)), 1 + wait - 1)
    assert len(d.launches()) == 1  # not before
    d.apply(ReconcileTick(at(1 + wait)), 1 + wait)
    # THEN the same pool is launched again, with the same client token (one instance at most)
    again = d.launches()[-1]
    assert len(d.launches()) == 2
    assert again.placement == first.placement and again.client_token == first.client_token
    d.apply(
        CapacityLaunched(again.attempt, again.client_token, "i-1", "sir-1", None, 0.3), 2 + wait
    )
    assert d.job.current.instance_id == "i-1"


def test_throttled_launches_are_bounded_and_say_why_the_job_failed() -> None:
    d = Driver()
    d.apply(Submitted(submission()))
    t = 1.0
    for _ in range(MAX_THROTTLED_LAUNCHES - 1):
        _throttle(d, t)
        t += SETTINGS.launch_timeout.total_seconds()
        d.apply(ReconcileTick(at(t)), t)
    assert d.state is JobState.REQUESTED
    assert len(d.launches()) == MAX_THROTTLED_LAUNCHES
    assert len({(e.placement, e.client_token) for e in d.launches()}) == 1
    _throttle(d, t + 1)
    assert d.state is JobState.FAILED
    assert d.job is not None and d.job.reason is not None
    assert f"{MAX_THROTTLED_LAUNCHES} times in a row" in d.job.reason
    assert THROTTLED in d.job.reason
    d.apply(ReconcileTick(at(t + 1000)), t + 1000)
    assert len(d.launches()) == MAX_THROTTLED_LAUNCHES  # nothing more


class FlakyEc2:
    """RunInstances throttled `throttles` times, then launched."""

    def __init__(self, throttles: int) -> None:
        self.throttles = throttles
        self.tokens: list[str] = []

    def run_instances(self, **kwargs: Any) -> dict[str, Any]:
        self.tokens.append(kwargs["ClientToken"])
        if self.throttles:
            self.throttles -= 1
            raise ClientError(
                {"Error": {"Code": THROTTLED, "Message": "Request limit exceeded."}},
                "RunInstances",
            )
        return {
            "Instances": [{"InstanceId": "i-1", "Placement": {"AvailabilityZone": "us-east-1a"}}]
        }

    def describe_spot_price_history(self, **kwargs: Any) -> dict[str, Any]:
        return {"SpotPriceHistory": []}


def _launch_effect() -> LaunchInstance:
    d = Driver()
    d.apply(Submitted(submission()))
    return d.launches()[-1]


def test_the_capacity_adapter_backs_off_on_a_throttle_with_the_same_token() -> None:
    slept: list[float] = []
    ec2 = FlakyEc2(throttles=len(THROTTLE_BACKOFF))
    capacity = Ec2Capacity(launch_template_id="lt-1", client=ec2, sleep=slept.append)
    effect = _launch_effect()
    result = capacity.launch(effect)
    assert isinstance(result, CapacityLaunched) and result.instance_id == "i-1"
    assert ec2.tokens == [effect.client_token] * (len(THROTTLE_BACKOFF) + 1)
    assert len(slept) == len(THROTTLE_BACKOFF)
    assert all(b / 2 <= s <= b for s, b in zip(slept, THROTTLE_BACKOFF, strict=True))
    # throttled beyond the bound: the lifecycle hears of it (and retries later)
    slept.clear()
    ec2 = FlakyEc2(throttles=len(THROTTLE_BACKOFF) + 1)
    capacity = Ec2Capacity(launch_template_id="lt-1", client=ec2, sleep=slept.append)
    result = capacity.launch(effect)
    assert isinstance(result, CapacityUnavailable) and result.error_code == THROTTLED
    assert len(slept) == len(THROTTLE_BACKOFF)


def test_an_unauthorized_launch_is_retried_a_bounded_number_of_times_with_the_reason() -> None:
    # A deploy that picks a new AMI: IAM names the new image before the functions launch the
    # new template version. The same pool is asked again after each launch timeout.
    assert launch_error_kind("UnauthorizedOperation") == "unauthorized"
    d = Driver()
    d.apply(Submitted(submission()))
    first = d.launches()[-1]
    t = 1.0
    for n in range(1, MAX_UNAUTHORIZED_LAUNCHES):
        last = d.launches()[-1]
        d.apply(
            CapacityUnavailable(last.attempt, last.client_token, "UnauthorizedOperation", "no"), t
        )
        assert d.state is JobState.REQUESTED, n
        t += SETTINGS.launch_timeout.total_seconds()
        d.apply(ReconcileTick(at(t)), t)
        assert d.launches()[-1].placement == first.placement
    assert d.job is not None and d.job.current is not None and d.job.current.tried == []
    # the deploy finished in time: the next launch succeeds
    ok = d.launches()[-1]
    d.apply(CapacityLaunched(ok.attempt, ok.client_token, "i-1", "sir-1", None, 0.3), t + 1)
    assert d.job.current.instance_id == "i-1"


def test_an_unauthorized_launch_fails_the_job_at_the_bound_with_aws_text() -> None:
    d = Driver()
    d.apply(Submitted(submission()))
    t = 1.0
    for _ in range(MAX_UNAUTHORIZED_LAUNCHES):
        last = d.launches()[-1]
        d.apply(
            CapacityUnavailable(
                last.attempt, last.client_token, "UnauthorizedOperation", "Encoded message: x"
            ),
            t,
        )
        t += SETTINGS.launch_timeout.total_seconds()
        d.apply(ReconcileTick(at(t)), t)
    assert d.state is JobState.FAILED
    assert len(d.launches()) == MAX_UNAUTHORIZED_LAUNCHES
    assert d.job is not None and d.job.reason is not None
    assert "UnauthorizedOperation: Encoded message: x" in d.job.reason
    assert f"{MAX_UNAUTHORIZED_LAUNCHES} times in a row" in d.job.reason
