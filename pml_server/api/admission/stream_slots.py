"""Stream slots: open streams never take every RPC thread from unary calls.

A StreamTraces call holds one RPC thread for its whole life. Without a bound, a few clients
keeping streams open (idle or not) take all of them, and every unary call of everybody else
waits or is refused; a keys file does not help in single-tenant mode, where one tenant has every
slot. So streams are bounded server-wide (`max_streams`, by default half the RPC threads) and per
connection (`max_per_connection`), and a stream that sends nothing for `idle_seconds` while it
has nothing in flight is ended (`stream.TraceStream`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from pml_server.domain.errors import ResourceExhaustedError

STREAM_RETRY_SECONDS = 1.0


class StreamSlots:
    def __init__(self, max_streams: int, max_per_connection: int) -> None:
        if max_streams < 1 or max_per_connection < 1:
            raise ValueError("stream limits must be >= 1")
        self.max_streams = max_streams
        self.max_per_connection = max_per_connection
        self._lock = threading.Lock()
        self._open = 0
        self._per_peer: dict[str, int] = {}

    @contextmanager
    def hold(self, peer: str) -> Iterator[None]:
        """One open stream of the connection `peer` (grpc's `context.peer()`)."""
        with self._lock:
            if self._open >= self.max_streams:
                raise ResourceExhaustedError(
                    f"{self.max_streams} streams are open on this server (the limit, which keeps "
                    "RPC threads for unary calls); retry after the delay in RetryInfo",
                    retry_after_seconds=STREAM_RETRY_SECONDS,
                )
            if self._per_peer.get(peer, 0) >= self.max_per_connection:
                raise ResourceExhaustedError(
                    f"{self.max_per_connection} streams are open on this connection (the limit); "
                    "retry after the delay in RetryInfo",
                    retry_after_seconds=STREAM_RETRY_SECONDS,
                )
            self._open += 1
            self._per_peer[peer] = self._per_peer.get(peer, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                self._open -= 1
                left = self._per_peer[peer] - 1
                if left:
                    self._per_peer[peer] = left
                else:
                    del self._per_peer[peer]
