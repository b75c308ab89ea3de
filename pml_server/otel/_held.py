"""The form in which a span waiting for its run's root span is held (docs/capture.md, "Runs split
over several Exports", What a held span keeps).

A held span is written to the store before its run is captured, so it must already be what may
be stored (rule 7, docs/capture.md): only what the mapping reads (ids, parent, name, times,
status, and the GenAI / MCP attributes `_attributes` reads), every text of it redacted as a
captured record's texts are (the secrets its call's code flags, and credential-shaped text).
Other attributes (`url.full`, headers, results), events and links are dropped: they were never
captured, and a credential in them must not reach the disk either.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from pml_server.capture.normalize import prepare_captures
from pml_server.otel import _attributes as attr
from pml_server.otel._code import LANGUAGE, call_line

# The string attributes the mapping reads, kept (redacted) in a held span.
_TEXTS = (
    attr.OPERATION,
    attr.TOOL_NAME,
    attr.AGENT_NAME,
    attr.CONVERSATION_ID,
    attr.INPUT_MESSAGES,
    attr.ERROR_TYPE,
    attr.MCP_METHOD,
)


def _as_text(raw: Any) -> str | None:
    """A read attribute as the text it is held as: structured values (kvlist, array) as JSON,
    None for a value the mapping would not read as text (absent, bytes, numbers, or a
    structured value JSON cannot carry: bytes inside, which raised and failed the Export)."""
    if isinstance(raw, str):
        return raw
    if isinstance(raw, dict | list):
        try:
            return json.dumps(raw, ensure_ascii=False)
        except TypeError:
            return None
    return None


def _error_text(raw: Any) -> str | None:
    """`error.type` as held: any value the mapping reads as a failure (set, not empty), as the
    text it reads (`str`). Held only as text before, an int `error.type` (an HTTP status 500)
    was dropped from a held span and its failed call captured as a success."""
    if not raw:
        return None
    return raw if isinstance(raw, str) else str(raw)


def _arguments_text(raw: Any) -> str | None:
    """`gen_ai.tool.call.arguments` as held: as `_as_text`, and a value of another type (which
    the mapping rejects as not a JSON object) as `[]`, rejected the same way."""
    if raw is None or raw == "":
        return None
    text = _as_text(raw)
    return "[]" if text is None else text


def held_forms(spans: Sequence[trace_pb2.Span]) -> list[trace_pb2.Span]:
    """`spans` as they may be held: stripped to what `map_spans` reads, texts redacted (one
    core call for all of them)."""
    items: list[tuple[str, str, list[str]]] = []
    fields: list[list[str]] = []  # per span: the attribute keys kept, in `texts` order
    for span in spans:
        attrs = attr.attributes(span)
        keys: list[str] = []
        texts = [span.name, span.status.message]
        for key in (*_TEXTS, attr.TOOL_ARGUMENTS):
            raw = attrs.get(key)
            if key == attr.TOOL_ARGUMENTS:
                text = _arguments_text(raw)
            elif key == attr.ERROR_TYPE:
                text = _error_text(raw)
            else:
                text = _as_text(raw)
            if text is not None:
                keys.append(key)
                texts.append(text)
        # The code the run's capture will normalize for this call, so that its flagged secrets
        # (an `apiKey` value, a password in a URL) are redacted here as they will be there.
        code = ""
        tool = attr.tool_name(span, attrs)
        if tool:
            try:
                code = call_line(tool, attr.arguments(attrs))
            except ValueError:
                code = ""  # arguments the mapping will reject: credential-shaped text only
        items.append((code, LANGUAGE, texts))
        fields.append(keys)
    held: list[trace_pb2.Span] = []
    for span, keys, (_, _, texts), result in zip(
        spans, fields, items, prepare_captures(items), strict=True
    ):
        # A code the core refuses (too large) still has its texts redacted by shape alone.
        redacted = result[1] if not isinstance(result, Exception) else _shape_only(texts)
        out = trace_pb2.Span(
            trace_id=span.trace_id,
            span_id=span.span_id,
            parent_span_id=span.parent_span_id,
            name=redacted[0],
            start_time_unix_nano=span.start_time_unix_nano,
            end_time_unix_nano=span.end_time_unix_nano,
            status=trace_pb2.Status(code=span.status.code, message=redacted[1]),
        )
        for key, text, sent in zip(keys, redacted[2:], texts[2:], strict=True):
            if key == attr.CONVERSATION_ID and text != sent:
                continue  # a session id holding a secret: the run's trace id stands in for it
            out.attributes.append(
                common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(string_value=text))
            )
        held.append(out)
    return held


def _shape_only(texts: list[str]) -> list[str]:
    result = prepare_captures([("", LANGUAGE, texts)])[0]
    if isinstance(result, Exception):
        raise result
    return result[1]
