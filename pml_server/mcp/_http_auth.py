"""The HTTP front of `pml mcp --transport http`, before the SDK sees a request (docs/mcp.md,
HTTP front), in this order:

1. Host and Origin (DNS rebinding protection): a foreign one is refused (421, 403) before
   anything else, a key included, is looked at, and not logged (`BearerCheck.__init__`).
2. `GET` on the endpoint: 405. The server is stateless and sends nothing unasked, so an event
   stream would only hold a connection open forever.
3. The bearer key: a missing or unknown one (or one that is not printable ASCII or is longer
   than 1024 characters, which no key is) gets 401 with `WWW-Authenticate: Bearer`, as HTTP
   clients expect, instead of a session whose every tool call fails. pml stays the judge: the
   key is checked with GetServerInfo (remembered for a minute when valid; a refused key is not
   kept), and every tool call still sends it, so a key revoked meanwhile fails there.
4. A JSON-RPC message whose `id` is neither a string nor an integer: -32600 Invalid Request
   (the SDK would take it for a notification and answer 202 with nothing); so is JSON that is
   not one JSON-RPC message (a batch, no or another `jsonrpc`, a `method` that is no string),
   in one sentence (the SDK answered -32602 with pydantic's dump of it, input echoed).
5. A request whose client hung up before its body was read: dropped, nothing ran (the SDK
   would log an error with its traceback for each; docs/reliability.md, Clients that give up).
   A body over the message limit (`_message_limit`) is 413 with -32600, once read and
   dropped up to `http_body.DRAIN_BYTES` (`pml_server/api/http_body.py`)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import anyio.to_thread
import grpc
import pydantic_core
from mcp.server.transport_security import (
    TransportSecurityMiddleware,
    TransportSecuritySettings,
)
from mcp_types import jsonrpc_message_adapter
from pydantic import ValidationError
from starlette.requests import Request

from pml_server.api.http_body import Gone, read_body
from pml_server.client import PmlClientError
from pml_server.mcp._message_limit import MAX_MESSAGE_BYTES, TOO_LARGE
from pml_server.mcp._upstream import Upstream

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

_VALID_SECONDS = 60.0
_MAX_REMEMBERED = 1024
INVALID_REQUEST = -32600
_JSON_KINDS = {type(None): "null", dict: "an object", list: "an array", bool: "a boolean"}


def bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            text = value.decode("latin-1")
            if text.lower().startswith("bearer "):
                return text[7:].strip() or None
            return None
    return None


async def _respond(
    send: Send, status: int, body: Any, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send(
        {"type": "http.response.start", "status": status, "headers": headers + (extra or [])}
    )
    await send({"type": "http.response.body", "body": data})


def _rpc_error(code: int, message: str, request_id: str | int | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def _request_id(message: Any) -> str | int | None:
    found = message.get("id") if isinstance(message, dict) else None
    if isinstance(found, str) or (isinstance(found, int) and not isinstance(found, bool)):
        return found
    return None


def _invalid_request(body: bytes) -> tuple[str | int | None, str] | None:
    """(the id to answer under, why) when the body is JSON but not one valid JSON-RPC message;
    None: valid, or not JSON (the SDK answers -32700 Parse error). Parsed as the SDK parses it,
    so JSON nested past its parser's limit is the SDK's Parse error too (`json.loads` raised
    RecursionError on it, a 500 and a traceback)."""
    try:
        parsed = pydantic_core.from_json(body)
    except ValueError:
        return None
    for message in parsed if isinstance(parsed, list) else [parsed]:
        if not isinstance(message, dict) or "id" not in message:
            continue
        found = message["id"]
        if isinstance(found, str) or (isinstance(found, int) and not isinstance(found, bool)):
            continue
        kind = _JSON_KINDS.get(type(found), "number")
        return None, f"Invalid Request: id must be a string or an integer, not {kind}"
    if isinstance(parsed, list):
        return None, "Invalid Request: send one JSON-RPC message per request, not a batch"
    try:
        jsonrpc_message_adapter.validate_python(parsed, by_name=False)
    except ValidationError as err:
        # One sentence naming the member, not pydantic's dump of every union member's errors
        # with type tags, the input echoed and links (which the SDK answered, as -32602).
        return _request_id(parsed), "Invalid Request: " + _why(parsed, err)
    return None


def _why(parsed: Any, err: ValidationError) -> str:
    if not isinstance(parsed, dict):
        return "a JSON-RPC message is a JSON object"
    if parsed.get("jsonrpc") != "2.0":
        return 'jsonrpc must be "2.0"'
    if "method" in parsed:
        if not isinstance(parsed["method"], str):
            return "method must be a string"
        if "params" in parsed and not isinstance(parsed["params"], dict):
            return "params must be an object"
    elif not {"result", "error"} & parsed.keys():
        return "a request needs a method"
    first = err.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(x) for x in first["loc"][1:]) or "message"
    return f"{where}: {str(first['msg'])[:1].lower()}{str(first['msg'])[1:]}"


class BearerCheck:
    def __init__(
        self, app: App, upstream: Upstream, security: TransportSecuritySettings, path: str
    ) -> None:
        self._app = app
        self._upstream = upstream
        self._security = TransportSecurityMiddleware(security)
        # The SDK's check logs each foreign Host or Origin whole, at WARNING, for any client
        # before its key is looked at: a 60 KB Host was 2,300 lines of stderr, which the SDK's
        # log handler wrapped in the event loop for 43 s while no one was answered (docs/mcp.md,
        # HTTP front). The 421 or 403 tells the client; the log keeps its errors only.
        logging.getLogger(TransportSecurityMiddleware.__module__).setLevel(logging.ERROR)
        self._path = path
        self._valid_until: dict[str | None, float] = {}

    def _refusal(self, key: str | None) -> str | None:
        """Why pml refuses `key` (None: accepted, or pml could not say; the tool calls will)."""
        now = time.monotonic()
        if self._valid_until.get(key, 0.0) > now:
            return None
        try:
            with self._upstream.lease(key) as client:
                client.server_info()
        except PmlClientError as err:
            # A key that cannot be sent (not printable ASCII) is no pml key either: refused as
            # an unknown one, not let through to a session whose every call fails on it.
            if err.code is grpc.StatusCode.UNAUTHENTICATED or "api_key" in dict(err.violations):
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
        method = scope.get("method", "")
        refused = await self._security.validate_request(Request(scope), is_post=method == "POST")
        if refused is not None:
            await refused(scope, receive, send)
            return
        if method == "GET" and scope.get("path", "").rstrip("/") == self._path.rstrip("/"):
            message = "Method Not Allowed: no event stream here (stateless); send requests by POST"
            await _respond(send, 405, _rpc_error(INVALID_REQUEST, message), [(b"allow", b"POST")])
            return
        reason = await anyio.to_thread.run_sync(self._refusal, bearer(scope))
        if reason is not None:
            body = {"error": "invalid_token", "error_description": f"pml: {reason}"}
            await _respond(send, 401, body, [(b"www-authenticate", b'Bearer realm="pml"')])
            return
        if method == "POST":
            await self._check_messages(scope, receive, send)
            return
        await self._app(scope, receive, send)

    async def _check_messages(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The body, read whole up to the limit (`_message_limit`), checked, then replayed. A
        body over it is read and dropped up to `http_body.DRAIN_BYTES` more before the 413
        (it was answered unread, a 20 MB one: a client that sends its whole body before it
        reads, as http.client, saw its connection reset, never the 413)."""
        body = await read_body(receive, MAX_MESSAGE_BYTES)
        if isinstance(body, Gone):
            return  # the client hung up: nobody is left to answer, and nothing ran
        if body is None:
            # As the SDK's own limit (413), but JSON-RPC, which the SDK's client reports
            # (it reported a plain-text 413 as "Server returned an error response").
            await _respond(send, 413, _rpc_error(INVALID_REQUEST, TOO_LARGE))
            return
        invalid = _invalid_request(body)
        if invalid is not None:
            await _respond(send, 400, _rpc_error(INVALID_REQUEST, invalid[1], invalid[0]))
            return
        replayed: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

        async def replay() -> Message:
            return replayed.pop() if replayed else await receive()

        await self._app(scope, replay, send)
