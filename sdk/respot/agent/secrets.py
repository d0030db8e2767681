"""Secrets by reference: `secrets: {NAME: <Secrets Manager ARN>}` resolved on the instance.

The spec, the job record, `submission.json`, the logs and Slack only ever hold the ARN; the
value is read here, on the instance, with the instance role (which may read only secrets
named `respot/jobs/...` in the home region, see `JOB_SECRET_PREFIX`), through a client of the
region the ARN names (so an instance in a satellite region reads the home region's secret;
`respot.agent.regional`), and goes straight into the session's environment. Errors name the
variable and the ARN, never a value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from respot.agent.exceptions import SetupError
from respot.spec.names import JOB_SECRET_PREFIX, arn_region


def resolve_secrets(
    client_in: Callable[[str | None], Any], secrets: Mapping[str, str]
) -> dict[str, str]:
    """{NAME: value} for every {NAME: ARN}; `SetupError` naming the one that failed.

    `client_in(region)` is a Secrets Manager client in `region` (the ARN's).
    """
    values: dict[str, str] = {}
    for name, arn in secrets.items():
        try:
            answer = client_in(arn_region(arn)).get_secret_value(SecretId=arn)
        except Exception as exc:
            code = getattr(exc, "response", {}).get("Error", {}).get("Code", type(exc).__name__)
            raise SetupError(
                f"secrets.{name}: cannot read {arn} ({code}); a job reads only "
                f"secrets named {JOB_SECRET_PREFIX}... in this account and its home region"
            ) from None
        value = answer.get("SecretString")
        if not isinstance(value, str):
            raise SetupError(f"secrets.{name}: {arn} has no text value (binary secrets: no)")
        if "\x00" in value:
            raise SetupError(f"secrets.{name}: the value of {arn} contains a NUL byte")
        values[name] = value
    return values
