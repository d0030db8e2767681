"""Lambda `credentials`: a job's instances get credentials for that job's objects alone.

Invoked synchronously by the agent (Lambda Invoke, which only the instance role may do on
this function); no queue or rule feeds it. The request carries an identity proof signed with
the instance role's credentials; `respot.credentials.broker` checks it (STS), that the
instance belongs to a live attempt of the job it names, and answers with `sts:AssumeRole`
credentials of the job role narrowed to `jobs/<job>/` by a session policy (of the home
bucket and, for an attempt in a satellite region, of that region's bucket). A refusal is
answered as `{"refused": <reason>}` (logged with the job id); STS being unreachable raises,
and the agent asks again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from lambdas._runtime import logger
from respot.credentials.broker import Broker, CredentialsRefusedError

_factory: Callable[[], Broker] | None = None
_broker: Broker | None = None


def install(factory: Callable[[], Broker] | None) -> None:
    """Use `factory` to build the broker from now on (None: from the environment)."""
    global _factory, _broker
    _factory, _broker = factory, None


def _from_env() -> Broker:
    import boto3

    from respot.aws.jobs import JobTable
    from respot.control.config import ENV_BUCKET, ENV_TABLE
    from respot.credentials.policy import (
        ENV_INSTANCE_ROLE_NAMES,
        ENV_JOB_ROLE_ARN,
        ENV_SATELLITE_BUCKETS,
    )
    from respot.identity.verify import Verifier

    table = os.environ[ENV_TABLE]
    dynamodb = boto3.client("dynamodb")
    role_arn = os.environ[ENV_JOB_ROLE_ARN]
    return Broker(
        verifier=Verifier.from_env(dynamodb=dynamodb, table=table),
        jobs=JobTable(table, dynamodb),
        sts=boto3.client("sts"),
        job_role_arn=role_arn,
        bucket=os.environ[ENV_BUCKET],
        instance_role_names=frozenset(
            n for n in os.environ[ENV_INSTANCE_ROLE_NAMES].split(",") if n
        ),
        partition=role_arn.split(":")[1],
        satellite_buckets=json.loads(os.environ.get(ENV_SATELLITE_BUCKETS) or "{}"),
    )


def broker() -> Broker:
    """The container's broker, built once."""
    global _broker  # noqa: PLW0603 - one per container
    if _broker is None:
        _broker = _factory() if _factory is not None else _from_env()
    return _broker


@logger.inject_lambda_context(clear_state=True)
def handler(event: Any, context: Any) -> dict[str, str]:
    """A credentials request -> the job's credentials, or `{"refused": reason}`."""
    text = event if isinstance(event, str) else json.dumps(event)
    try:
        vended = broker().vend(text, getattr(context, "aws_request_id", ""))
    except CredentialsRefusedError as exc:
        job = event.get("job_id") if isinstance(event, dict) else None
        logger.warning("credentials refused: %s", exc, extra={"job_id": str(job)[:100]})
        return {"refused": str(exc)[:1000]}
    job = event.get("job_id") if isinstance(event, dict) else None
    logger.info("credentials for job %s", job, extra={"job_id": str(job)[:100]})
    return vended.as_json()
