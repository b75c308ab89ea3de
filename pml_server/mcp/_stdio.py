"""`pml mcp`'s stdio transport: the SDK's, with an answer for every line it cannot read
(docs/mcp.md, Protocol).

The SDK drops a line that is not a JSON-RPC message without a word: not JSON, JSON its parser
refuses (a lone surrogate escape such as `\\ud800`, arguments nested some 200 levels deep,
which the SDK's own client sends), or JSON that is not a message. A client that sent a request
on such a line waited for ever. Here each gets a JSON-RPC error under the request's id, found
in the line even when the line does not parse: -32700 Parse error for a line that is not
JSON (or not UTF-8), -32600 Invalid Request for JSON that is not a message; under id null
when the id cannot be found. A notification (no id) that is JSON is not answered, as JSON-RPC
says; nor is a blank line. A line over the message limit (`_message_limit`) is read no further
than the limit (the rest is read and dropped) and always answered, -32600 under the id found in
what was read, else null: whether it was a notification cannot be told from its start."""

from __future__ import annotations

import io
import json
import re
import sys
from collections import deque
from contextlib import suppress
from typing import Any, BinaryIO

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types import INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError
from pydantic import ValidationError

from pml_server.mcp._message_limit import MAX_MESSAGE_BYTES, TOO_LARGE

# Where a JSON string or a bracket starts, and the rest of a string from after its opening
# quote (escapes included, whatever they encode; possessive, so each character is read once):
# the top-level members of a line are found without parsing it, so one the parser refuses
# still gives its id. Linear in the line: a string that does not end runs to the end of it.
_STARTS = re.compile(r'["{}\[\]]')
_STRING_REST = re.compile(r'[^"\\]*+(?:\\.[^"\\]*+)*+"', re.S)
_COLON = re.compile(r"\s*:\s*")
_DECODER = json.JSONDecoder()
_DRAIN_BYTES = 64 * 1024  # what is read at a time of the rest of a line over the limit


class _Oversized(str):
    """The start of a line over the message limit (what was kept of it)."""


class _RecordingStdin(io.TextIOWrapper):
    """stdin as UTF-8, each line also kept in `lines` until the message (or the error) the SDK
    made of it is taken. Bytes that are not UTF-8 are kept as lone surrogates, so the SDK
    cannot read the line and it is answered as not JSON (the SDK's own reader replaced them
    with U+FFFD: `caf\xe9` in Latin-1 was stored as `caf\ufffd`, where HTTP refuses it)."""

    def __init__(self, buffer: BinaryIO, lines: deque[str]) -> None:
        super().__init__(buffer, encoding="utf-8", errors="surrogateescape")
        self._raw = buffer  # read directly: only `readline` is ever called
        self._lines = lines

    def readline(self, size: int = -1, /) -> str:  # type: ignore[override]  # as typeshed's own
        """One line, from the bytes (so the bound is in bytes): at most the limit of it is held.
        A longer one is kept as `_Oversized` and the SDK is given a line it cannot parse, so
        it is answered (`answer_for`)."""
        raw = self._raw.readline(MAX_MESSAGE_BYTES + 1)
        if len(raw) > MAX_MESSAGE_BYTES and not raw.endswith(b"\n"):
            while (rest := self._raw.readline(_DRAIN_BYTES)) and not rest.endswith(b"\n"):
                pass
            self._lines.append(_Oversized(raw.decode("utf-8", "surrogateescape")))
            return "\n"
        line = raw.decode("utf-8", "surrogateescape")
        if line:
            self._lines.append(line)
        return line

    def close(self) -> None:
        """The buffer is stdin's own: never closed here (as the SDK's wrapper)."""
        with suppress(ValueError):
            self.detach()


def _top_level_id(text: str) -> tuple[bool, Any]:
    """Whether the object on `text` has an `id` member at its top level, and its value (None
    when it cannot be read)."""
    if not text.startswith("{"):
        return False, None
    depth = 0
    pos = 0
    while (start := _STARTS.search(text, pos)) is not None:
        pos = start.end()
        if start.group() == "{" or start.group() == "[":
            depth += 1
        elif start.group() != '"':
            depth -= 1
        else:
            rest = _STRING_REST.match(text, pos)
            if rest is None:
                return False, None  # the string runs to the end of the line
            pos = rest.end()
            if depth == 1 and pos - start.start() == 4 and text.startswith('"id"', start.start()):
                colon = _COLON.match(text, pos)
                if colon is None:
                    continue
                try:
                    return True, _DECODER.raw_decode(text, colon.end())[0]
                except (ValueError, RecursionError):
                    return True, None
    return False, None


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def answer_for(line: str, err: Exception) -> JSONRPCError | None:
    """The error answering a line the SDK could not read as a message (None: no answer)."""
    text = line.strip()
    if not text and not isinstance(line, _Oversized):
        return None
    has_id, found = _top_level_id(text)
    request_id = found if isinstance(found, str | int) and not isinstance(found, bool) else None
    if isinstance(request_id, str) and not _encodable(request_id):
        request_id = None  # an id that is not text cannot be answered under
    errors = err.errors(include_url=False) if isinstance(err, ValidationError) else []
    if isinstance(line, _Oversized):
        error = ErrorData(code=INVALID_REQUEST, message=TOO_LARGE)
    elif errors and errors[0]["type"] == "string_unicode":
        error = ErrorData(code=PARSE_ERROR, message="Parse error: the line is not valid UTF-8")
    elif errors and errors[0]["type"] == "json_invalid":
        reason = str(errors[0]["msg"]).removeprefix("Invalid JSON: ")
        if "hex escape" in reason:
            reason += " (a lone surrogate escape, e.g. \\ud800, is not a character)"
        error = ErrorData(code=PARSE_ERROR, message=f"Parse error: {reason}")
    elif has_id:
        message = "Invalid Request: not a JSON-RPC 2.0 request, notification or response"
        error = ErrorData(code=INVALID_REQUEST, message=message)
    else:
        return None  # a notification, or not a message at all: nothing asked, nothing answered
    return JSONRPCError(jsonrpc="2.0", id=request_id, error=error)


async def serve_stdio(server: MCPServer) -> None:
    """`server` over stdin and stdout, each unreadable line answered (above)."""
    lines: deque[str] = deque()
    stdin = anyio.wrap_file(_RecordingStdin(sys.stdin.buffer, lines))
    async with stdio_server(stdin=stdin) as (read_stream, write_stream):
        send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)

        async def screen() -> None:
            async with send:
                async for item in read_stream:
                    # The SDK makes one item of each line, in order.
                    line = lines.popleft() if lines else ""
                    if not isinstance(item, Exception):
                        await send.send(item)
                        continue
                    answer = answer_for(line, item)
                    if answer is not None:
                        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                            await write_stream.send(SessionMessage(answer))

        lowlevel = server._lowlevel_server
        async with anyio.create_task_group() as group:
            group.start_soon(screen)
            await lowlevel.run(receive, write_stream, lowlevel.create_initialization_options())
            group.cancel_scope.cancel()
