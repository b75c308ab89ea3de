"""How pml's HTTP listeners serve (OTLP/HTTP in `otlp_http.py`, /metrics in `metrics.py`,
`pml mcp --transport http`): uvicorn's HTTP/1.1 protocol with a deadline on reading each
request and a bound on the connections open, and uvicorn's logging (`listener_config`).

uvicorn reads a request's head and body with no deadline, so a client that stalls held its
connection for as long as it stayed: 64 connections that sent half a request line held every
OTLP/HTTP slot (each Export answered 503, still after 75 s), and about 1,000 held every
descriptor of `pml mcp` (soft limit 1024), which then answered no one. The deadline alone
bounds how long a connection is held, not how many are: a client that reopens each as it is
closed holds as many as it likes (docs/connect.md, "OTLP traces in"; docs/mcp.md, HTTP front;
docs/operations.md, Metrics and alerts)."""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any, Final

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

# uvicorn's logging (docs/operations.md, Secrets outside the store): its records go to the
# process's own handlers (`pml serve`'s JSON lines), its errors only (an exception in the
# application). Each of its warnings is about one request of any client, no key needed (a
# request h11 cannot read, an `Upgrade` header, one past the connection limit): each wrote a
# line of uvicorn's own format into `pml serve`'s JSON log, so a flood of them was a flood of
# log lines.
UVICORN_LOGGING: Final[dict[str, Any]] = {"log_config": None, "log_level": "error"}

# A request's head and body arrive within this many seconds of its connection opening or of the
# previous answer on it (at least 280 KB/s for an 8 MiB body), or the connection is closed.
REQUEST_SECONDS = 30.0

# Connections one listener keeps open (`BoundedListener`); one more is closed as soon as it is
# accepted. 1,000 connections that sent half a request line (or, with TLS, no handshake),
# each reopened as the deadline closed it, held every descriptor of `pml serve` (soft limit
# 1024) through its OTLP/HTTP or /metrics port: its gRPC port accepted no one, and asyncio
# logged "socket.accept() out of system resource" 384,000 times (195 MB) in 30 s. Past
# uvicorn's `limit_concurrency`, requests are answered 503 anyway; an idle connection is
# closed after uvicorn's keep-alive timeout (5 s).
MAX_OPEN_CONNECTIONS = 128
BACKLOG = 64  # the listen backlog, and how many connections asyncio accepts in one go


class DeadlinedH11(H11Protocol):
    """uvicorn's HTTP/1.1 protocol closing a connection whose client has not sent its whole
    request `REQUEST_SECONDS` after the connection opened or after the previous answer; a
    request being answered is never cut."""

    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = self.loop.call_later(REQUEST_SECONDS, self._expire)

    def _expire(self) -> None:
        cycle = self.cycle
        waiting_on_client = cycle is None or cycle.response_complete or cycle.more_body
        if waiting_on_client and not self.transport.is_closing():
            self.transport.close()


def listener_config(app: Any, **options: Any) -> uvicorn.Config:
    """uvicorn's configuration of one of pml's HTTP listeners serving `app`: `DeadlinedH11`,
    `BACKLOG`, `UVICORN_LOGGING`, no `server` header; `options` add to it (lifespan, TLS,
    limits)."""
    return uvicorn.Config(
        app,
        http=DeadlinedH11,
        backlog=BACKLOG,
        server_header=False,
        **UVICORN_LOGGING,
        **options,
    )


def listening_socket(host: str, port: int) -> socket.socket:
    """A `BoundedListener` bound to `host:port` (an IPv6 address without brackets; port 0: any
    free port) and listening. Raises OSError (or ValueError for a port out of range)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = BoundedListener(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except (OSError, ValueError, OverflowError):
        sock.close()
        raise
    return sock


class BoundedListener(socket.socket):
    """A listening socket that keeps at most `MAX_OPEN_CONNECTIONS` of the connections it
    accepted open: one more is closed as soon as it is accepted, before anything is read of it
    (a TLS handshake or a request line), so no client holds more of the process's descriptors
    however it stalls. asyncio accepts with `accept()` and closes each connection with its
    socket's `close()`, in the event loop's thread."""

    def __init__(self, family: int, kind: int) -> None:
        super().__init__(family, kind)
        self._lock = threading.Lock()
        self.open_connections = 0

    def accept(self) -> tuple[socket.socket, Any]:
        while True:
            fd, address = self._accept()  # type: ignore[attr-defined]  # BlockingIOError: none
            conn = _Accepted(self.family, self.type, self.proto, fileno=fd)
            with self._lock:
                if self.open_connections < MAX_OPEN_CONNECTIONS:
                    self.open_connections += 1
                    conn.listener = self
                    return conn, address
            conn.close()  # past the bound: the next one waiting, if any, is taken

    def closed_one(self) -> None:
        with self._lock:
            self.open_connections -= 1


class _Accepted(socket.socket):
    """A connection a `BoundedListener` accepted, counted open until it is closed."""

    listener: BoundedListener | None = None

    def close(self) -> None:
        listener, self.listener = self.listener, None
        if listener is not None:
            listener.closed_one()
        super().close()


class ServedInThread:
    """uvicorn serving `config` on the listening `sock` in a daemon thread named `name`;
    `stop` lets answers in flight finish, then closes the socket."""

    def __init__(self, config: uvicorn.Config, sock: socket.socket, name: str) -> None:
        self._sock = sock
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name=name, daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(60)
        self._sock.close()
