"""Reading a request body with a bound, for both of pml's HTTP listeners (OTLP/HTTP in
`otlp_http.py`, `pml mcp --transport http`): a body over the limit is read and dropped, up to
`DRAIN_BYTES` more, before it is refused (docs/connect.md, "OTLP traces in"; docs/mcp.md,
Protocol)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

Receive = Callable[[], Awaitable[Mapping[str, Any]]]

# How much of a body over the limit is read and dropped before the 413: a client that sends its
# whole body before reading an answer (Python's http.client, urllib) got a connection reset
# instead of the 413 when the server answered and closed with the body unread. Past this the
# connection is closed without reading more.
DRAIN_BYTES = 64 * 1024 * 1024


class Gone:
    """The client went away before its body ended."""


GONE: Final = Gone()


async def read_body(receive: Receive, max_bytes: int) -> bytes | Gone | None:
    """The request's body; None once it passes `max_bytes` (the rest is read and dropped, up
    to `DRAIN_BYTES` more: the caller then answers 413); `GONE` when the client disconnects
    first (a cut body is never parsed)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return GONE
        chunk = message.get("body", b"")
        size += len(chunk)
        more = message.get("more_body", False)
        if size > max_bytes:
            chunks.clear()
            if not more or size > max_bytes + DRAIN_BYTES:
                return None
            continue
        chunks.append(chunk)
        if not more:
            return b"".join(chunks)
