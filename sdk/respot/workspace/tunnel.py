"""The laptop's end of `respot notebook open` on the local runtime: a TCP forwarder.

It listens on 127.0.0.1:PORT in the CLI's process. Each new connection asks `resolve()` where
the workspace's JupyterLab is now (host, port) and pipes bytes both ways; so after an
interruption, the browser's reload reaches the replacement by itself. While the workspace has
no instance answering (it is moving), a connection gets a short HTTP 503 page saying so and
to reload. Standard library only; a resolution is kept `cache_seconds` (a page opens many
connections), and dropped when connecting to it fails.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

BUFFER = 64 * 1024
CONNECT_SECONDS = 5.0


class NotReachableError(Exception):
    """The workspace has no JupyterLab to reach now (the message says why, for the page)."""


Resolver = Callable[[], tuple[str, int]]


def _unavailable(why: str) -> bytes:
    body = (
        "<!doctype html><title>respot workspace</title><h1>Not reachable now</h1>"
        f"<p>{why}</p><p>Reload this page in a few seconds.</p>"
    ).encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/html; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nRetry-After: 5\r\nConnection: close\r\n\r\n"
    ).encode()
    return head + body


class Tunnel:
    """Forwards 127.0.0.1:`port` to wherever `resolve` says, per connection."""

    def __init__(self, resolve: Resolver, port: int = 0, cache_seconds: float = 2.0) -> None:
        self.resolve = resolve
        self.cache_seconds = cache_seconds
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._server.bind(("127.0.0.1", port))
        except OSError as exc:
            self._server.close()
            why = f"127.0.0.1:{port} is taken ({exc.strerror}); give another --port"
            raise OSError(why) from exc
        self._server.listen(64)
        self.port = int(self._server.getsockname()[1])
        self._cached: tuple[float, tuple[str, int]] | None = None
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self.connections = 0
        self._thread = threading.Thread(target=self._accept, name="workspace-tunnel", daemon=True)

    def start(self) -> Tunnel:
        """Start accepting (once; a started tunnel is returned as it is)."""
        if not self._thread.is_alive() and not self._closed.is_set():
            self._thread.start()
        return self

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._server.close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Tunnel:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _target(self, fresh: bool) -> tuple[str, int]:
        with self._lock:
            now = time.monotonic()
            if not fresh and self._cached and now - self._cached[0] < self.cache_seconds:
                return self._cached[1]
            target = self.resolve()
            self._cached = (now, target)
            return target

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _connect(self) -> socket.socket:
        last: Exception | None = None
        for fresh in (False, True):  # a cached target that fails: ask again once
            try:
                host, port = self._target(fresh)
            except NotReachableError:
                raise
            except Exception as exc:  # the table or the file could not be read: say so
                raise NotReachableError(f"could not find the workspace: {exc}") from exc
            try:
                return socket.create_connection((host, port), timeout=CONNECT_SECONDS)
            except OSError as exc:
                last = exc
        raise NotReachableError(f"JupyterLab does not answer ({last}); it may be moving")

    def _serve(self, client: socket.socket) -> None:
        with client:
            try:
                upstream = self._connect()
            except NotReachableError as exc:
                _answer(client, _unavailable(str(exc)))
                return
            with upstream:
                upstream.settimeout(None)
                back = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
                back.start()
                _pipe(client, upstream)
                back.join()


def _answer(client: socket.socket, reply: bytes) -> None:
    """Read the request (a close with unread bytes would reset the connection and lose the
    reply), send `reply`, and close our side."""
    with contextlib.suppress(OSError):
        client.settimeout(2.0)
        client.recv(BUFFER)
        client.sendall(reply)
        client.shutdown(socket.SHUT_WR)
        while client.recv(BUFFER):
            pass


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(BUFFER):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (dst, src):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
