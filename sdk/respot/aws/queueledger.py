"""The team's queue's ledger in the job table, and what the account runs against its quotas.

Item: pk=QUEUE#ledger sk=QUEUE  version, doc (JSON: `LedgerState`). One item, so one
compare-and-set on `version` decides every admission: a pass that read version v may write
only v+1, so two passes never both spend the same quota room (docs/queue.md, "Why no job is
admitted twice"). It never carries `live`, so the live index does not list it.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from respot.core.job import Market
from respot.core.lifecycle import JOB_TAG
from respot.core.quotas import quota_for
from respot.exceptions import ConcurrentUpdateError
from respot.queue.budgets import AlertsSent, BudgetAlert, confirmed
from respot.queue.model import Lease, quota_key_of
from respot.queue.usage import Usage

log = logging.getLogger("respot.aws.queueledger")

_KEY = {"pk": {"S": "QUEUE#ledger"}, "sk": {"S": "QUEUE"}}
QUOTA_TTL_SECONDS = 300.0  # a quota's value is read again after this long


@dataclass
class LedgerState:
    """What the ledger holds: the leases of admitted jobs that have not ended, each
    researcher's settled recent use, and the limits an admin set (None: the stack's)."""

    version: int = 0
    leases: dict[str, Lease] = field(default_factory=dict)
    usage: dict[str, Usage] = field(default_factory=dict)
    settings: dict[str, Any] | None = None
    # What the last pass said of each held job: kind, reason, position, estimate (ISO or
    # None), for `respot queue`; and when it planned.
    waits: dict[str, dict[str, Any]] = field(default_factory=dict)
    planned_at: str | None = None
    # This month's spend and the budgets in force, by "researcher:<arn>" / "team:<name>"
    # (written by a pass when budgets are set; `respot budget` reads them).
    spend: dict[str, float] = field(default_factory=dict)
    budgets: dict[str, float] = field(default_factory=dict)
    queues: list[str] = field(default_factory=list)  # the named queues in force
    # The budget alerts of this month (`respot.queue.budgets.AlertsSent.to_doc`): claimed by
    # the pass's conditional write before any is sent (so one of two racing passes sends
    # it), pending until its queueing is confirmed (`confirm_alerts`), retried if it fails.
    alerts: dict[str, Any] = field(default_factory=dict)
    # Fair-share preemptions decided and not yet over: job id -> {"at", "reason"} (written by
    # the pass that decided them, before any job is stopped, so that a rival pass re-plans
    # with them counted; gone once the job's lease is released).
    preempting: dict[str, dict[str, str]] = field(default_factory=dict)


def _lease_doc(lease: Lease) -> dict[str, Any]:
    return {
        "researcher": lease.researcher,
        "team": lease.team,
        "quota_key": lease.quota_key,
        "vcpus": lease.vcpus,
        "gpus": lease.gpus,
        "admitted_at": lease.admitted_at.isoformat(),
        "queue": lease.queue,
        "ends_at": lease.ends_at.isoformat() if lease.ends_at else None,
        "loan_for": lease.loan_for,
    }


def _lease(job_id: str, doc: dict[str, Any]) -> Lease:
    return Lease(
        job_id=job_id,
        researcher=doc["researcher"],
        team=doc["team"],
        quota_key=doc["quota_key"],
        vcpus=int(doc["vcpus"]),
        gpus=int(doc["gpus"]),
        admitted_at=datetime.fromisoformat(doc["admitted_at"]),
        queue=doc.get("queue"),
        ends_at=datetime.fromisoformat(doc["ends_at"]) if doc.get("ends_at") else None,
        loan_for=doc.get("loan_for"),
    )


class QueueLedger:
    """Reads and writes the ledger item (compare-and-set on its version)."""

    def __init__(self, table_name: str, client: Any) -> None:
        self.table_name = table_name
        self.client = client

    def read(self) -> LedgerState:
        """The ledger as stored (strongly consistent); an empty one at version 0 if none."""
        item = self.client.get_item(TableName=self.table_name, Key=_KEY, ConsistentRead=True).get(
            "Item"
        )
        if not item:
            return LedgerState()
        doc = json.loads(item["doc"]["S"])
        return LedgerState(
            version=int(item["version"]["N"]),
            leases={k: _lease(k, v) for k, v in doc.get("leases", {}).items()},
            usage={
                r: Usage(float(u["gpu_hours"]), datetime.fromisoformat(u["at"]))
                for r, u in doc.get("usage", {}).items()
            },
            settings=doc.get("settings"),
            waits=doc.get("waits", {}),
            planned_at=doc.get("planned_at"),
            spend=doc.get("spend", {}),
            budgets=doc.get("budgets", {}),
            queues=doc.get("queues", []),
            alerts=doc.get("alerts", {}),
            preempting=doc.get("preempting", {}),
        )

    def write(self, state: LedgerState) -> LedgerState:
        """Write `state` if the stored version is still `state.version`; the state written.

        Raises `ConcurrentUpdateError` when another pass wrote first (read again, plan again)."""
        doc = {
            "leases": {k: _lease_doc(v) for k, v in state.leases.items()},
            "usage": {
                r: {"gpu_hours": u.gpu_hours, "at": u.at.isoformat()}
                for r, u in state.usage.items()
            },
            "settings": state.settings,
            "waits": state.waits,
            "planned_at": state.planned_at,
            "spend": state.spend,
            "budgets": state.budgets,
            "queues": state.queues,
            "alerts": state.alerts,
            "preempting": state.preempting,
        }
        item = {**_KEY, "version": {"N": str(state.version + 1)}, "doc": {"S": json.dumps(doc)}}
        if state.version == 0:
            condition: dict[str, Any] = {"ConditionExpression": "attribute_not_exists(pk)"}
        else:
            condition = {
                "ConditionExpression": "version = :v",
                "ExpressionAttributeValues": {":v": {"N": str(state.version)}},
            }
        try:
            self.client.put_item(TableName=self.table_name, Item=item, **condition)
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                raise ConcurrentUpdateError(
                    f"the queue ledger changed since version {state.version}"
                ) from exc
            raise
        return replace(state, version=state.version + 1)

    def confirm_alerts(self, alerts: list[BudgetAlert], attempts: int = 6) -> bool:
        """Budget alerts the pass that claimed them has queued: pending no more (each only if
        still that claim; `respot.queue.budgets.confirmed`), compare-and-set. False if the
        ledger kept changing: they stay pending and are sent again once `RETRY_AFTER` old
        (SQS's FIFO deduplication drops a repeat within five minutes)."""
        for _ in range(attempts):
            state = self.read()
            record = AlertsSent.from_doc(state.alerts)
            after = confirmed(record, alerts)
            if after == record:
                return True
            try:
                self.write(replace(state, alerts=after.to_doc()))
                return True
            except ConcurrentUpdateError:
                continue
        return False


class AccountUse:
    """The account's running and pending instances by quota key, and the quotas' values.

    Counts every instance (respot's and others'), so that admission leaves room for what it did
    not launch; `vcpus` per instance from its CPU options (cores x threads), else from
    DescribeInstanceTypes. Quota values are cached for `QUOTA_TTL_SECONDS`.
    """

    def __init__(self, ec2: Any, quotas: Any, clock: Any = time.monotonic) -> None:
        self.ec2 = ec2
        self.quotas = quotas
        self.clock = clock
        self._quota_cache: dict[str, tuple[float, float | None]] = {}
        self._type_vcpus: dict[str, int] = {}

    def instances(self) -> list[tuple[str, str | None, str, int]]:
        """(instance id, respot job id or None, quota key, vCPUs) of pending/running ones."""
        found = []
        paginator = self.ec2.get_paginator("describe_instances")
        for page in paginator.paginate(
            Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
        ):
            for reservation in page["Reservations"]:
                for inst in reservation["Instances"]:
                    itype = inst["InstanceType"]
                    market = (
                        Market.SPOT if inst.get("InstanceLifecycle") == "spot" else Market.ON_DEMAND
                    )
                    quota = quota_for(itype, market)
                    key = quota_key_of(market.value, quota.quota_class if quota else None, itype)
                    tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
                    found.append((inst["InstanceId"], tags.get(JOB_TAG), key, self._vcpus(inst)))
        return found

    def _vcpus(self, inst: dict[str, Any]) -> int:
        cpu = inst.get("CpuOptions") or {}
        if cpu.get("CoreCount") and cpu.get("ThreadsPerCore"):
            return int(cpu["CoreCount"]) * int(cpu["ThreadsPerCore"])
        return self.type_vcpus(inst["InstanceType"]) or 0

    def type_vcpus(self, instance_type: str) -> int | None:
        """The default vCPUs of an instance type (DescribeInstanceTypes), cached."""
        if instance_type not in self._type_vcpus:
            try:
                answer = self.ec2.describe_instance_types(InstanceTypes=[instance_type])
                info = answer["InstanceTypes"][0]
                self._type_vcpus[instance_type] = int(info["VCpuInfo"]["DefaultVCpus"])
            except Exception as exc:  # an unknown type counts nothing rather than fail a pass
                log.warning("could not read the vCPUs of %s: %s", instance_type, exc)
                return None
        return self._type_vcpus[instance_type]

    def quota_value(self, instance_type: str, market: Market) -> float | None:
        """The vCPU quota the type counts against (Service Quotas), or None if unknown."""
        quota = quota_for(instance_type, market)
        if quota is None or quota.code is None or self.quotas is None:
            return None
        cached = self._quota_cache.get(quota.code)
        if cached is not None and self.clock() - cached[0] < QUOTA_TTL_SECONDS:
            return cached[1]
        value: float | None
        try:
            try:
                answer = self.quotas.get_service_quota(ServiceCode="ec2", QuotaCode=quota.code)
            except ClientError as exc:
                # An account that never changed a quota may only have the default (as the
                # doctor reads it, respot.doctor.checks).
                if exc.response["Error"]["Code"] != "NoSuchResourceException":
                    raise
                answer = self.quotas.get_aws_default_service_quota(
                    ServiceCode="ec2", QuotaCode=quota.code
                )
            value = float(answer["Quota"]["Value"])
        except Exception as exc:  # unknown: admission does not gate on this quota
            log.warning("could not read quota %s: %s", quota.code, exc)
            value = None
        self._quota_cache[quota.code] = (self.clock(), value)
        return value
