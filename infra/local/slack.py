"""A local Slack Web API on 127.0.0.1: `auth.test`, `chat.postMessage` and `chat.update`.

`slack_sdk.WebClient(token=..., base_url=server.base_url)` talks to it over real HTTP, with the
rules Slack applies to the calls respot makes:
- the token comes as `Authorization: Bearer ...` or a `token` argument; none -> `not_authed`,
  an unknown one -> `invalid_auth`, a revoked one -> `token_revoked`;
- arguments come as JSON, form-encoded or multipart bodies (`blocks` may be a JSON string);
- `channel` is an id (`C...`) or, for `chat.postMessage`, a name (`#name`); unknown ->
  `channel_not_found`, archived -> `is_archived`, bot not a member -> `not_in_channel`;
  `chat.update` takes the id only, as Slack does;
- a message needs `text` or `blocks` (`no_text`); `text` over 40,000 characters ->
  `msg_too_long`; more than 50 blocks, a block without a type, a header over 150 or a section
  text over 3,000 characters -> `invalid_blocks`;
- `thread_ts` must name a top-level message of the channel (`invalid_thread_ts`);
  `chat.update` of an unknown ts -> `message_not_found`, of another user's -> `cant_update_message`;
- `metadata` must be `{"event_type": str, "event_payload": {...}}` (`invalid_metadata_format`);
- every answer to a well-formed call is HTTP 200 with `ok: true|false`, like Slack's.
Faults on demand: `rate_limit(times, retry_after)` answers 429 with `Retry-After`,
`outage(status)` answers a non-JSON 5xx page, `stop()` refuses connections until `start()`.
The server keeps the transcript (every message with its edits) and renders a thread as text.
"""

from __future__ import annotations

import email.parser
import email.policy
import ipaddress
import itertools
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from infra.local.serving import BackgroundHTTPServer

API_PREFIX = "/api/"
MAX_TEXT_CHARS = 40_000  # Slack: msg_too_long above this
MAX_BLOCKS = 50  # per message
MAX_HEADER_CHARS = 150
MAX_SECTION_TEXT_CHARS = 3_000
MAX_FIELD_CHARS = 2_000
MAX_CONTEXT_ELEMENTS = 10
TEAM_ID = "T0LOCAL00"
BOT_USER_ID = "U0RESPOT0"
BOT_ID = "B0RESPOT0"


@dataclass
class SlackChannel:
    """A channel of the local workspace."""

    id: str
    name: str
    archived: bool = False
    member: bool = True  # the bot was invited (or may post: chat:write.public)


@dataclass
class SlackMessage:
    """One message as Slack stores it; `edits` holds the earlier (text, blocks) versions."""

    channel: str
    ts: str
    user: str
    text: str
    blocks: list[dict[str, Any]]
    thread_ts: str | None = None
    metadata: dict[str, Any] | None = None
    edits: list[tuple[str, list[dict[str, Any]]]] = field(default_factory=list)

    def as_api(self) -> dict[str, Any]:
        """The message object Slack returns."""
        body: dict[str, Any] = {
            "type": "message",
            "user": self.user,
            "bot_id": BOT_ID,
            "text": self.text,
            "ts": self.ts,
            "team": TEAM_ID,
        }
        if self.blocks:
            body["blocks"] = self.blocks
        if self.thread_ts:
            body["thread_ts"] = self.thread_ts
        if self.metadata:
            body["metadata"] = self.metadata
        return body


@dataclass(frozen=True)
class ApiCall:
    """One request the server answered (for tests)."""

    method: str
    status: int
    error: str | None
    channel: str | None = None
    thread_ts: str | None = None


@dataclass(frozen=True)
class SlackThread:
    """A top-level message and its replies, oldest first."""

    parent: SlackMessage
    replies: list[SlackMessage]


