"""The pml server behind `pml mcp`: one gRPC channel per API key, and pml's errors turned into
MCP tool errors (a tool error is for the model to read, so it says what to fix)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import grpc
from mcp.server.mcpserver.exceptions import ToolError

from pml_server.client import PmlClient, PmlClientError

T = TypeVar("T")
# Distinct keys seen over HTTP, each with its channel; past this many the oldest is closed
# (a flood of random keys must not grow memory).
_MAX_CHANNELS = 64
# Violations name the request message's fields (`record.intent`); the MCP arguments are the
# record's fields themselves.
_FIELD_PREFIXES = ("record.",)


@dataclass(frozen=True)
class UpstreamOptions:
    server: str
    api_key: str | None = None
    tls: bool = False
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    timeout: float = 30.0


class Upstream:
    def __init__(self, options: UpstreamOptions) -> None:
        self.options = options
        self._clients: dict[str | None, PmlClient] = {}
        self._lock = threading.Lock()

    def client(self, api_key: str | None) -> PmlClient:
        with self._lock:
            found = self._clients.get(api_key)
            if found is None:
                if len(self._clients) >= _MAX_CHANNELS:
                    oldest = next(iter(self._clients))
                    self._clients.pop(oldest).close()
                o = self.options
                found = PmlClient(
                    o.server,
                    api_key=api_key,
                    tls=o.tls,
                    root_certificates=o.tls_ca,
                    client_cert=o.tls_cert,
                    client_key=o.tls_key,
                    timeout=o.timeout,
                )
                self._clients[api_key] = found
            return found

    def call(self, api_key: str | None, fn: Callable[[PmlClient], T]) -> T:
        try:
            return fn(self.client(api_key))
        except PmlClientError as err:
            raise ToolError(self.describe(err)) from None

    def describe(self, err: PmlClientError) -> str:
        if err.code is grpc.StatusCode.UNAVAILABLE:
            return f"pml is unavailable at {self.options.server} (is it running?): {err.message}"
        if err.code is grpc.StatusCode.DEADLINE_EXCEEDED:
            return f"pml at {self.options.server} did not answer in time: {err.message}"
        if err.code is grpc.StatusCode.UNAUTHENTICATED:
            return f"pml refused the API key: {err.message}"
        if err.code is grpc.StatusCode.PERMISSION_DENIED:
            return f"pml refused the call: {err.message}"
        if err.violations:
            parts = "; ".join(f"{_argument(f)}: {d}" for f, d in err.violations)
            return f"invalid argument: {parts}"
        return f"{err.code.name.lower()}: {err.message}"

    def close(self) -> None:
        with self._lock:
            for c in self._clients.values():
                c.close()
            self._clients.clear()


def _argument(field: str) -> str:
    for prefix in _FIELD_PREFIXES:
        if field.startswith(prefix):
            return field[len(prefix) :]
    return field
