"""The account's launch pacing bucket in DynamoDB (issue 26): handlers racing for tokens never
launch faster than the rate (burst + rate x elapsed), and duplicates of one launch never take
two tokens. Real conditional writes (moto's DynamoDB); the race is forced: every handler
reads the bucket before any of them writes."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from respot.aws.pacing import Grant, LaunchPacer, Pacing, refill
from respot.control.config import ConfigError, _launch_pacing, parse_launch_pacing

TABLE = "respot-pacing-test"
# Without reservations (max_reserve_seconds=0): a launch without a token takes nothing.
PACING = Pacing(rate_per_second=2.0, burst=5, max_wait_seconds=0.0, max_reserve_seconds=0.0)
# With them (the default): it reserves the next token not yet promised.
RESERVING = Pacing(rate_per_second=2.0, burst=5, max_wait_seconds=0.0)


@pytest.fixture
def dynamodb() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(
            TableName=TABLE,
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        yield client


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class ReadsTogether:
    """A DynamoDB client whose first read of each item by each handler waits until every
    handler has read it: all see the same marker (none) and the same bucket version.

    Its writes go one at a time: DynamoDB applies each conditional write atomically, which
    moto's in-process backend does not do across threads; the race under test is the one
    between each handler's read and its write."""

    def __init__(self, client: Any, handlers: int) -> None:
        self.client = client
        self.barriers: dict[str, threading.Barrier] = {}
        self.handlers = handlers
        self.seen = threading.local()
        self.atomic = threading.Lock()
        self.lock = threading.Lock()

    def get_item(self, **kwargs: Any) -> Any:
        item = self.client.get_item(**kwargs)
        kind = "bucket" if kwargs["Key"]["pk"]["S"] == "PACING#launches" else "marker"
        seen = getattr(self.seen, "kinds", set())
        if kind not in seen:
            self.seen.kinds = seen | {kind}
            with self.lock:
                barrier = self.barriers.setdefault(
                    kind, threading.Barrier(self.handlers, timeout=30)
                )
            barrier.wait()
        return item

    def put_item(self, **kwargs: Any) -> Any:
        with self.atomic:
            return self.client.put_item(**kwargs)


def _race(client: Any, clock: Clock, launch_ids: list[str]) -> list[bool]:
    return [g.granted for g in _race_grants(client, clock, launch_ids, PACING)]


