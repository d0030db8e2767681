"""Serving a local emulator (IMDS, Slack) over HTTP from a daemon thread."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class BackgroundHTTPServer:
    """A `ThreadingHTTPServer` served from a daemon thread; `stop()` returns within 50 ms."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        """True while the server accepts connections."""
        return self.server is not None

    def start(self, host: str, port: int, handler: type[BaseHTTPRequestHandler]) -> int:
        """Bind `host:port` (0: any free port), serve, and return the port bound."""
        if self.server is None:
            server = ThreadingHTTPServer((host, port), handler)
            server.daemon_threads = True
            self.server = server
            self._thread = threading.Thread(
                target=server.serve_forever,
                kwargs={"poll_interval": 0.05},
                name=self.name,
                daemon=True,
            )
            self._thread.start()
        return int(self.server.server_address[1])

    def stop(self) -> None:
        """Stop serving and release the port."""
        server, self.server = self.server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
