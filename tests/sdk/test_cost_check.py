"""`respot run --check` prints the job's cost estimate by its deadline (issue 26): spot prices
read with EC2's DescribeSpotPriceHistory (here moto's answer, the documented shape), on-demand
from respot's list; it submits, uploads and launches nothing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from moto import mock_aws
from typer.testing import CliRunner

from respot.cli import app, jobs
from respot.client.costcheck import check_cost, spot_prices
from respot.core.cost import on_demand_price
from respot.spec.training import TrainingEnvVar


class OnlyEc2:
    """A connection that hands out EC2 alone: any other client (SNS, S3, DynamoDB) fails."""

    def __init__(self, ec2: Any) -> None:
        self.ec2 = ec2
        self.deployment = SimpleNamespace(region="us-east-1", instance_types=None)
        self.session = SimpleNamespace(region_name="us-east-1")

    def client(self, service: str) -> Any:
        assert service == "ec2", f"--check asked for {service}"
        return self.ec2


def test_spot_prices_are_read_per_zone_and_bound_the_estimate() -> None:
    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        prices = spot_prices(ec2, ["g5.xlarge"])
        assert prices["g5.xlarge"] and all(p > 0 for p in prices["g5.xlarge"])
        spec = TrainingEnvVar(
            name="x",
            entry_point="a.b:C",
            instance_types=["g5.xlarge"],
            estimated_runtime=timedelta(hours=1),
            deadline=datetime.now(UTC) + timedelta(hours=5),
        )
        e, quotes = check_cost(spec, ["g5.xlarge"], ec2)
    (q,) = quotes
    assert q.spot_low == min(prices["g5.xlarge"]) and q.on_demand == on_demand_price("g5.xlarge")
    assert e.spot_usd == pytest.approx(1.1 * min(prices["g5.xlarge"]))
    assert e.on_demand_usd == pytest.approx(1.1 * (q.on_demand or 0))
    assert e.worst_usd is not None and e.worst_usd >= e.on_demand_usd


def test_run_check_prints_the_bounds_and_their_sources_and_spends_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = tmp_path / "job.yaml"
    deadline = (datetime.now(UTC) + timedelta(hours=8)).isoformat()
    job.write_text(
        "name: x\nentry_point: a.b:C\ninstance_types: [g5.xlarge, g4dn.xlarge]\n"
        f"estimated_runtime: 2h\ndeadline: '{deadline}'\n"
    )
    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        monkeypatch.setattr(jobs, "connect", lambda local: OnlyEc2(ec2))
        shown = CliRunner().invoke(app, ["run", str(job), "--check", "--json"])
        assert shown.exit_code == 0, shown.output
        est = json.loads(shown.stdout)["cost_estimate"]
        human = CliRunner().invoke(app, ["run", str(job), "--check"])
        # AND nothing was launched
        assert ec2.describe_instances()["Reservations"] == []
    assert est["spot_usd"] is not None and est["on_demand_usd"] is not None
    assert est["on_demand_type"] == "g5.xlarge"  # the dearer list price
    assert est["spot_usd"] <= est["on_demand_usd"] <= est["worst_by_deadline_usd"]
    assert est["spot_prices"].startswith("EC2 DescribeSpotPriceHistory now, us-east-1")
    assert "on_demand_prices.json" in est["on_demand_prices"]
    assert human.exit_code == 0, human.output
    assert "cost estimate (nothing submitted, nothing spent)" in human.stdout
    assert "on-demand (spot never comes)" in human.stdout and "g5.xlarge" in human.stdout


def test_run_check_without_a_deployment_says_the_spot_bound_is_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from respot.exceptions import DeploymentNotFoundError

    def nowhere(local: bool) -> Any:
        raise DeploymentNotFoundError("no deployment found")

    job = tmp_path / "job.yaml"
    job.write_text(
        "name: x\nentry_point: a.b:C\ninstance_types: [g5.xlarge]\nestimated_runtime: 1h\n"
    )
    monkeypatch.setattr(jobs, "connect", nowhere)
    shown = CliRunner().invoke(app, ["run", str(job), "--check", "--json"])
    assert shown.exit_code == 0, shown.output
    est = json.loads(shown.stdout)["cost_estimate"]
    assert est["spot_usd"] is None and est["spot_prices"] is None
    assert est["on_demand_usd"] == pytest.approx(1.1 * (on_demand_price("g5.xlarge") or 0))
    assert any("no deployment reached (no deployment found)" in n for n in est["notes"])