class SlackRefusalError(Exception):
    """A call Slack answers with `ok: false` and this error code."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


class SlackWorkspace:
    """The state and rules of the local workspace (the HTTP adapter is `LocalSlack`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tokens: dict[str, str] = {}  # token -> user id
        self.revoked: set[str] = set()
        self.channels: dict[str, SlackChannel] = {}
        self.messages: list[SlackMessage] = []
        self._ids = itertools.count(1)
        self._last_ts = 0.0

    # ---- setup ------------------------------------------------------------------------------

    def add_token(self, token: str, user: str = BOT_USER_ID) -> None:
        """Accept `token` as `user`."""
        with self.lock:
            self.tokens[token] = user

    def revoke(self, token: str) -> None:
        """Answer `token_revoked` to `token` from now on."""
        with self.lock:
            self.revoked.add(token)

    def add_channel(self, name: str, *, archived: bool = False, member: bool = True) -> str:
        """Create a channel; returns its id."""
        name = name.lstrip("#")
        with self.lock:
            for channel in self.channels.values():
                if channel.name == name:
                    channel.archived, channel.member = archived, member
                    return channel.id
            channel_id = f"C{next(self._ids):08d}"
            self.channels[channel_id] = SlackChannel(channel_id, name, archived, member)
            return channel_id

    # ---- the API ----------------------------------------------------------------------------

    def call(self, method: str, args: dict[str, Any], bearer: str | None) -> dict[str, Any]:
        """Answer one Web API call; raises `SlackRefusalError` for `ok: false` answers."""
        handlers = {
            "auth.test": self._auth_test,
            "chat.postMessage": self._post_message,
            "chat.update": self._update,
        }
        if method not in handlers:
            raise SlackRefusalError("unknown_method")
        with self.lock:
            user = self._authenticate(bearer or args.get("token"))
            return handlers[method](user, args)

    def _authenticate(self, token: Any) -> str:
        if not token:
            raise SlackRefusalError("not_authed")
        if token in self.revoked:
            raise SlackRefusalError("token_revoked")
        if token not in self.tokens:
            raise SlackRefusalError("invalid_auth")
        return self.tokens[token]

    def _auth_test(self, user: str, args: dict[str, Any]) -> dict[str, Any]:
        return {
            "ok": True,
            "url": "https://respot-local.slack.com/",
            "team": "respot-local",
            "user": "respot",
            "team_id": TEAM_ID,
            "user_id": user,
            "bot_id": BOT_ID,
            "is_enterprise_install": False,
        }

    def _channel(self, value: Any, *, by_name: bool) -> SlackChannel:
        if not isinstance(value, str) or not value:
            raise SlackRefusalError("channel_not_found")
        found = self.channels.get(value)
        if found is None and by_name:
            name = value.removeprefix("#")
            found = next((c for c in self.channels.values() if c.name == name), None)
        if found is None:
            raise SlackRefusalError("channel_not_found")
        if found.archived:
            raise SlackRefusalError("is_archived")
        if not found.member:
            raise SlackRefusalError("not_in_channel")
        return found

    def _content(self, args: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
        text = args.get("text")
        blocks = args.get("blocks")
        if isinstance(blocks, str):
            try:
                blocks = json.loads(blocks)
            except ValueError:
                raise SlackRefusalError("invalid_blocks_format") from None
        if blocks is None:
            blocks = []
        if not isinstance(blocks, list):
            raise SlackRefusalError("invalid_blocks_format")
        if not text and not blocks:
            raise SlackRefusalError("no_text")
        text = "" if text is None else str(text)
        if len(text) > MAX_TEXT_CHARS:
            raise SlackRefusalError("msg_too_long")
        _check_blocks(blocks)
        return text, blocks

    def _metadata(self, args: dict[str, Any]) -> dict[str, Any] | None:
        metadata = args.get("metadata")
        if metadata is None:
            return None
        if isinstance(metadata, str):
            try:
                metadata = json.loads(metadata)
            except ValueError:
                raise SlackRefusalError("invalid_metadata_format") from None
        if (
            not isinstance(metadata, dict)
            or not isinstance(metadata.get("event_type"), str)
            or not isinstance(metadata.get("event_payload"), dict)
        ):
            raise SlackRefusalError("invalid_metadata_format")
        return metadata

    def _next_ts(self) -> str:
        # Unique and increasing, with Slack's shape "<seconds>.<6 digits>".
        now = max(time.time(), self._last_ts + 0.000001)
        self._last_ts = now
        return f"{now:.6f}"

    def _post_message(self, user: str, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(args.get("channel"), by_name=True)
        text, blocks = self._content(args)
        thread_ts = args.get("thread_ts") or None
        if thread_ts is not None:
            parent = self._find(channel.id, str(thread_ts))
            if parent is None or parent.thread_ts is not None:
                raise SlackRefusalError("invalid_thread_ts")
            thread_ts = parent.ts
        metadata = self._metadata(args)
        message = SlackMessage(channel.id, self._next_ts(), user, text, blocks, thread_ts, metadata)
        self.messages.append(message)
        return {"ok": True, "channel": channel.id, "ts": message.ts, "message": message.as_api()}

    def _update(self, user: str, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(args.get("channel"), by_name=False)
        message = self._find(channel.id, str(args.get("ts") or ""))
        if message is None:
            raise SlackRefusalError("message_not_found")
        if message.user != user:
            raise SlackRefusalError("cant_update_message")
        text, blocks = self._content(args)
        metadata = self._metadata(args)
        message.edits.append((message.text, message.blocks))
        message.text, message.blocks = text, blocks
        if metadata is not None:
            message.metadata = metadata
        return {
            "ok": True,
            "channel": channel.id,
            "ts": message.ts,
            "text": text,
            "message": message.as_api(),
        }

    def _find(self, channel_id: str, ts: str) -> SlackMessage | None:
        return next(
            (m for m in self.messages if m.channel == channel_id and m.ts == ts),
            None,
        )

    # ---- reading the transcript ---------------------------------------------------------------

    def channel_id(self, name_or_id: str) -> str:
        """The id of a channel given by name or id."""
        with self.lock:
            if name_or_id in self.channels:
                return name_or_id
            name = name_or_id.removeprefix("#")
            for channel in self.channels.values():
                if channel.name == name:
                    return channel.id
        raise KeyError(f"no channel {name_or_id!r} in the local workspace")

    def top_level(self, channel: str) -> list[SlackMessage]:
        """Top-level messages of a channel, oldest first."""
        cid = self.channel_id(channel)
        with self.lock:
            return [m for m in self.messages if m.channel == cid and m.thread_ts is None]

    def thread(self, channel: str, ts: str) -> SlackThread:
        """The thread under the message `ts` of `channel`."""
        cid = self.channel_id(channel)
        with self.lock:
            parent = self._find(cid, ts)
            if parent is None:
                raise KeyError(f"no message {ts} in {channel}")
            replies = [m for m in self.messages if m.channel == cid and m.thread_ts == ts]
        return SlackThread(parent, replies)


def _check_blocks(blocks: list[Any]) -> None:
    """The part of Slack's Block Kit validation that respot's messages could run into."""
    if len(blocks) > MAX_BLOCKS:
        raise SlackRefusalError("invalid_blocks")
    for block in blocks:
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise SlackRefusalError("invalid_blocks")
        kind = block["type"]
        if kind == "header" and len(_text_of(block.get("text"))) > MAX_HEADER_CHARS:
            raise SlackRefusalError("invalid_blocks")
        if kind == "section":
            if len(_text_of(block.get("text"))) > MAX_SECTION_TEXT_CHARS:
                raise SlackRefusalError("invalid_blocks")
            fields = block.get("fields") or []
            if len(fields) > 10 or any(len(_text_of(f)) > MAX_FIELD_CHARS for f in fields):
                raise SlackRefusalError("invalid_blocks")
        if kind == "context" and len(block.get("elements") or []) > MAX_CONTEXT_ELEMENTS:
            raise SlackRefusalError("invalid_blocks")


def _text_of(obj: Any) -> str:
    if isinstance(obj, dict):
        return str(obj.get("text") or "")
    return ""


def render_message(message: SlackMessage) -> list[str]:
    """A message as plain lines, roughly as Slack shows it (Block Kit when there is some)."""
    if not message.blocks:
        return message.text.splitlines() or [""]
    lines: list[str] = []
    for block in message.blocks:
        kind = block.get("type")
        if kind == "header":
            lines.append(f"*{_text_of(block.get('text'))}*")
        elif kind == "section":
            if block.get("text"):
                lines.extend(_text_of(block["text"]).splitlines())
            fields = [_text_of(f).replace("\n", " ") for f in block.get("fields") or []]
            lines.extend("  ".join(fields[i : i + 2]) for i in range(0, len(fields), 2))
        elif kind == "context":
            lines.append(" · ".join(_text_of(e) for e in block.get("elements") or []))
        elif kind == "divider":
            lines.append("-" * 40)
    return lines


def render_thread(thread: SlackThread) -> str:
    """A thread as the team would read it: the parent card as it is now, then the replies."""
    out = [*render_message(thread.parent)]
    if thread.parent.edits:
        out.append(f"(edited {len(thread.parent.edits)} times)")
    for reply in thread.replies:
        lines = render_message(reply)
        out.append(f"  └ {lines[0]}")
        out.extend(f"    {line}" for line in lines[1:])
    return "\n".join(out)


class LocalSlack:
    """The local Slack Web API server: `base_url` for `WebClient`, `workspace` for the state."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0) -> None:
        if not ipaddress.ip_address(host).is_loopback:
            raise ValueError(f"the local Slack binds loopback only, not {host!r}")
        self.host = host
        self.port = port
        self.workspace = SlackWorkspace()
        self.token = f"xoxb-local-{secrets.token_hex(12)}"
        self.workspace.add_token(self.token)
        self.calls: list[ApiCall] = []
        self._lock = threading.Lock()
        self._outage: int | None = None
        self._rate_limits: list[tuple[str | None, int]] = []  # (method or None, retry_after)
        self._serving = BackgroundHTTPServer("local-slack")

    # ---- life -------------------------------------------------------------------------------

    def start(self) -> LocalSlack:
        """Serve (again, on the same port after `stop`); returns self."""
        self.port = self._serving.start(self.host, self.port, _handler_for(self))
        return self

    def stop(self) -> None:
        """Stop serving: connections are refused until `start()`."""
        self._serving.stop()

    def __enter__(self) -> LocalSlack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        """True while the server accepts connections."""
        return self._serving.running

    @property
    def base_url(self) -> str:
        """What to pass to `WebClient(base_url=...)`."""
        return f"http://{self.host}:{self.port}{API_PREFIX}"

    # ---- faults -----------------------------------------------------------------------------

    def outage(self, status: int = HTTPStatus.INTERNAL_SERVER_ERROR) -> None:
        """Answer every call with a non-JSON `status` page until `recover()`."""
        with self._lock:
            self._outage = int(status)

    def recover(self) -> None:
        """End an `outage` and drop the rate limits not served yet."""
        with self._lock:
            self._outage = None
            self._rate_limits.clear()

    def rate_limit(
        self, *, times: int = 1, retry_after: int = 1, method: str | None = None
    ) -> None:
        """Answer the next `times` calls (of `method`, or any) with 429 and `Retry-After`."""
        with self._lock:
            self._rate_limits.extend([(method, retry_after)] * times)

    # ---- the transcript ---------------------------------------------------------------------

    def add_channel(self, name: str, *, archived: bool = False, member: bool = True) -> str:
        """Create (or reconfigure) a channel; returns its id."""
        return self.workspace.add_channel(name, archived=archived, member=member)

    def thread(self, channel: str, ts: str) -> SlackThread:
        """The thread under message `ts`."""
        return self.workspace.thread(channel, ts)

    def render(self, channel: str, ts: str) -> str:
        """The thread under message `ts` as plain text."""
        return render_thread(self.thread(channel, ts))

    def errors(self) -> list[ApiCall]:
        """Calls answered with an error (HTTP or `ok: false`)."""
        with self._lock:
            return [c for c in self.calls if c.error is not None]

    # ---- the adapter ------------------------------------------------------------------------

    def answer(
        self, method: str, args: dict[str, Any], bearer: str | None
    ) -> tuple[int, dict[str, str], bytes]:
        """Status, headers and body for one request."""
        channel = args.get("channel") if isinstance(args.get("channel"), str) else None
        thread_ts = args.get("thread_ts") if isinstance(args.get("thread_ts"), str) else None

        def log(status: int, error: str | None) -> None:
            with self._lock:
                self.calls.append(ApiCall(method, status, error, channel, thread_ts))

        with self._lock:
            outage = self._outage
            limit = next(
                (i for i, (m, _) in enumerate(self._rate_limits) if m in (None, method)), None
            )
            retry_after = self._rate_limits.pop(limit)[1] if limit is not None else None
        if outage is not None:
            log(outage, f"http {outage}")
            page = f"<html><body><h1>{outage}</h1>Slack is having trouble</body></html>"
            return outage, {"Content-Type": "text/html"}, page.encode()
        if retry_after is not None:
            log(HTTPStatus.TOO_MANY_REQUESTS, "ratelimited")
            body = json.dumps({"ok": False, "error": "ratelimited"}).encode()
            headers = {"Content-Type": "application/json", "Retry-After": str(retry_after)}
            return HTTPStatus.TOO_MANY_REQUESTS, headers, body
        try:
            result = self.workspace.call(method, args, bearer)
            log(HTTPStatus.OK, None)
        except SlackRefusalError as refusal:
            result = {"ok": False, "error": refusal.error}
            log(HTTPStatus.OK, refusal.error)
        return (
            HTTPStatus.OK,
            {"Content-Type": "application/json; charset=utf-8"},
            json.dumps(result).encode(),
        )


def _parse_args(content_type: str, body: bytes, query: str) -> dict[str, Any]:
    """The call's arguments from the query string and a JSON, form or multipart body."""
    args: dict[str, Any] = dict(parse_qsl(query))
    kind = content_type.split(";", 1)[0].strip().lower()
    if not body:
        return args
    if kind == "application/json":
        parsed = json.loads(body.decode("utf-8"))
        if not isinstance(parsed, dict):
            raise ValueError("the JSON body is not an object")
        args.update(parsed)
    elif kind == "application/x-www-form-urlencoded":
        args.update(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
    elif kind == "multipart/form-data":
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            f"Content-Type: {content_type}\r\n\r\n".encode() + body
        )
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            payload = part.get_payload(decode=True)
            if isinstance(name, str) and isinstance(payload, bytes):
                args[name] = payload.decode("utf-8")
    else:
        raise ValueError(f"unsupported content type {content_type!r}")
    return args


def _handler_for(server: LocalSlack) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return  # the transcript and `calls` are the log

        def _send(self, status: int, headers: dict[str, str], body: bytes) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            url = urlsplit(self.path)
            if not url.path.startswith(API_PREFIX):
                self._send(HTTPStatus.NOT_FOUND, {"Content-Type": "text/plain"}, b"not found")
                return
            method = url.path.removeprefix(API_PREFIX)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            try:
                args = _parse_args(self.headers.get("Content-Type") or "", body, url.query)
            except (ValueError, UnicodeDecodeError):
                payload = json.dumps({"ok": False, "error": "invalid_form_data"}).encode()
                self._send(HTTPStatus.OK, {"Content-Type": "application/json"}, payload)
                return
            auth = self.headers.get("Authorization") or ""
            bearer = auth.removeprefix("Bearer ").strip() if auth.startswith("Bearer ") else None
            self._send(*server.answer(method, args, bearer))

        def do_GET(self) -> None:
            # Slack accepts GET with query arguments for most methods; respot only POSTs.
            url = urlsplit(self.path)
            method = url.path.removeprefix(API_PREFIX)
            auth = self.headers.get("Authorization") or ""
            bearer = auth.removeprefix("Bearer ").strip() if auth.startswith("Bearer ") else None
            self._send(*server.answer(method, dict(parse_qsl(url.query)), bearer))

    return Handler
