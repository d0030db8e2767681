"""The self-test's verdict and figures from attempts, without a runtime (the e2e test in
tests/e2e/test_selftest_e2e.py runs it for real)."""

from __future__ import annotations

from typing import Any

import pytest

from respot.client.deployment import Deployment
from respot.core.job import Attempt, Market, Placement
from respot.selftest import Selftest, SelftestPlan, SelftestStoppedError, measure
from respot.selftest.experiment import duration_seconds, experiment_template
from respot.spec.training import validate_spec
from tests.core.factories import at


def attempt(number: int, **fields: Any) -> Attempt:
    placement = Placement(
        market=Market.SPOT,
        instance_type="g5.xlarge",
        subnet_id="subnet-1",
        availability_zone="us-east-1a",
    )
    return Attempt(number=number, placement=placement, client_token=f"t{number}", **fields)


def selftest() -> Selftest:
    deployment = Deployment(topic_arn="arn:aws:sns:us-east-1:1:t", table_name="t", bucket="b")
    return Selftest(deployment, fis=object())


OLD = dict(requested_at=at(0), instance_id="i-1", notice_at=at(100), last_step=57)


def test_the_changeover_figures_come_from_the_two_attempts() -> None:
    old = attempt(1, notice_checkpoint_at=at(101), checkpoint_step=57, **OLD)
    new = attempt(
        2,
        requested_at=at(100.05),
        launched_at=at(101),
        started_at=at(160),
        first_step_at=at(190),
        restored_step=57,
        restore_seconds=2.5,
    )
    old = old.model_copy(update={"last_step_at": at(104)})
    c = measure(old, new)
    assert (c.step_at_notice, c.checkpoint_step, c.resumed_from_step, c.lost_steps) == (
        57,
        57,
        57,
        0,
    )
    assert c.checkpointed_on_notice
    assert c.notice_to_replacement_requested_s == 0.05
    assert c.notice_to_replacement_launched_s == 1.0
    assert c.notice_to_training_resumed_s == 60.0 and c.restore_s == 2.5
    # the real boot's phases and the paused time, which the local runtime only models
    assert c.launched_to_agent_started_s == 59.0
    assert c.agent_started_to_first_step_s == 30.0
    assert c.paused_s == 86.0


@pytest.mark.parametrize(
    ("old_fields", "restored", "says"),
    [
        ({"checkpoint_step": 50}, 50, "wrote no checkpoint on the notice"),
        ({"notice_checkpoint_at": at(101), "checkpoint_step": 57}, None, "from scratch"),
        ({"notice_checkpoint_at": at(101), "checkpoint_step": 57}, 30, "not from the newest"),
    ],
)
def test_a_resume_that_lost_work_fails_the_selftest(
    old_fields: dict[str, Any], restored: int | None, says: str
) -> None:
    old = attempt(1, **old_fields, **OLD)
    new = attempt(2, requested_at=at(100), started_at=at(160), restored_step=restored)
    with pytest.raises(SelftestStoppedError, match=says):
        selftest()._verify(measure(old, new), record=None)  # type: ignore[arg-type]


def test_the_selftest_job_is_a_valid_spot_only_job_with_the_target_tag() -> None:
    spec = validate_spec(SelftestPlan(instance_types=("g4dn.xlarge",)).spec())
    assert spec.entry_point == "respot.selftest.session:SelftestSession"
    assert spec.tags == {"respot-selftest": "true"} and not spec.on_demand_fallback
    assert spec.max_runtime is not None and spec.source_dir is None


def test_the_experiment_targets_the_tag_the_job_carries() -> None:
    template = experiment_template("arn:aws:iam::1:role/fis", "Respot")
    (target,) = template["targets"].values()
    assert target["resourceTags"] == {"respot-selftest": "true", "respot:managed": "Respot"}
    assert duration_seconds("PT2M") == 120 and duration_seconds("PT2M30S") == 150
    with pytest.raises(ValueError, match="ISO 8601"):
        duration_seconds("2 minutes")
