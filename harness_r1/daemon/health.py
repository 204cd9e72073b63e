"""The daemon's health endpoints: /metrics, /healthz and /readyz over HTTP.

`HealthServer` serves /metrics, /healthz (the process answers) and /readyz (the daemon's own
view: assigned partitions, reachable store, ...) from a daemon thread.

A module of its own: the HTTP side knows a registry to render and a readiness check to ask,
not which metrics the registry holds nor how the daemon decides it is ready.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

Ready = Callable[[], tuple[bool, str]]


class HealthServer:
    """/metrics, /healthz and /readyz over HTTP from a daemon thread (the standard library's
    ThreadingHTTPServer: three small routes do not need a web framework, and a slow scrape
    must not block a probe). `ready()` is called per /readyz request; it should be cheap."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int, ready: Ready) -> None:
        self.registry = registry
        self.host = host
        self._requested_port = port
        self._ready = ready
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port listened on: the one picked by the system when 0 was asked for."""
        if self._server is None:
            return self._requested_port
        return int(self._server.server_address[1])

    def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("HealthServer already started")
        server_cls = _Server6 if ":" in self.host else ThreadingHTTPServer
        try:
            server = server_cls((self.host, self._requested_port), _handler(self))
        except OSError as err:
            raise OSError(
                err.errno,
                f"cannot listen on {self.host}:{self._requested_port} for /metrics: "
                f"{err.strerror}; set HARNESS_R1_METRICS__PORT to a free port (0 picks one)",
            ) from err
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="harness-r1-health",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket; safe to call twice or before start."""
        server, thread = self._server, self._thread
        self._server, self._thread = None, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> HealthServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def respond(self, path: str) -> tuple[int, str, bytes]:
        """Status, content type and body for a GET of `path` (the routes, without HTTP)."""
        route = urlsplit(path).path
        if route == "/metrics":
            return 200, CONTENT_TYPE_LATEST, generate_latest(self.registry)
        if route == "/healthz":
            return 200, _TEXT, b"ok\n"
        if route == "/readyz":
            try:
                ok, reason = self._ready()
            except Exception as err:  # a failing check means not ready, not a dead server
                ok, reason = False, f"readiness check failed: {type(err).__name__}: {err}"
            body = (reason or ("ready" if ok else "not ready")) + "\n"
            return (200 if ok else 503), _TEXT, body.encode("utf-8")
        return 404, _TEXT, b"not found; try /metrics, /healthz or /readyz\n"


_TEXT = "text/plain; charset=utf-8"


class _Server6(ThreadingHTTPServer):
    address_family = socket.AF_INET6


def _handler(health: HealthServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            try:
                status, content_type, body = health.respond(self.path)
            except Exception as err:
                status, content_type = 500, _TEXT
                body = f"{type(err).__name__}: {err}\n".encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            """No access log: a scrape every few seconds would drown the daemon's own lines."""

    return Handler
