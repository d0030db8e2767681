"""Secrets by reference: the spec carries ARNs; the value is read on the instance only."""

from __future__ import annotations

import json
import secrets as random
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest

from lambdas import commands
from respot.agent.exceptions import SetupError
from respot.agent.secrets import resolve_secrets
from respot.exceptions import SpecError
from respot.spec.training import validate_spec
from respot.wire.messages import JobSubmission
from tests.handlers.test_handlers import CONTEXT, Env
from tests.security.test_hostile_handlers import _stored_spec

ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:respot/jobs/wandb-AbCdEf"


@pytest.mark.parametrize(
    ("secrets", "problem"),
    [
        ({"WANDB_KEY": "hunter2"}, "must be a Secrets Manager ARN"),
        ({"WANDB_KEY": ARN + "\n"}, "must be a Secrets Manager ARN"),
        ({"AWS_SECRET_ACCESS_KEY": ARN}, "not an environment variable name you may set"),
        ({"1X": ARN}, "not an environment variable name"),
    ],
)
def test_secrets_must_be_references(secrets: dict[str, str], problem: str) -> None:
    with pytest.raises(SpecError) as err:
        validate_spec({"name": "x", "entry_point": "a.b:C", "secrets": secrets})
    assert any(p.startswith("secrets") and problem in p for p in err.value.problems)


def test_a_name_is_an_environment_value_or_a_secret_not_both() -> None:
    with pytest.raises(SpecError, match="WANDB_KEY: set each in environment or in secrets"):
        validate_spec(
            {
                "name": "x",
                "entry_point": "a.b:C",
                "environment": {"WANDB_KEY": "x"},
                "secrets": {"WANDB_KEY": ARN},
            }
        )


def test_the_agent_resolves_the_values(moto_endpoint: str, aws_credentials: None) -> None:
    client = boto3.client("secretsmanager", endpoint_url=moto_endpoint, region_name="us-east-1")
    name = f"respot/jobs/wandb-{random.token_hex(3)}"
    arn = client.create_secret(Name=name, SecretString="s3cr3t-value")["ARN"]
    asked: list[str | None] = []

    def client_in(region: str | None) -> Any:
        asked.append(region)
        return client

    assert resolve_secrets(client_in, {"WANDB_KEY": arn}) == {"WANDB_KEY": "s3cr3t-value"}
    assert asked == ["us-east-1"]  # a client of the ARN's region (respot.agent.regional)
    missing = arn.replace("wandb", "nope")
    with pytest.raises(SetupError) as err:
        resolve_secrets(client_in, {"OTHER": missing})
    assert "secrets.OTHER: cannot read" in str(err.value) and "s3cr3t" not in str(err.value)


def test_only_the_reference_is_stored(env: Env) -> None:
    sub = JobSubmission(
        job_id=f"job-{random.token_hex(4)}",
        spec=validate_spec({"name": "x", "entry_point": "a.b:C", "secrets": {"WANDB_KEY": ARN}}),
        submitted_at=datetime.now(UTC),
    )
    commands.handler(env.sqs_event(env.sns_envelope(sub.model_dump_json(), "submit")), CONTEXT)
    item: dict[str, Any] = env.clients["dynamodb"].get_item(
        TableName=env.local.table_name, Key={"pk": {"S": f"JOB#{sub.job_id}"}, "sk": {"S": "JOB"}}
    )["Item"]
    assert ARN in json.dumps(item)
    assert json.loads(_stored_spec(env, sub.job_id))["spec"]["secrets"] == {"WANDB_KEY": ARN}
