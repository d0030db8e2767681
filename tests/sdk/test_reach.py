"""`run()` refuses a secret or an ECR image the deployment's instances may not read, before
any upload: it would otherwise launch, pay, and fail at setup on the instance (in the home
region and in every satellite region alike, whose instance role reads the home region's)."""

from __future__ import annotations

import pytest

from respot.client.deployment import Deployment
from respot.client.handle import run
from respot.exceptions import SpecError
from respot.spec.reach import unreachable
from respot.spec.training import TrainingEnvVar
from tests.sdk.test_allowed_types import NoAws

DEPLOYMENT = Deployment(
    topic_arn="arn:aws:sns:us-east-1:123456789012:t", table_name="t", bucket="b", region="us-east-1"
)
SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:respot/jobs/wandb-AbCdEf"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/team/train:1.4"


def spec(**fields: object) -> TrainingEnvVar:
    return TrainingEnvVar(name="x", entry_point="a.b:C", **fields)  # type: ignore[arg-type]


def test_the_home_region_s_secrets_and_registry_are_reachable() -> None:
    assert unreachable(spec(secrets={"K": SECRET}, image=IMAGE), DEPLOYMENT) == []
    assert (
        unreachable(spec(image="pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime"), DEPLOYMENT) == []
    )


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        (
            {"secrets": {"K": SECRET.replace("us-east-1", "eu-west-1")}},
            "secrets.K: arn:aws:secretsmanager:eu-west-1:123456789012:secret:respot/jobs/"
            "wandb-AbCdEf is in eu-west-1; respot's instances (in every region they run in) "
            "read secrets in us-east-1",
        ),
        (
            {"secrets": {"K": SECRET.replace("123456789012", "210987654321")}},
            "secrets.K: ",
        ),
        (
            {"secrets": {"K": SECRET.replace("respot/jobs/", "prod/")}},
            "secrets.K: respot's instances read only secrets named respot/jobs/...",
        ),
        (
            {"image": IMAGE.replace("us-east-1", "us-west-2")},
            "image: 123456789012.dkr.ecr.us-west-2.amazonaws.com/team/train:1.4 is in the ECR "
            "registry of 123456789012 in us-west-2; respot's instances pull only from "
            "123456789012.dkr.ecr.us-east-1.amazonaws.com",
        ),
        ({"image": IMAGE.replace("123456789012", "210987654321")}, "image: "),
    ],
)
def test_run_refuses_what_the_instances_cannot_read(fields: dict[str, object], said: str) -> None:
    with pytest.raises(SpecError) as exc:
        run(spec(**fields), deployment=DEPLOYMENT, session=NoAws())
    (problem,) = exc.value.problems
    assert problem.startswith(said), problem


def test_sweep_refuses_a_job_the_instances_cannot_read() -> None:
    from respot.sweep.client import sweep
    from tests.sweep.conftest import sweep_spec

    job = {"entry_point": "m:S", "secrets": {"K": SECRET.replace("us-east-1", "eu-west-1")}}
    with pytest.raises(SpecError) as exc:
        sweep(sweep_spec(job=job), deployment=DEPLOYMENT, session=NoAws())
    (problem,) = exc.value.problems
    assert problem.startswith("job.secrets.K: arn:aws:secretsmanager:eu-west-1:"), problem
