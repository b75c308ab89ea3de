"""HTTP-level answer to a missing or unknown bearer key: 401 with `WWW-Authenticate: Bearer`,
as HTTP clients expect, instead of a session whose every tool call fails. pml stays the judge:
the key is checked with GetServerInfo (remembered for a minute when valid), and every tool call
still sends it, so a key revoked meanwhile fails there."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import anyio.to_thread
import grpc

from pml_server.client import PmlClientError
from pml_server.mcp._upstream import Upstream

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

_VALID_SECONDS = 60.0
_MAX_REMEMBERED = 1024


def bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            text = value.decode("latin-1")
            if text.lower().startswith("bearer "):
                return text[7:].strip() or None
            return None
    return None


class BearerCheck:
    def __init__(self, app: App, upstream: Upstream) -> None:
        self._app = app
        self._upstream = upstream
        self._valid_until: dict[str | None, float] = {}

    def _refusal(self, key: str | None) -> str | None:
        """Why pml refuses `key` (None: accepted, or pml could not say; the tool calls will)."""
        now = time.monotonic()
        if self._valid_until.get(key, 0.0) > now:
            return None
        try:
            self._upstream.client(key).server_info()
        except PmlClientError as err:
            if err.code is grpc.StatusCode.UNAUTHENTICATED:
                return err.message
            return None
        if len(self._valid_until) >= _MAX_REMEMBERED:
            self._valid_until.clear()
        self._valid_until[key] = now + _VALID_SECONDS
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        key = bearer(scope)
        reason = await anyio.to_thread.run_sync(self._refusal, key)
        if reason is None:
            await self._app(scope, receive, send)
            return
        body = json.dumps({"error": "invalid_token", "error_description": f"pml: {reason}"})
        body_bytes = body.encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", b'Bearer realm="pml"'),
                    (b"content-length", str(len(body_bytes)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body_bytes})
