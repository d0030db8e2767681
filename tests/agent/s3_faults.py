"""Faults at the S3 boundary for agents that run as real processes: an HTTP proxy to moto.

An agent started with `AWS_ENDPOINT_URL=<proxy.url>` sends every request (S3 and SQS) here;
the proxy forwards it to the moto server unchanged unless a rule matches the method and the
path (path-style S3: `/<bucket>/<key>`). A rule either answers 500 InternalError (S3's own
"try again" answer) without forwarding, or holds the request for some seconds before
forwarding it: a slow PUT that S3 still applies after its client has given up or died, as
a request already sent is. Rules can be added and removed while agents run.
"""

from __future__ import annotations

import http.client
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade"}
_FAIL_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code>'
    b"<Message>injected fault</Message></Error>"
)


@dataclass
class Rule:
    """Requests whose method is `method` and whose path matches `path` (a regex)."""

    method: str
    path: str
    fail: bool = False  # answer 500 without forwarding
    delay: float = 0.0  # else: hold the request this long, then forward it
    times: int | None = None  # apply to this many requests (None: every one)
    hits: list[str] = field(default_factory=list)

    def matches(self, method: str, path: str) -> bool:
        if method != self.method or not re.search(self.path, path):
            return False
        return self.times is None or len(self.hits) < self.times


class FaultProxy:
    """A proxy on 127.0.0.1 in front of `upstream` (the moto server's URL)."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port or 80
        self.rules: list[Rule] = []
        self._lock = threading.Lock()
        self._in_flight = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def add(self, rule: Rule) -> Rule:
        with self._lock:
            self.rules.append(rule)
        return rule

    def remove(self, rule: Rule) -> None:
        with self._lock:
            self.rules.remove(rule)

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no request is being held or forwarded; False on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if self._in_flight == 0:
                    return True
            time.sleep(0.05)
        return False

    def _rule_for(self, method: str, path: str) -> Rule | None:
        with self._lock:
            for rule in self.rules:
                if rule.matches(method, path):
                    rule.hits.append(path)
                    return rule
        return None

    def forward(
        self, method: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        with self._lock:
            self._in_flight += 1
        try:
            return self._forward(method, path, headers, body)
        finally:
            with self._lock:
                self._in_flight -= 1

    def _forward(
        self, method: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        rule = self._rule_for(method, path.split("?", 1)[0])
        if rule is not None and rule.fail:
            return 500, [("Content-Type", "application/xml")], _FAIL_BODY
        if rule is not None and rule.delay:
            time.sleep(rule.delay)
        conn = http.client.HTTPConnection(self._host, self._port, timeout=120)
        try:
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            for name, value in headers:
                if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                    conn.putheader(name, value)
            conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            response = conn.getresponse()
            data = response.read()
            out = [(k, v) for k, v in response.getheaders() if k.lower() not in _HOP_BY_HOP]
            return response.status, out, data
        finally:
            conn.close()


def _handler(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return b"".join(chunks)
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _relay(self) -> None:
            body = self._body()
            status, headers, data = proxy.forward(
                self.command, self.path, list(self.headers.items()), body
            )
            self.send_response(status)
            for name, value in headers:
                if name.lower() != "content-length":
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay  # noqa: N815 - http.server's

    return Handler
