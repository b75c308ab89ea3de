"""The HTTP/1.1 protocol both of pml's HTTP listeners serve with (OTLP/HTTP in `otlp_http.py`,
`pml mcp --transport http`): uvicorn's, with a deadline on reading each request. uvicorn reads
a request's head and body with no deadline, so a client that stalls holds its connection for as
long as it stays: 64 connections that sent half a request line held every OTLP/HTTP slot (each
Export answered 503, still after 75 s), and about 1,000 held every descriptor of `pml mcp`
(soft limit 1024), which then answered no one (docs/connect.md, "OTLP traces in"; docs/mcp.md,
HTTP front). And how uvicorn logs, for both (`UVICORN_LOGGING`)."""

from __future__ import annotations

import asyncio
from typing import Any, Final

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
