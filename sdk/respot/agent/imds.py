"""A small IMDSv2 client: token first, then GETs with it; retries; 404 means absent."""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime

from respot.agent.exceptions import ImdsError

logger = logging.getLogger(__name__)

TOKEN_PATH = "/latest/api/token"  # noqa: S105 - a URL path, not a secret
TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aws-ec2-metadata-token"  # noqa: S105 - a header name
MAX_TOKEN_TTL_SECONDS = 21600
JOB_TAG = "respot:job-id"
ATTEMPT_TAG = "respot:attempt"
HANDOFF_TAG = "respot:await-handoff"


@dataclass(frozen=True)
class InstanceIdentity:
    """Who this instance is and which job and attempt it was launched for (from its tags)."""

    instance_id: str
    availability_zone: str
    region: str
    instance_type: str
    job_id: str | None
    attempt: int | None
    await_handoff: int | None


@dataclass(frozen=True)
class SpotInstanceAction:
    """An interruption notice: what EC2 will do and when (None if the time is unreadable)."""

    action: str
    time: datetime | None


class ImdsClient:
    """Reads instance metadata the IMDSv2 way."""

    def __init__(
        self,
        endpoint: str = "http://169.254.169.254",
        *,
        token_ttl_seconds: int = MAX_TOKEN_TTL_SECONDS,
        timeout_seconds: float = 2.0,
        attempts: int = 5,
        backoff_seconds: float = 0.2,
    ) -> None:
        if not endpoint.startswith(("http://", "https://")):
            raise ValueError(f"the IMDS endpoint must be an http(s) URL, not {endpoint!r}")
        self.endpoint = endpoint.rstrip("/")
        self.token_ttl_seconds = token_ttl_seconds
        self.timeout_seconds = timeout_seconds
        self.attempts = attempts
        self.backoff_seconds = backoff_seconds
        self._lock = threading.Lock()
        self._token: str | None = None
        self._token_expires = 0.0

    # ---- reading -----------------------------------------------------------------------------

    def get(self, path: str) -> str | None:
        """The text at `/latest/meta-data/<path>`, or None if it is absent (404)."""
        url = f"{self.endpoint}/latest/meta-data/{path.lstrip('/')}"
        last: Exception | None = None
        for attempt in range(self.attempts):
            token = self._current_token()
            try:
                return _http("GET", url, {TOKEN_HEADER: token}, self.timeout_seconds)
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    return None
                if exc.code == 401:
                    # The token expired or the service restarted: get a new one and retry.
                    self._drop_token(token)
                    last = exc
                    continue
                last = exc
            except (urllib.error.URLError, OSError, TimeoutError) as exc:
                last = exc
            time.sleep(min(self.backoff_seconds * 2**attempt, 2.0))
        raise ImdsError(f"IMDS GET {path} failed after {self.attempts} attempts: {last}")

    def identity(self) -> InstanceIdentity:
        """Instance id, zone, type and the respot tags (absent tags are None)."""

        def need(path: str) -> str:
            value = self.get(path)
            if not value:
                raise ImdsError(f"IMDS has no {path}")
            return value.strip()

        def number(tag: str) -> int | None:
            raw = self.get(f"tags/instance/{tag}")
            if raw is None or not raw.strip():
                return None
            try:
                return int(raw.strip())
            except ValueError:
                raise ImdsError(f"instance tag {tag}={raw!r} is not a number") from None

        job = self.get(f"tags/instance/{JOB_TAG}")
        zone = need("placement/availability-zone")
        region = (self.get("placement/region") or "").strip() or zone[:-1]
        return InstanceIdentity(
            instance_id=need("instance-id"),
            availability_zone=zone,
            region=region,
            instance_type=need("instance-type"),
            job_id=job.strip() if job and job.strip() else None,
            attempt=number(ATTEMPT_TAG),
            await_handoff=number(HANDOFF_TAG),
        )

    def instance_action(self) -> SpotInstanceAction | None:
        """The spot interruption notice, or None if there is none."""
        raw = self.get("spot/instance-action")
        if raw is None:
            return None
        try:
            data = json.loads(raw)
            action = str(data.get("action", "terminate"))
        except (ValueError, AttributeError):
            logger.warning("unreadable spot/instance-action %r; treating it as terminate", raw)
            return SpotInstanceAction("terminate", None)
        return SpotInstanceAction(action, parse_time(data.get("time")))

    def rebalance_notice(self) -> str | None:
        """The rebalance recommendation's noticeTime (or its raw text), or None."""
        raw = self.get("events/recommendations/rebalance")
        if raw is None:
            return None
        try:
            return str(json.loads(raw).get("noticeTime") or raw)
        except (ValueError, AttributeError):
            return raw

    # ---- the token ---------------------------------------------------------------------------

    def _current_token(self) -> str:
        with self._lock:
            # Renew a little before expiry (a tenth of the TTL, at most a minute).
            margin = min(60.0, self.token_ttl_seconds / 10)
            if self._token is not None and time.monotonic() < self._token_expires - margin:
                return self._token
        token = self._fetch_token()
        with self._lock:
            self._token = token
            self._token_expires = time.monotonic() + self.token_ttl_seconds
        return token

    def _drop_token(self, token: str) -> None:
        with self._lock:
            if self._token == token:
                self._token = None

    def _fetch_token(self) -> str:
        url = f"{self.endpoint}{TOKEN_PATH}"
        last: Exception | None = None
        for attempt in range(self.attempts):
            headers = {TTL_HEADER: str(self.token_ttl_seconds)}
            try:
                return _http("PUT", url, headers, self.timeout_seconds).strip()
            except urllib.error.HTTPError as exc:
                if exc.code in (400, 403):
                    raise ImdsError(f"IMDS refused a token ({exc.code})") from exc
                last = exc
            except (urllib.error.URLError, OSError, TimeoutError) as exc:
                last = exc
            time.sleep(min(self.backoff_seconds * 2**attempt, 2.0))
        raise ImdsError(f"IMDS token request failed after {self.attempts} attempts: {last}")


def _http(method: str, url: str, headers: dict[str, str], timeout: float) -> str:
    # The scheme is http(s): ImdsClient.__init__ checks the endpoint.
    request = urllib.request.Request(url, headers=headers, method=method)  # noqa: S310
    with urllib.request.urlopen(request, timeout=timeout) as resp:  # noqa: S310
        return str(resp.read().decode())


def parse_time(value: object) -> datetime | None:
    """An IMDS time such as '2017-09-18T08:22:00Z', or None if it is not one."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None
