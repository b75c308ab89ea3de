"""Reading OTLP attribute values and the GenAI / MCP semantic-convention fields of a span."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

OPERATION = "gen_ai.operation.name"
INVOKE_AGENT = "invoke_agent"
EXECUTE_TOOL = "execute_tool"
TOOL_NAME = "gen_ai.tool.name"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
AGENT_NAME = "gen_ai.agent.name"
CONVERSATION_ID = "gen_ai.conversation.id"
INPUT_MESSAGES = "gen_ai.input.messages"
ERROR_TYPE = "error.type"
MCP_METHOD = "mcp.method.name"
MCP_TOOLS_CALL = "tools/call"
# Values nested deeper than this (kvlist in array in kvlist...) are cut: a hostile span must not
# recurse the mapper to a crash.
_MAX_DEPTH = 32


def value(v: common_pb2.AnyValue, depth: int = 0) -> Any:
    """An AnyValue as plain Python (str, bool, int, float, bytes, list, dict or None)."""
    kind = v.WhichOneof("value")
    if kind is None or depth > _MAX_DEPTH:
        return None
    if kind == "array_value":
        return [value(x, depth + 1) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value(kv.value, depth + 1) for kv in v.kvlist_value.values}
    return getattr(v, kind)


def attributes(span: trace_pb2.Span) -> dict[str, Any]:
    return {kv.key: value(kv.value) for kv in span.attributes}


def is_agent(attrs: dict[str, Any]) -> bool:
    return attrs.get(OPERATION) == INVOKE_AGENT


def tool_name(span: trace_pb2.Span, attrs: dict[str, Any]) -> str | None:
    """The tool of a tool-call span (`execute_tool`, or an MCP `tools/call` span), "" for a
    tool-call span that names no tool, None for any other span. Only a string names a tool:
    an int, bool, bytes or array `gen_ai.tool.name` is no name (it was read as `"5"`,
    `"b'..'"` or `"['a', 'b']"` and stored as a tool)."""
    named = attrs.get(TOOL_NAME)
    named = named if isinstance(named, str) else ""
    if attrs.get(OPERATION) == EXECUTE_TOOL:
        return named
    if attrs.get(MCP_METHOD) == MCP_TOOLS_CALL:
        if named:
            return named
        # The MCP conventions name the span `tools/call {tool}`.
        prefix = MCP_TOOLS_CALL + " "
        return span.name[len(prefix) :].strip() if span.name.startswith(prefix) else ""
    return None


def failure(span: trace_pb2.Span, attrs: dict[str, Any]) -> str | None:
    """The error text of a failed call (`error.type` set or an error status), else None."""
    error_type = attrs.get(ERROR_TYPE)
    failed = span.status.code == trace_pb2.Status.STATUS_CODE_ERROR
    if not error_type and not failed:
        return None
    parts = [str(p) for p in (error_type, span.status.message) if p]
    return ": ".join(parts) or "error"


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):  # `1e999`: read as infinity, written back as `Infinity`
        raise ValueError(f"{text} is out of range")
    return number


# A `\\uD800`-`\\uDFFF` escape: the only way a lone surrogate (no character, not encodable as
# UTF-8) enters a parsed text; the span's own strings are valid UTF-8.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")


def _scrubbed(parsed: Any) -> Any:
    """`parsed` with each lone surrogate (JavaScript's `JSON.stringify` escapes one that a cut
    string left, `"\\ud83d"`) replaced by U+FFFD, as a UTF-8 decoder replaces a broken
    sequence. Kept, it failed the whole Export with INTERNAL when the record was built."""
    if isinstance(parsed, str):
        return parsed.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(parsed, list):
        return [_scrubbed(v) for v in parsed]
    if isinstance(parsed, dict):
        return {_scrubbed(k): _scrubbed(v) for k, v in parsed.items()}
    return parsed


def json_text(raw: str) -> Any:
    """`raw` parsed as JSON; ValueError when it is not JSON or nests arrays and objects deeper
    than `_MAX_DEPTH` (the structured values' bound: a 100k-deep text would exhaust Python's
    recursion in the parser, failing the whole Export instead of this one execution). `NaN`
    and `Infinity` (which Python's `json.dumps` writes) are not JSON: refused, never stored as
    arguments no other JSON reader can parse."""
    if raw.count("[") + raw.count("{") <= _MAX_DEPTH:
        # Cannot nest deeper: no scan (the usual, small arguments).
        return _loads(raw)
    depth = 0
    in_string = escaped = False
    for ch in raw:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > _MAX_DEPTH:
                raise ValueError(f"JSON nested deeper than {_MAX_DEPTH} levels")
        elif ch in "]}":
            depth -= 1
    return _loads(raw)


def _loads(raw: str) -> Any:
    return without_lone_surrogates(
        json.loads(raw, parse_constant=_no_constant, parse_float=_finite), raw
    )


def without_lone_surrogates(parsed: Any, raw: str | bytes) -> Any:
    """`parsed`, the JSON text `raw` parsed, with each lone surrogate replaced by U+FFFD
    (`_scrubbed`); walked only when `raw` holds a surrogate escape. Also for an OTLP/JSON body
    (`pml_server.api.otlp_http`), where the JavaScript SDK's `JSON.stringify` writes one for an
    attribute or span name cut inside an emoji."""
    if isinstance(raw, str):
        found = _SURROGATE_ESCAPE.search(raw) is not None
    else:
        found = _SURROGATE_ESCAPE_BYTES.search(raw) is not None
    return _scrubbed(parsed) if found else parsed


def arguments(attrs: dict[str, Any]) -> dict[str, Any]:
    """`gen_ai.tool.call.arguments` as an object ({} when absent); ValueError when it is not a
    JSON object (or is nested too deeply)."""
    raw = attrs.get(TOOL_ARGUMENTS)
    if raw is None or raw == "":
        return {}
    parsed = json_text(raw) if isinstance(raw, str) else raw
    if not isinstance(parsed, dict):
        raise ValueError(f"{TOOL_ARGUMENTS} is not a JSON object")
    if not isinstance(raw, str):
        # A structured value (kvlist) may hold what JSON cannot: bytes (which failed the whole
        # Export with INTERNAL when the arguments were written as JSON), NaN, infinity.
        try:
            json.dumps(parsed, allow_nan=False)
        except (TypeError, ValueError):
            raise ValueError("holds a value JSON cannot carry (bytes, NaN or infinity)") from None
    return parsed


def last_user_message(attrs: dict[str, Any]) -> str | None:
    """The text of the last `user` message of `gen_ai.input.messages` (JSON text or structured
    value; parts of type `text`, or a plain `content` string), else None."""
    raw = attrs.get(INPUT_MESSAGES)
    if isinstance(raw, str):
        try:
            raw = json_text(raw)
        except ValueError:
            return None
    if not isinstance(raw, list):
        return None
    for message in reversed(raw):
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str) and content.strip():
            return content.strip()
        texts = [
            str(part.get("content", ""))
            for part in message.get("parts") or []
            if isinstance(part, dict) and part.get("type") == "text"
        ]
        text = "\n".join(t for t in texts if t).strip()
        if text:
            return text
    return None
