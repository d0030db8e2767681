"""The Slack bot token, read from SSM Parameter Store once per container and cached briefly.

The token is a SecureString parameter (standard tier: no charge; encrypted under KMS, by
default the account's `aws/ssm` key) that the platform team creates with `aws ssm
put-parameter --type SecureString` (CloudFormation cannot create SecureString parameters;
docs/deploy.md). The stack only names it: functions get the parameter's name, never its
value, and read it with decryption. A plain token is expected; `{"bot_token": "xoxb-..."}`
is accepted too. No parameter name, a parameter that does not exist or an empty token:
notifications are off (logged once per cache period); anything else SSM or KMS says is
raised, so the message is retried rather than dropped.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from mypy_boto3_ssm import SSMClient

log = logging.getLogger("respot.notify")

TOKEN_TTL_SECONDS = 300.0  # a rotated token is picked up within five minutes
TOKEN_KEY = "bot_token"  # noqa: S105 - a JSON key, not a secret
_MISSING = ("ParameterNotFound",)


class SlackTokenSource:
    """`get()` returns the bot token, or None when Slack notifications are off."""

    def __init__(
        self,
        parameter_name: str | None,
        client: SSMClient | Any = None,
        *,
        ttl_seconds: float = TOKEN_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.parameter_name = parameter_name
        self._client = client
        self.ttl_seconds = ttl_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._token: str | None = None
        self._read_at: float | None = None

    def get(self) -> str | None:
        """The token (cached for `ttl_seconds`), or None if there is none."""
        with self._lock:
            now = self._clock()
            if self._read_at is None or now - self._read_at >= self.ttl_seconds:
                self._token = self._read()
                self._read_at = now
            return self._token

    def invalidate(self) -> None:
        """Forget the cached token: the next `get()` reads the parameter again."""
        with self._lock:
            self._read_at = None

    def _read(self) -> str | None:
        if not self.parameter_name:
            log.warning("Slack notifications are off: no Slack token parameter is configured")
            return None
        if self._client is None:
            import boto3

            self._client = boto3.client("ssm")
        try:
            value = self._client.get_parameter(Name=self.parameter_name, WithDecryption=True)
        except ClientError as exc:
            if exc.response["Error"]["Code"] in _MISSING:
                log.warning(
                    "Slack notifications are off: parameter %s does not exist (docs/slack.md)",
                    self.parameter_name,
                )
                return None
            raise
        token = token_of(str(value.get("Parameter", {}).get("Value") or ""))
        if not token:
            log.warning(
                "Slack notifications are off: parameter %s holds no bot token (docs/slack.md)",
                self.parameter_name,
            )
        return token


def token_of(value: str) -> str | None:
    """The bot token in a parameter's value: the value itself, or JSON's `bot_token`."""
    text = value.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:
            return None
        token = data.get(TOKEN_KEY) if isinstance(data, dict) else None
        return str(token).strip() or None if token else None
    return text or None