def _race_grants(
    client: Any, clock: Clock, launch_ids: list[str], pacing: Pacing
) -> list[Grant | None]:
    racing = ReadsTogether(client, len(launch_ids))
    grants: list[Grant | None] = [None] * len(launch_ids)

    def handler(i: int) -> None:
        grants[i] = LaunchPacer(TABLE, racing, pacing, clock=clock).take(launch_ids[i])

    threads = [threading.Thread(target=handler, args=(i,)) for i in range(len(launch_ids))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return grants


def test_concurrent_launches_never_exceed_the_rate(dynamodb: Any) -> None:
    clock = Clock()
    # GIVEN 12 handlers launching at the same instant (a reclaim of 12 jobs), bucket of 5
    first = _race(dynamodb, clock, [f"launch-{i}" for i in range(12)])
    # THEN exactly the burst is granted, the others are paced
    assert sum(first) == PACING.burst
    # WHEN 2.5 s pass (5 tokens at 2/s) and 12 more race
    clock.now += 2.5
    second = _race(dynamodb, clock, [f"later-{i}" for i in range(12)])
    # THEN no more than the refill: burst + rate x elapsed over the whole run
    assert sum(first) + sum(second) <= PACING.burst + PACING.rate_per_second * 2.5
    assert sum(second) == 5


def test_a_duplicate_launch_never_takes_a_second_token(dynamodb: Any) -> None:
    clock = Clock()
    pacer = LaunchPacer(TABLE, dynamodb, PACING, clock=clock)
    # GIVEN one launch granted WHEN the same launch comes again (a redelivered event)
    assert pacer.take("tok-A").granted
    again = pacer.take("tok-A")
    # THEN it is let through as a duplicate, taking nothing
    assert again.granted and again.duplicate
    assert _tokens(dynamodb) == pytest.approx(PACING.burst - 1)
    # WHEN two copies of a new launch race with another launch, all reading before any writes
    raced = _race(dynamodb, clock, ["tok-C", "tok-C", "tok-D"])
    # THEN all go on, and tok-C holds one token, tok-D one: the copy's token went back
    assert raced == [True, True, True]
    assert _tokens(dynamodb) == pytest.approx(PACING.burst - 3)


def _tokens(client: Any) -> float:
    item = client.get_item(
        TableName=TABLE, Key={"pk": {"S": "PACING#launches"}, "sk": {"S": "PACING"}}
    )["Item"]
    return float(item["tokens"]["N"])


def test_a_paced_take_says_when_the_next_token_is_due(dynamodb: Any) -> None:
    clock = Clock()
    pacer = LaunchPacer(TABLE, dynamodb, PACING, clock=clock)
    for i in range(PACING.burst):
        assert pacer.take(f"t{i}").granted
    grant = pacer.take("late")
    assert not grant.granted and grant.wait == pytest.approx(0.5)
    # AND a handler allowed to wait that long gets it after waiting (its own sleep)
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        clock.now += s

    patient = LaunchPacer(
        TABLE, dynamodb, Pacing(2.0, 5, max_wait_seconds=1.0), clock=clock, sleep=sleep
    )
    assert patient.take("late").granted and slept == [pytest.approx(0.5)]


def test_refill_is_capped_and_a_clock_going_back_adds_nothing() -> None:
    assert refill(0.0, 100.0, 110.0, PACING) == PACING.burst
    assert refill(1.0, 100.0, 90.0, PACING) == 1.0
    assert refill(0.0, 100.0, 101.0, PACING) == 2.0


def test_bad_settings_name_the_field() -> None:
    assert parse_launch_pacing(None) == Pacing()
    assert parse_launch_pacing({"rate_per_second": 3, "burst": 20}) == Pacing(3.0, 20)
    for bad, field in (
        ({"rate_per_second": 0}, "launch_pacing.rate_per_second"),
        ({"burst": 0}, "launch_pacing.burst"),
        ({"burst": 2.5}, "launch_pacing.burst"),
        ({"rate": 1}, "unknown field(s) rate"),
    ):
        with pytest.raises(ValueError, match=field.replace("(", r"\(").replace(")", r"\)")):
            parse_launch_pacing(bad)
    with pytest.raises(ConfigError, match=r"RESPOT_LAUNCH_PACING: launch_pacing\.burst"):
        _launch_pacing('{"burst": -1}')


def test_launches_without_a_token_reserve_the_next_ones_in_turn(dynamodb: Any) -> None:
    clock = Clock()
    t0 = clock.now
    # GIVEN 12 handlers launching at the same instant, a bucket of 5 at 2 a second
    ids = [f"launch-{i}" for i in range(12)]
    grants = _race_grants(dynamodb, clock, ids, RESERVING)
    assert all(g is not None for g in grants)
    granted = [i for i, g in zip(ids, grants, strict=True) if g and g.granted]
    reserved = {i: g.wait for i, g in zip(ids, grants, strict=True) if g and not g.granted}
    # THEN the burst goes now, and each of the 7 others holds its own token, due one after
    # another at the rate (0.5 s apart): no two wait for the same token
    assert len(granted) == PACING.burst
    assert all(g is not None and g.reserved for g in grants if g and not g.granted)
    assert sorted(reserved.values()) == pytest.approx([0.5 * k for k in range(1, 8)])
    pacer = LaunchPacer(TABLE, dynamodb, RESERVING, clock=clock)
    through = len(granted)
    for launch, wait in sorted(reserved.items(), key=lambda kv: kv[1]):
        # a take just before its token is due still waits (and takes nothing)
        clock.now = t0 + wait - 0.01
        early = pacer.take(launch)
        assert not early.granted and early.reserved and early.wait == pytest.approx(0.01)
        # from the moment it is due, it goes, taking nothing more
        clock.now = t0 + wait
        now = pacer.take(launch)
        assert now.granted and now.duplicate
        through += 1
        assert through <= PACING.burst + PACING.rate_per_second * (clock.now - t0)
    # AND a new launch then queues behind them all: its token is the next one
    late = pacer.take("new")
    assert not late.granted and late.reserved and late.wait == pytest.approx(0.5)
    assert _tokens(dynamodb) == pytest.approx(-1.0)


def test_a_token_further_off_than_max_reserve_is_not_promised(dynamodb: Any) -> None:
    clock = Clock()
    pacer = LaunchPacer(
        TABLE, dynamodb, Pacing(2.0, 5, max_wait_seconds=0.0, max_reserve_seconds=1.0), clock=clock
    )
    for i in range(PACING.burst):
        assert pacer.take(f"t{i}").granted
    # two reservations fit in the next second
    assert [pacer.take(f"r{i}").wait for i in range(2)] == pytest.approx([0.5, 1.0])
    # the third would be 1.5 s off: paced without a promise, taking nothing
    far = pacer.take("far")
    assert not far.granted and not far.reserved and far.wait == pytest.approx(1.5)
    assert _tokens(dynamodb) == pytest.approx(-2.0)
