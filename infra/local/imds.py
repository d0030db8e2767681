"""A local EC2 instance metadata service (IMDSv2 only) for one simulated instance.

It answers the paths the respot agent reads, with the rules EC2 documents:
- `PUT /latest/api/token` with `X-aws-ec2-metadata-token-ttl-seconds: 1..21600` returns a
  token (missing, non-numeric or out-of-range TTL -> 400; a request carrying
  `X-Forwarded-For` -> 403, as EC2 refuses proxied token requests);
- every `GET` needs `X-aws-ec2-metadata-token` with a live token, else 401 (IMDSv2 is
  required, as respot's launch template sets `HttpTokens=required`);
- `spot/instance-action` and `events/recommendations/rebalance` answer 404 until a notice
  is scheduled and its time has come;
- unknown paths -> 404; other methods -> 405.
The local spot market drives it with `schedule_interruption` and `recommend_rebalance`.
"""

from __future__ import annotations

import ipaddress
import json
import secrets
import threading
import time
from datetime import UTC, datetime, timedelta
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Literal

from infra.local.serving import BackgroundHTTPServer

TOKEN_PATH = "/latest/api/token"  # noqa: S105 - a URL path, not a secret
META = "/latest/meta-data/"
TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aws-ec2-metadata-token"  # noqa: S105 - a header name
MIN_TTL_SECONDS = 1
MAX_TTL_SECONDS = 21600
# EC2 gives two minutes between the interruption notice and the interruption.
SPOT_WARNING = timedelta(minutes=2)

