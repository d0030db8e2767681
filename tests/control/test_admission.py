"""The team's queue in the control plane (issue 26), on the moto server: held jobs are admitted
within the quota as room frees, two passes racing never spend the same room or admit a job
twice, `after:` fails a job whose dependency failed, and bad `queue:`/`after:` are refused.

The account's side (instances by quota, the quota's value) is a stand-in: moto has no Service
Quotas values for EC2; the ledger, the job records and the launches are the real ones.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lambdas import commands
from respot.aws.queueledger import LedgerState, QueueLedger
from respot.cli.queue import budget_view, queue_view
from respot.control.queuecommand import QueueSettingsCommand
from respot.control.service import ControlPlane
from respot.core.job import AttemptEnd, Market
from respot.core.quotas import quota_for
from respot.core.states import JobState
from respot.exceptions import NotOwnerError
from respot.queue.model import quota_key_of
from respot.wire.messages import CancelCommand
from tests.handlers.test_handlers import CONTEXT, Env, env, submission

__all__ = ["env"]

QUOTA_VCPUS = 8.0  # two g5.xlarge (4 vCPUs each)


class Account:
    """Instances the account runs and one quota value. The moto server is shared by every test
    of the session: only this deployment's instances are this account's."""

    def __init__(self, env: Env, *, sees_instances: bool = True) -> None:
        self.env = env
        self.sees_instances = sees_instances

    def instances(self) -> list[tuple[str, str | None, str, int]]:
        out: list[tuple[str, str | None, str, int]] = []
        if not self.sees_instances:
            return out
        mine = [{"Name": "tag:respot:managed", "Values": [self.env.local.name]}]
        for r in self.env.clients["ec2"].describe_instances(Filters=mine)["Reservations"]:
            for i in r["Instances"]:
                if i["State"]["Name"] in ("pending", "running"):
                    tags = {t["Key"]: t["Value"] for t in i.get("Tags", [])}
                    out.append((i["InstanceId"], tags.get("respot:job-id"), "spot/G and VT", 4))
        return out

    def quota_value(self, instance_type: str, market: Market) -> float | None:
        return QUOTA_VCPUS

    def type_vcpus(self, instance_type: str) -> int | None:
        return 4


@pytest.fixture
def queued(env: Env) -> Iterator[Env]:
    """The deployment with its queue on and a G-class spot quota of 8 vCPUs."""
    env.control.settings = replace(env.control.settings, admission=True)
    env.control.admission.enabled = True
    env.control.admission.account = Account(env)
    yield env


def _state(env: Env, job_id: str) -> JobState:
    record = env.control.jobs.get(job_id)
    assert record is not None
    return record.state


def _class_of(instance_type: str, market: Market) -> str | None:
    quota = quota_for(instance_type, market)
    return quota.quota_class if quota else None


def _admitted_notes(env: Env, job_id: str) -> int:
    record = env.control.jobs.get(job_id)
    assert record is not None
    return sum(1 for e in record.timeline if e.kind == "admitted")


def test_jobs_beyond_the_quota_wait_held_and_start_when_room_frees(queued: Env) -> None:
    env = queued
    # GIVEN three one-GPU jobs and room for two
    subs = [
        submission(instance_types=["g5.xlarge"], estimated_runtime=timedelta(hours=1))
        for _ in range(3)
    ]
    for sub in subs:
        env.control.submit(sub)
    states = [_state(env, s.job_id) for s in subs]
    # THEN the first two asked for capacity, the third is HELD and launched nothing
    assert states == [JobState.REQUESTED, JobState.REQUESTED, JobState.HELD]
    assert env.live_instances(subs[2].job_id) == []
    ledger = QueueLedger(env.local.table_name, env.clients["dynamodb"]).read()
    assert set(ledger.leases) == {subs[0].job_id, subs[1].job_id}
    # AND `respot queue` shows it first in line, waiting for the quota, starting when the
    # first admitted job's estimated hour is over
    held = env.control.jobs.get(subs[2].job_id)
    assert held is not None
    (row,) = queue_view([held], ledger, datetime.now(UTC))["held"]
    assert row["position"] == 1 and row["waits_for"] == "quota"
    assert "quota spot/G and VT: 0 of 8 vCPUs free" in row["reason"]
    first_end = min(lease.ends_at for lease in ledger.leases.values() if lease.ends_at)
    assert row["estimated_start"] == first_end.isoformat()
    # WHEN one of the running ones is cancelled (its lease frees room)
    env.control.cancel(CancelCommand(job_id=subs[0].job_id, requested_at=subs[0].submitted_at))
    # THEN the held one is admitted and launched, once
    assert _state(env, subs[2].job_id) is JobState.REQUESTED
    assert (
        len(env.live_instances(subs[2].job_id)) == 1 and _admitted_notes(env, subs[2].job_id) == 1
    )
    ledger = QueueLedger(env.local.table_name, env.clients["dynamodb"]).read()
    assert set(ledger.leases) == {subs[1].job_id, subs[2].job_id}
    # AND a tick with nothing new admits nothing and launches nothing more
    env.control.reconcile()
    assert _admitted_notes(env, subs[2].job_id) == 1 and len(env.instances(subs[2].job_id)) == 1


class RacingLedger(QueueLedger):
    """A ledger whose first read lets another control plane run a whole pass before it
    returns: the classic lost update, if the write were not conditional."""

    def __init__(self, inner: QueueLedger, rival: Any) -> None:
        super().__init__(inner.table_name, inner.client)
        self.rival = rival
        self.raced = False

    def read(self) -> LedgerState:
        state = super().read()
        if not self.raced:
            self.raced = True
            self.rival()
        return state


def test_two_passes_racing_never_exceed_the_quota_nor_admit_a_job_twice(queued: Env) -> None:
    env = queued
    # GIVEN four held jobs (the queue's first pass is kept from running) and room for two
    env.control._admitting = True
    subs = [submission(instance_types=["g5.xlarge"]) for _ in range(4)]
    for sub in subs:
        env.control.submit(sub)
    env.control._admitting = False
    assert {_state(env, s.job_id) for s in subs} == {JobState.HELD}
    # WHEN one pass reads the ledger, another whole pass runs, then the first goes on; and
    # neither sees the other's instances (DescribeInstances is eventually consistent: a just
    # launched instance may not be listed), so the ledger alone must keep the quota
    env.control.admission.account = Account(env, sees_instances=False)
    other = ControlPlane(
        jobs=env.control.jobs,
        capacity=env.control.capacity,
        s3=env.control.s3,
        bucket=env.control.bucket,
        settings=env.control.settings,
        admission=None,
    )
    other.admission.account = Account(env, sees_instances=False)
    real = env.control.admission.ledger
    env.control.admission.ledger = RacingLedger(real, lambda: other.admit("the rival"))
    env.control.admit("the first")
    # THEN exactly two jobs are admitted, each once, with one instance each
    admitted = [s.job_id for s in subs if _state(env, s.job_id) is not JobState.HELD]
    assert len(admitted) == 2
    assert all(_admitted_notes(env, j) == 1 for j in admitted)
    assert all(len(env.instances(j)) == 1 for j in admitted)
    assert set(real.read().leases) == set(admitted)


def test_after_a_failed_dependency_fails_the_job_with_the_reason(env: Env) -> None:
    # GIVEN (queue off) a job, and one of the same submitter that starts after it
    first = submission()
    env.control.submit(first)
    second = submission(after=[first.job_id])
    env.control.submit(second)
    assert _state(env, second.job_id) is JobState.HELD and env.instances(second.job_id) == []
    # WHEN the first is cancelled and the tick looks
    env.control.cancel(CancelCommand(job_id=first.job_id, requested_at=first.submitted_at))
    env.control.reconcile()
    # THEN the second failed, naming the first and how it ended
    record = env.control.jobs.get(second.job_id)
    assert record is not None and record.state is JobState.FAILED
    assert record.reason == f"after: job {first.job_id} ended CANCELLED, so this job cannot start"


def test_after_a_completed_dependency_the_job_is_admitted(env: Env) -> None:
    first = submission()
    env.control.submit(first)
    second = submission(after=[first.job_id])
    env.control.submit(second)
    # WHEN the first completes (its record says so) and the tick looks
    env.control.jobs.update(
        first.job_id,
        lambda r: r.model_copy(update={"state": JobState.COMPLETED}) if r else None,
    )
    env.control.reconcile()
    # THEN the second is admitted and asked for capacity
    assert _state(env, second.job_id) is JobState.REQUESTED
    assert len(env.live_instances(second.job_id)) == 1


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ({"queue": "nightly"}, "queue: 'nightly' is not a queue of this deployment"),
        ({"after": ["job-nobody-ran"]}, "after: job job-nobody-ran does not exist"),
    ],
)
def test_an_unknown_queue_or_after_is_refused_on_the_raw_message_path(
    env: Env, spec: dict[str, Any], said: str
) -> None:
    # GIVEN a raw submit message (the path every client's submission takes)
    sub = submission(**spec)
    response = commands.handler(
        env.sqs_event(env.sns_envelope(sub.model_dump_json(), "submit")), CONTEXT
    )
    assert response == {"batchItemFailures": []}
    # THEN the job is FAILED with the field and the fix, and nothing was launched
    record = env.control.jobs.get(sub.job_id)
    assert record is not None and record.state is JobState.FAILED
    assert record.reason is not None and said in record.reason
    assert env.instances(sub.job_id) == []


def test_after_naming_another_submitter_s_job_is_refused(env: Env) -> None:
    theirs = submission().model_copy(update={"submitted_by": "arn:aws:iam::1:user/bo"})
    env.control.submit(theirs)
    mine = submission(after=[theirs.job_id]).model_copy(
        update={"submitted_by": "arn:aws:iam::1:user/ann"}
    )
    env.control.submit(mine)
    record = env.control.jobs.get(mine.job_id)
    assert record is not None and record.state is JobState.FAILED
    assert f"after: job {theirs.job_id} is not yours" in (record.reason or "")


def test_the_stack_s_queue_setting_turns_admission_on_and_bad_ones_are_named() -> None:
    from respot.control.config import ENV_QUEUE, ConfigError, ControlPlaneConfig

    base = {
        "RESPOT_TABLE": "t",
        "RESPOT_BUCKET": "b",
        "RESPOT_LAUNCH_TEMPLATE_ID": "lt-1",
        "RESPOT_SUBNETS": "[]",
        "RESPOT_INSTANCE_TYPES": "g5.xlarge",
        "RESPOT_AGENT_QUEUE_URL": "q",
    }
    assert ControlPlaneConfig.from_env(base).settings().admission is False
    on = ControlPlaneConfig.from_env({**base, ENV_QUEUE: '{"enabled": true, "team_gpus": 8}'})
    assert on.settings().admission is True and on.queue_limits().team_gpus == 8
    with pytest.raises(ConfigError, match="RESPOT_QUEUE: team_gpus"):
        ControlPlaneConfig.from_env({**base, ENV_QUEUE: '{"team_gpus": "eight"}'})


def test_an_admin_s_new_limit_admits_at_once_and_no_one_else_may_change_it(queued: Env) -> None:
    env = queued
    admin = "arn:aws:iam::123456789012:role/platform"
    ann = "arn:aws:iam::123456789012:user/ann"

    def settings_from(who: str | None, settings: dict[str, Any]) -> QueueSettingsCommand:
        return QueueSettingsCommand(
            settings=settings, requested_at=datetime.now(UTC), requested_by=who
        )

    # GIVEN an admin's limit of one GPU per researcher, and two of ann's jobs
    env.control.set_queue_settings(
        settings_from(admin, {"enabled": True, "researcher_gpus": 1}), admins=(admin,)
    )
    subs = [
        submission(instance_types=["g5.xlarge"]).model_copy(update={"submitted_by": ann})
        for _ in range(2)
    ]
    for sub in subs:
        env.control.submit(sub)
    # THEN the second waits for the limit, and says so
    assert [_state(env, s.job_id) for s in subs] == [JobState.REQUESTED, JobState.HELD]
    said = QueueLedger(env.local.table_name, env.clients["dynamodb"]).read().waits
    assert said[subs[1].job_id]["kind"] == "limit"
    assert "researcher_gpus: " in said[subs[1].job_id]["reason"]
    # WHEN a researcher tries to raise it THEN it is refused, naming who may
    with pytest.raises(NotOwnerError, match="admin_principal_arns"):
        env.control.set_queue_settings(
            settings_from(ann, {"enabled": True, "researcher_gpus": 8}), admins=(admin,)
        )
    assert _state(env, subs[1].job_id) is JobState.HELD
    # WHEN the admin raises it (and names a queue) THEN the held job is admitted at once (no
    # tick), and `respot queue` lists the named queue
    env.control.set_queue_settings(
        settings_from(
            admin,
            {"enabled": True, "researcher_gpus": 2, "queues": {"serial": {"max_running": 1}}},
        ),
        admins=(admin,),
    )
    assert _state(env, subs[1].job_id) is JobState.REQUESTED
    ledger = QueueLedger(env.local.table_name, env.clients["dynamodb"]).read()
    assert queue_view([], ledger, datetime.now(UTC))["queues"] == ["serial"]


def test_a_settings_command_from_an_unverified_sender_is_dead_lettered(env: Env) -> None:
    command = QueueSettingsCommand(settings={"enabled": True}, requested_at=datetime.now(UTC))
    response = commands.handler(
        env.sqs_event(env.sns_envelope(command.model_dump_json(), "queue-settings")), CONTEXT
    )
    assert response == {"batchItemFailures": []}  # poison: to the dead-letter queue, not retried
    dlq = env.clients["sqs"].receive_message(
        QueueUrl=env.local.dlq_urls["commands"], MessageAttributeNames=["All"]
    )
    assert any("admin_principal_arns" in json.dumps(m) for m in dlq.get("Messages", []))
    assert QueueLedger(env.local.table_name, env.clients["dynamodb"]).read().settings is None


def test_a_researcher_over_budget_is_held_until_an_admin_raises_it(queued: Env) -> None:
    env = queued
    admin = "arn:aws:iam::123456789012:role/platform"
    ann = "arn:aws:iam::123456789012:user/ann"
    now = datetime.now(UTC)
    # GIVEN a finished job of ann's that billed one hour at $3.00 this month
    done = submission().model_copy(update={"submitted_by": ann})
    env.control.submit(done)
    record = env.control.jobs.get(done.job_id)
    assert record is not None and record.current is not None
    att = record.current.model_copy(
        update={
            "price_per_hour": 3.0,
            "launched_at": now - timedelta(hours=1),
            "ended_at": now,
            "end": AttemptEnd.COMPLETED,
        }
    )
    env.control.jobs.save(
        record.model_copy(
            update={"attempts": [att], "state": JobState.COMPLETED, "finished_at": now}
        ),
        expected_version=record.version,
    )
    # AND a monthly budget of $2 for ann
    env.control.set_queue_settings(
        QueueSettingsCommand(
            settings={"enabled": True, "researcher_budgets": {"ann": 2}},
            requested_at=now,
            requested_by=admin,
        ),
        admins=(admin,),
    )
    # WHEN ann submits another job THEN it is held for her budget, and `respot budget` says so
    nxt = submission().model_copy(update={"submitted_by": ann})
    env.control.submit(nxt)
    assert _state(env, nxt.job_id) is JobState.HELD
    ledger = QueueLedger(env.local.table_name, env.clients["dynamodb"]).read()
    assert ledger.waits[nxt.job_id]["kind"] == "budget"
    (row,) = [r for r in budget_view(ledger) if r["kind"] == "researcher"]
    assert row["spent_usd"] == 3.0 and row["budget_usd"] == 2.0 and row["held"]
    # WHEN the admin raises it THEN the job is admitted at once
    env.control.set_queue_settings(
        QueueSettingsCommand(
            settings={"enabled": True, "researcher_budgets": {"ann": 10}},
            requested_at=now,
            requested_by=admin,
        ),
        admins=(admin,),
    )
    assert _state(env, nxt.job_id) is JobState.REQUESTED


def test_respot_queue_lists_the_stack_s_named_queues(queued: Env) -> None:
    from respot.queue import NamedQueue, QueueLimits

    env = queued
    env.control.admission.limits = QueueLimits(queues={"nightly": NamedQueue(max_running=1)})
    env.control.admit("the tick")
    ledger = QueueLedger(env.local.table_name, env.clients["dynamodb"]).read()
    assert queue_view([], ledger, datetime.now(UTC))["queues"] == ["nightly"]


def test_an_admission_rewrites_only_the_waits_whose_news_it_changes(queued: Env) -> None:
    from respot.core.job import QUEUE_TOP

    env = queued
    # GIVEN room for two one-GPU jobs, both taken, and QUEUE_TOP + 5 jobs held behind them
    subs = [
        submission(instance_types=["g5.xlarge"], estimated_runtime=timedelta(hours=1))
        for _ in range(2 + QUEUE_TOP + 5)
    ]
    for sub in subs:
        env.control.submit(sub)

    def held() -> list[Any]:
        return [env.control.jobs.get(sub.job_id) for sub in subs[2:]]

    before = held()
    assert [r.queue_wait.position for r in before] == list(range(1, QUEUE_TOP + 6))
    # WHEN a running job is cancelled: the first held job is admitted, the others move up
    env.control.cancel(CancelCommand(job_id=subs[0].job_id, requested_at=subs[0].submitted_at))
    after = held()
    assert after[0].state is JobState.REQUESTED
    # THEN the records (and Slack cards) of those now within the first QUEUE_TOP places are
    # rewritten at once; those further back keep theirs until the refresh (no write, no edit)
    for old, new in zip(before[1:], after[1:], strict=True):
        place = old.queue_wait.position - 1
        assert (new.version != old.version) == (place <= QUEUE_TOP), place
        assert new.queue_wait.position == (place if place <= QUEUE_TOP else place + 1)
    # ... and `respot queue` (the ledger's plan) has every place fresh
    ledger = QueueLedger(env.local.table_name, env.clients["dynamodb"]).read()
    rows = queue_view(after[1:], ledger, datetime.now(UTC))["held"]
    assert sorted(row["position"] for row in rows) == list(range(1, QUEUE_TOP + 5))


def test_a_held_job_carries_the_queues_words_for_ls_status_and_slack(queued: Env) -> None:
    from respot.cli.jobs import queue_wait_json

    env = queued
    # GIVEN room for two one-GPU jobs and three submitted, the third HELD
    subs = [
        submission(instance_types=["g5.xlarge"], estimated_runtime=timedelta(hours=1))
        for _ in range(3)
    ]
    for sub in subs:
        env.control.submit(sub)
    held = env.control.jobs.get(subs[2].job_id)
    assert held is not None and held.state is JobState.HELD
    # THEN its record says what the ledger says of it: position, what it waits for, estimate
    ledger = QueueLedger(env.local.table_name, env.clients["dynamodb"]).read()
    (row,) = queue_view([held], ledger, datetime.now(UTC))["held"]
    said = queue_wait_json(held)
    assert said is not None
    for field in ("position", "waits_for", "reason", "estimated_start"):
        assert said[field] == row[field], field
    assert said["position"] == 1 and said["waits_for"] == "quota"
    assert held.timeline[-1].kind == "queue-wait"
    # WHEN ticks plan the same again THEN the record is not written again
    env.control.reconcile()
    env.control.reconcile()
    again = env.control.jobs.get(subs[2].job_id)
    assert again is not None and again.version == held.version
    # WHEN room frees THEN it is admitted and no longer carries a wait
    env.control.cancel(CancelCommand(job_id=subs[0].job_id, requested_at=subs[0].submitted_at))
    admitted = env.control.jobs.get(subs[2].job_id)
    assert admitted is not None and admitted.state is JobState.REQUESTED
    assert admitted.queue_wait is None and queue_wait_json(admitted) is None


def test_an_on_demand_job_waits_for_the_on_demand_quota_not_the_spot_one(queued: Env) -> None:
    env = queued
    # GIVEN two spot jobs that fill the G-class spot quota (8 vCPUs)
    spot = [
        submission(instance_types=["g5.xlarge"], estimated_runtime=timedelta(hours=1))
        for _ in range(2)
    ]
    for sub in spot:
        env.control.submit(sub)
    assert [_state(env, s.job_id) for s in spot] == [JobState.REQUESTED] * 2
    # WHEN a job with `market: on-demand` (respot notebook start --on-demand) comes
    od = submission(
        instance_types=["g5.xlarge"], estimated_runtime=timedelta(hours=1), market="on-demand"
    )
    env.control.submit(od)
    # THEN it is admitted against the on-demand quota, which has room, and asks on-demand
    assert _state(env, od.job_id) is JobState.REQUESTED
    ledger = QueueLedger(env.local.table_name, env.clients["dynamodb"]).read()
    assert ledger.leases[od.job_id].quota_key.startswith("on-demand/"), ledger.leases[od.job_id]
    record = env.control.jobs.get(od.job_id)
    assert record is not None and record.current is not None
    assert record.current.placement.market is Market.ON_DEMAND


def test_a_job_fallen_back_to_on_demand_counts_against_the_on_demand_quota(queued: Env) -> None:
    env = queued
    # GIVEN two spot jobs admitted: the spot quota (8 vCPUs) is full
    one_hour = timedelta(hours=1)
    fell, other = (
        submission(instance_types=["g5.xlarge"], estimated_runtime=one_hour) for _ in range(2)
    )
    env.control.submit(fell)
    env.control.submit(other)
    assert [_state(env, s.job_id) for s in (fell, other)] == [JobState.REQUESTED] * 2
    leases = QueueLedger(env.local.table_name, env.clients["dynamodb"]).read().leases
    spot = leases[fell.job_id].quota_key
    assert spot.startswith("spot/")
    on_demand = quota_key_of("on-demand", _class_of("g5.xlarge", Market.ON_DEMAND), "g5.xlarge")

    # AND the first one's instance now on-demand (its `max_spot_wait` passed), beside one
    # instance respot did not launch: the on-demand quota's 8 vCPUs are taken
    class FellBack(Account):
        def instances(self) -> list[tuple[str, str | None, str, int]]:
            return [
                ("i-fell-back", fell.job_id, on_demand, 4),
                ("i-spot", other.job_id, spot, 4),
                ("i-not-respots", None, on_demand, 4),
            ]

    env.control.admission.account = FellBack(env)
    # WHEN a job with `market: on-demand` comes
    od = submission(instance_types=["g5.xlarge"], estimated_runtime=one_hour, market="on-demand")
    env.control.submit(od)
    # THEN it waits: EC2 counts the fallen-back instance in the on-demand quota, and so does
    # admission (its lease followed it there)
    record = env.control.jobs.get(od.job_id)
    assert record is not None and record.state is JobState.HELD
    assert record.queue_wait is not None
    assert f"{on_demand}: 0 of 8 vCPUs free" in record.queue_wait.reason, record.queue_wait
    leases = QueueLedger(env.local.table_name, env.clients["dynamodb"]).read().leases
    assert leases[fell.job_id].quota_key == on_demand
    # AND the spot room it left is free: another researcher's spot job is admitted into it
    again = submission(instance_types=["g5.xlarge"], estimated_runtime=one_hour).model_copy(
        update={"submitted_by": "arn:aws:iam::123456789012:user/bo"}
    )
    env.control.submit(again)
    record = env.control.jobs.get(again.job_id)
    assert record is not None and record.state is JobState.REQUESTED, record.queue_wait


def test_a_jobs_second_instance_counts_beyond_its_lease(queued: Env) -> None:
    env = queued
    # GIVEN a spot job admitted (its lease: 4 vCPUs of the 8-vCPU spot quota)
    first = submission(instance_types=["g5.xlarge"], estimated_runtime=timedelta(hours=1))
    env.control.submit(first)
    assert _state(env, first.job_id) is JobState.REQUESTED
    spot = QueueLedger(env.local.table_name, env.clients["dynamodb"]).read().leases
    key = spot[first.job_id].quota_key

    # AND two instances of it running at once (a warm replacement beside the one it replaces)
    class Overlap(Account):
        def instances(self) -> list[tuple[str, str | None, str, int]]:
            return [("i-old", first.job_id, key, 4), ("i-warm", first.job_id, key, 4)]

    env.control.admission.account = Overlap(env)
    # WHEN another spot job comes THEN it waits: EC2 counts both instances, so does admission
    other = submission(instance_types=["g5.xlarge"], estimated_runtime=timedelta(hours=1))
    env.control.submit(other)
    assert _state(env, other.job_id) is JobState.HELD


def test_one_pass_admits_a_researcher_s_jobs_in_submission_order_whatever_the_table_lists(
    queued: Env,
) -> None:
    env = queued
    admin = "arn:aws:iam::123456789012:role/platform"
    ann = "arn:aws:iam::123456789012:user/ann"

    def limit(gpus: int) -> None:
        env.control.set_queue_settings(
            QueueSettingsCommand(
                settings={"enabled": True, "researcher_gpus": gpus},
                requested_at=datetime.now(UTC),
                requested_by=admin,
            ),
            admins=(admin,),
        )

    # GIVEN room for three in the quota, ann's limit of one GPU, one running job of hers and
    # two more held behind it
    class Roomy(Account):
        def quota_value(self, instance_type: str, market: Market) -> float | None:
            return 3 * 4

    env.control.admission.account = Roomy(env)
    limit(1)
    subs = [
        submission(instance_types=["g5.xlarge"]).model_copy(update={"submitted_by": ann})
        for _ in range(3)
    ]
    for sub in subs:
        env.control.submit(sub)
    assert [_state(env, s.job_id) for s in subs[1:]] == [JobState.HELD, JobState.HELD]
    # AND a job table that lists its live jobs in the opposite order of their submission
    jobs = env.control.admission.jobs
    listed = jobs.live_job_ids
    order = {s.job_id: n for n, s in enumerate(subs)}
    jobs.live_job_ids = lambda: sorted(  # type: ignore[method-assign]
        listed(), key=lambda j: -order.get(j, -1)
    )
    # WHEN the admin raises the limit to three GPUs (one pass admits both)
    limit(3)
    # THEN both held jobs were admitted, the earlier submission first
    records = [env.control.jobs.get(s.job_id) for s in subs[1:]]
    times = [r.admitted_at for r in records if r is not None and r.admitted_at]
    assert len(times) == 2 and times[0] < times[1], times
