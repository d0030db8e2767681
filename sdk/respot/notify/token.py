"""The Slack bot token, read from AWS Secrets Manager once per container and cached briefly.

The stack creates the secret (`<prefix>/slack`) with `{"bot_token": ""}`; the platform team
puts the token in (docs/slack.md). A plain string secret holding the token is accepted too.
No secret, an empty token or a secret that does not exist: notifications are off (logged
once per cache period); anything else Secrets Manager says is raised, so the message is
retried rather than dropped.
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
    from mypy_boto3_secretsmanager import SecretsManagerClient

log = logging.getLogger("respot.notify")

TOKEN_TTL_SECONDS = 300.0  # a rotated token is picked up within five minutes
TOKEN_KEY = "bot_token"  # noqa: S105 - the JSON key of the secret, not a secret
_MISSING = ("ResourceNotFoundException",)


class SlackTokenSource:
    """`get()` returns the bot token, or None when Slack notifications are off."""

    def __init__(
        self,
        secret_arn: str | None,
        client: SecretsManagerClient | Any = None,
        *,
        ttl_seconds: float = TOKEN_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.secret_arn = secret_arn
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
        """Forget the cached token: the next `get()` reads the secret again."""
        with self._lock:
            self._read_at = None

    def _read(self) -> str | None:
        if not self.secret_arn:
            log.warning("Slack notifications are off: no Slack secret is configured")
            return None
        if self._client is None:
            import boto3

            self._client = boto3.client("secretsmanager")
        try:
            value = self._client.get_secret_value(SecretId=self.secret_arn)
        except ClientError as exc:
            if exc.response["Error"]["Code"] in _MISSING:
                log.warning(
                    "Slack notifications are off: secret %s does not exist", self.secret_arn
                )
                return None
            raise
        token = _token_of(str(value.get("SecretString") or ""))
        if not token:
            log.warning(
                "Slack notifications are off: secret %s holds no bot token (docs/slack.md)",
                self.secret_arn,
            )
        return token


def _token_of(secret: str) -> str | None:
    text = secret.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:
            return None
        token = data.get(TOKEN_KEY) if isinstance(data, dict) else None
        return str(token).strip() or None if token else None
    return text or None
