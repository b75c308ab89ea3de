"""The pml server behind `pml mcp`: one gRPC channel per API key, and pml's errors turned into
MCP tool errors (a tool error is for the model to read, so it says what to fix)."""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import grpc
from mcp.server.mcpserver.exceptions import ToolError

from pml_server.client import (
    CertificateError,
    ClientCertificateError,
    PmlClient,
    PmlClientError,
    TlsMismatchError,
)
from pml_server.domain.limits import LIMITS

T = TypeVar("T")
# Distinct keys seen over HTTP, each with its channel; past this many the least recently used
# idle one is closed (a flood of random keys must not grow memory). A channel in use is never
# closed under its call: it leaves the cache and closes on its last release (docs/mcp.md,
# Channels per key).
_MAX_CHANNELS = 64
# Violations name the request message's fields (`record.tool_calls[0].arguments_json`,
# `context.previous_tools[0]`, `available_tools.tools[0]`); a tool error names the MCP argument
# as the caller passed it and as pydantic names a bad one (`tool_calls.0.arguments`,
# `previous_tools.0`, `available_tools.0`, `cursor`).
_FIELD_PREFIXES = (
    ("record.", ""),
    ("context.", ""),
    ("available_tools.tools", "available_tools"),
    ("page_token", "cursor"),  # resources/list's cursor is pml's page token
)
_INDEX = re.compile(r"\[(\d+)\]")
_RENAMED = {"arguments_json": "arguments"}


@dataclass(frozen=True)
class UpstreamOptions:
    server: str
    api_key: str | None = None
    tls: bool = False
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    timeout: float = 30.0
    # The most tool calls a record_execution takes: the pml server's `--max-tool-calls`
    # (checked before the calls are read: `_serve.PmlMCPServer.call_tool`).
    max_tool_calls: int = LIMITS.tool_calls.bound
    # What to do about a key pml refuses, said with the refusal: over stdio the key is this
    # process's (`--api-key`, `PML_API_KEY`), not a header the MCP client sends.
    key_hint: str = ""


@dataclass
class _Channel:
    client: PmlClient
    users: int = 0
    retired: bool = field(default=False)


class Upstream:
    def __init__(self, options: UpstreamOptions) -> None:
        self.options = options
        self._channels: OrderedDict[str | None, _Channel] = OrderedDict()
        self._lock = threading.Lock()

    def _new_client(self, api_key: str | None) -> PmlClient:
        o = self.options
        return PmlClient(
            o.server,
            api_key=api_key,
            tls=o.tls,
            root_certificates=o.tls_ca,
            client_cert=o.tls_cert,
            client_key=o.tls_key,
            timeout=o.timeout,
        )

    def check_client(self, api_key: str | None) -> None:
        """Make and close a client with the TLS files given and `api_key` (over stdio the
        process's key): a file that cannot be read raises OSError naming it, a file or key
        that cannot be used PmlClientError, at start, rather than failing every call."""
        self._new_client(api_key).close()

    def _acquire(self, api_key: str | None) -> _Channel:
        with self._lock:
            found = self._channels.get(api_key)
            if found is None:
                found = _Channel(self._new_client(api_key))
                self._channels[api_key] = found
                self._evict_idle()
            else:
                self._channels.move_to_end(api_key)
            found.users += 1
            return found

    def _evict_idle(self) -> None:
        """Past the bound, close the least recently used channels nobody is using; one in use
        stays until its release (the bound is then exceeded by at most the calls in flight)."""
        excess = len(self._channels) - _MAX_CHANNELS
        for key in [k for k, c in self._channels.items() if c.users == 0][: max(0, excess)]:
            self._channels.pop(key).client.close()

    def _release(self, channel: _Channel) -> None:
        with self._lock:
            channel.users -= 1
            if channel.users == 0 and channel.retired:
                channel.client.close()
            elif channel.users == 0:
                self._evict_idle()

    def forget(self, api_key: str | None) -> None:
        """Drop `api_key`'s channel (pml refused the key, or the channel is broken): closed now
        if idle, else on its last release."""
        with self._lock:
            found = self._channels.pop(api_key, None)
            if found is None:
                return
            found.retired = True
            if found.users == 0:
                found.client.close()

    @contextmanager
    def lease(self, api_key: str | None) -> Iterator[PmlClient]:
        """The key's client, kept open until the block ends; a key pml refuses is not kept,
        nor is a channel that found pml unavailable (docs/mcp.md, Protocol: gRPC backs off its
        reconnects over an outage, up to minutes, and kept failing calls after pml was back;
        the next call opens a fresh channel, which connects at once)."""
        channel = self._acquire(api_key)
        try:
            yield channel.client
        except PmlClientError as err:
            if err.code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.UNAVAILABLE):
                self.forget(api_key)
            raise
        finally:
            self._release(channel)

    def channels(self) -> int:
        """How many channels are open (cached or still in use)."""
        with self._lock:
            return len(self._channels)

    def call(self, api_key: str | None, fn: Callable[[PmlClient], T]) -> T:
        try:
            with self.lease(api_key) as client:
                return fn(client)
        except PmlClientError as err:
            raise ToolError(self.describe(err)) from None

    def describe(self, err: PmlClientError) -> str:
        # a TLS refusal is no outage: it names the flags that mend it, as the CLI's errors do
        if isinstance(err, CertificateError):
            return f"pml at {self.options.server}: {err.saying('--tls-ca')}"
        if isinstance(err, ClientCertificateError):
            return f"pml at {self.options.server}: {err.saying('--tls-cert and --tls-key')}"
        if isinstance(err, TlsMismatchError):
            return f"pml at {self.options.server}: {err.saying('--tls')}"
        if err.code is grpc.StatusCode.UNAVAILABLE:
            return f"pml is unavailable at {self.options.server} (is it running?): {err.message}"
        if err.code is grpc.StatusCode.DEADLINE_EXCEEDED:
            return f"pml at {self.options.server} did not answer in time: {err.message}"
        if err.code is grpc.StatusCode.UNAUTHENTICATED:
            hint = f" ({self.options.key_hint})" if self.options.key_hint else ""
            return f"pml refused the API key{hint}: {err.message}"
        if err.code is grpc.StatusCode.PERMISSION_DENIED:
            return f"pml refused the call: {err.message}"
        if err.violations:
            parts = "; ".join(f"{_argument(f)}: {d}" for f, d in err.violations)
            return f"invalid argument: {parts}"
        return f"{err.code.name.lower()}: {err.message}"

    def close(self) -> None:
        with self._lock:
            for c in self._channels.values():
                c.client.close()
            self._channels.clear()


def _argument(field: str) -> str:
    """The MCP argument a request field's violation is about (above, _FIELD_PREFIXES)."""
    for prefix, replacement in _FIELD_PREFIXES:
        if field.startswith(prefix):
            field = replacement + field[len(prefix) :]
            break
    parts = _INDEX.sub(r".\1", field).split(".")
    return ".".join(_RENAMED.get(part, part) for part in parts)