SpotAction = Literal["terminate", "stop", "hibernate"]


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ImdsServer:
    """An IMDSv2 endpoint for one instance, on 127.0.0.1, in a background thread."""

    def __init__(
        self,
        *,
        instance_id: str,
        instance_type: str,
        availability_zone: str,
        tags: dict[str, str],
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        if not ipaddress.ip_address(host).is_loopback:
            raise ValueError(f"the local IMDS binds loopback only, not {host!r}")
        self.instance_id = instance_id
        self.instance_type = instance_type
        self.availability_zone = availability_zone
        self._host = host
        self._port = port
        self._lock = threading.Lock()
        self._tags = dict(tags)
        self._tokens: dict[str, float] = {}  # token -> monotonic expiry
        self._action: tuple[SpotAction, datetime, datetime] | None = None  # action, visible, time
        self._rebalance: datetime | None = None
        self._serving = BackgroundHTTPServer(f"imds-{instance_id}")

    # ---- lifecycle ---------------------------------------------------------------------------

    def start(self) -> ImdsServer:
        """Bind and serve in a daemon thread; returns self."""
        self._serving.start(self._host, self._port, _handler_for(self))
        return self

    def stop(self) -> None:
        """Stop serving and release the port."""
        self._serving.stop()

    def __enter__(self) -> ImdsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """Base URL such as `http://127.0.0.1:41234`: AWS_EC2_METADATA_SERVICE_ENDPOINT."""
        server = self._serving.server
        if server is None:
            raise RuntimeError("the IMDS server is not started")
        return f"http://{self._host}:{server.server_address[1]}"

    # ---- what the spot market does -----------------------------------------------------------

    def schedule_interruption(
        self,
        action: SpotAction = "terminate",
        at: datetime | None = None,
        *,
        notice_at: datetime | None = None,
    ) -> None:
        """Issue a spot interruption notice: EC2 will `action` the instance at `at`.

        From `notice_at` (default: now) on, `spot/instance-action` answers
        `{"action": action, "time": at}`; `at` defaults to two minutes after the notice, as
        on EC2. Before `notice_at` the path answers 404.
        """
        if action not in ("terminate", "stop", "hibernate"):
            raise ValueError(f"unknown spot action {action!r}")
        visible = _aware(notice_at or datetime.now(UTC))
        when = _aware(at) if at is not None else visible + SPOT_WARNING
        with self._lock:
            self._action = (action, visible, when)

    def recommend_rebalance(self, at: datetime | None = None) -> None:
        """From `at` (default now) on, `events/recommendations/rebalance` answers its noticeTime."""
        with self._lock:
            self._rebalance = _aware(at or datetime.now(UTC))

    def clear_notices(self) -> None:
        """Withdraw any interruption or rebalance notice."""
        with self._lock:
            self._action = None
            self._rebalance = None

    def set_tag(self, key: str, value: str | None) -> None:
        """Set (or with None remove) an instance tag."""
        with self._lock:
            if value is None:
                self._tags.pop(key, None)
            else:
                self._tags[key] = value

    def revoke_tokens(self) -> None:
        """Invalidate every token issued so far (as if they had all expired)."""
        with self._lock:
            self._tokens.clear()

    # ---- request logic (called by the handler) -----------------------------------------------

    def issue_token(self, ttl_seconds: int) -> str:
        token = secrets.token_urlsafe(32)
        with self._lock:
            now = time.monotonic()
            self._tokens = {t: exp for t, exp in self._tokens.items() if exp > now}
            self._tokens[token] = now + ttl_seconds
        return token

    def token_valid(self, token: str | None) -> bool:
        if not token:
            return False
        with self._lock:
            expiry = self._tokens.get(token)
        return expiry is not None and time.monotonic() < expiry

    def metadata(self, path: str) -> tuple[str, str] | None:
        """(content type, body) of a metadata path below /latest/meta-data/, or None (404)."""
        now = datetime.now(UTC)
        with self._lock:
            tags = dict(self._tags)
            action = self._action
            rebalance = self._rebalance
        path = path.rstrip("/") if path != "" else path
        fixed = {
            "instance-id": self.instance_id,
            "instance-type": self.instance_type,
            "placement/availability-zone": self.availability_zone,
            "placement/region": self.availability_zone[:-1],
        }
        if path in fixed:
            return "text/plain", fixed[path]
        if path == "":
            return "text/plain", "\n".join(
                ["events/", "instance-id", "instance-type", "placement/", "spot/", "tags/"]
            )
        if path == "tags/instance":
            return "text/plain", "\n".join(sorted(tags))
        if path.startswith("tags/instance/"):
            value = tags.get(path[len("tags/instance/") :])
            return None if value is None else ("text/plain", value)
        if path in ("spot/instance-action", "spot/termination-time"):
            if action is None or now < action[1]:
                return None
            if path == "spot/termination-time":
                return "text/plain", _iso(action[2])
            return "application/json", json.dumps({"action": action[0], "time": _iso(action[2])})
        if path == "events/recommendations/rebalance":
            if rebalance is None or now < rebalance:
                return None
            return "application/json", json.dumps({"noticeTime": _iso(rebalance)})
        return None


def _aware(at: datetime) -> datetime:
    if at.tzinfo is None:
        raise ValueError("give a timezone-aware time, e.g. datetime.now(UTC)")
    return at.astimezone(UTC)


def _handler_for(imds: ImdsServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "EC2ws"
        sys_version = ""

        def log_message(self, format: str, *args: object) -> None:
            return  # quiet: tests and the local runtime poll every few seconds

        def _reply(
            self,
            status: HTTPStatus,
            body: str = "",
            content_type: str = "text/plain",
            headers: dict[str, str] | None = None,
        ) -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def do_PUT(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            if self.path != TOKEN_PATH:
                self._reply(HTTPStatus.FORBIDDEN)
                return
            if self.headers.get("X-Forwarded-For") is not None:
                self._reply(HTTPStatus.FORBIDDEN)
                return
            raw = self.headers.get(TTL_HEADER)
            try:
                ttl = int(raw) if raw is not None else 0
            except ValueError:
                ttl = 0
            if not MIN_TTL_SECONDS <= ttl <= MAX_TTL_SECONDS:
                self._reply(HTTPStatus.BAD_REQUEST)
                return
            token = imds.issue_token(ttl)
            self._reply(HTTPStatus.OK, token, headers={TTL_HEADER: str(ttl)})

        def do_GET(self) -> None:
            if not imds.token_valid(self.headers.get(TOKEN_HEADER)):
                self._reply(HTTPStatus.UNAUTHORIZED)
                return
            path = self.path.split("?", 1)[0]
            if path == TOKEN_PATH:
                self._reply(HTTPStatus.METHOD_NOT_ALLOWED)
                return
            if not path.startswith(META) and path != META.rstrip("/"):
                self._reply(HTTPStatus.NOT_FOUND)
                return
            found = imds.metadata(path[len(META) :])
            if found is None:
                self._reply(HTTPStatus.NOT_FOUND)
                return
            self._reply(HTTPStatus.OK, found[1], content_type=found[0])

        def do_POST(self) -> None:
            self._reply(HTTPStatus.METHOD_NOT_ALLOWED)

        def do_DELETE(self) -> None:
            self._reply(HTTPStatus.METHOD_NOT_ALLOWED)

    return Handler
