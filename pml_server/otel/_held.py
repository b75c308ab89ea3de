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
from pml_server.domain.limits import LIMITS
from pml_server.domain.sessions import digest_stand_in
from pml_server.otel import _attributes as attr
from pml_server.otel._code import LANGUAGE, call_line
from pml_server.otel._mapping import (
    HELD_CONVERSATION_REFUSED,
    HELD_TOO_LARGE,
    SETTLING,
    conversation_problem,
)

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


# Set on a held call whose run validation will refuse for its size (arguments or error text over
# their limits): the texts are not held, the mapping rejects the run with this reason.
TOO_LARGE = HELD_TOO_LARGE
# What a held span keeps of texts the mapping reads only in part: names (an intent is cut at
# 4,096 characters, a tool name refused past 256), and the constants it compares.
_NAME_CHARS = 2 * LIMITS.intent.bound
_KEYWORD_CHARS = 64


def _too_large(span: trace_pb2.Span, attrs: dict[str, Any]) -> str | None:
    """Why validation will refuse the run of this call for its size, else None (not a call,
    or within the limits)."""
    if attr.tool_name(span, attrs) is None:
        return None
    try:
        arguments = attr.arguments(attrs)
    except ValueError:
        arguments = None  # rejected by the mapping already, for what it is
    if arguments is not None:
        text = json.dumps(arguments, sort_keys=True, ensure_ascii=False)  # as the mapping
        if (excess := LIMITS.arguments_json.excess(text)) is not None:
            return f"{attr.TOOL_ARGUMENTS}: {excess}"
    error = attr.failure(span, attrs)
    if error is not None and (excess := LIMITS.error.excess(error)) is not None:
        return f"the error text ({attr.ERROR_TYPE}: status message): {excess}"
    return None


def _held_text(key: str, raw: Any, attrs: dict[str, Any]) -> str | None:
    """The text held for attribute `key`, bounded to what the mapping reads of it."""
    if key == attr.TOOL_ARGUMENTS:
        return _arguments_text(raw)
    if key == attr.ERROR_TYPE:
        return _error_text(raw)
    if key == attr.INPUT_MESSAGES:  # the one message the mapping reads
        last = attr.last_user_message(attrs)
        if last is None:
            return None
        return json.dumps([{"role": "user", "content": last[:_NAME_CHARS]}], ensure_ascii=False)
    if not isinstance(raw, str):
        # The mapping reads only a string as a name, an operation or a conversation: a
        # sequence `gen_ai.tool.name` (`["read_file"]`, which the SDK allows) rejects its call
        # when sent whole. Held as JSON text, it was captured as the tool `["read_file"]`.
        return None
    text = raw
    if key in (attr.OPERATION, attr.MCP_METHOD):
        return text if len(text) <= _KEYWORD_CHARS else None  # (matches no constant)
    return text[:_NAME_CHARS]  # a tool or agent name, or a conversation id (a usable one)


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
    reasons: list[str | None] = []  # per span: `_too_large`
    refusals: list[str | None] = []  # per span: `conversation_problem`
    for span in spans:
        attrs = attr.attributes(span)
        keys: list[str] = []
        # Before: every text held whole, a run's 60 calls of 7 MB arguments (each Export
        # within its limits) took the server to 3.5 GB when its root arrived, and every
        # Export of the trace read them all back.
        too_large = _too_large(span, attrs)
        texts = [span.name[:_NAME_CHARS], "" if too_large else span.status.message]
        # A conversation id that is no usable session id is not held, why it is not is: its
        # run's answer names it as the run sent whole does (docs/ranking.md, Sessions).
        refused = conversation_problem(attrs)
        for key in (*_TEXTS, attr.TOOL_ARGUMENTS):
            if too_large and key in (attr.TOOL_ARGUMENTS, attr.ERROR_TYPE):
                continue
            if refused and key == attr.CONVERSATION_ID:
                continue
            text = _held_text(key, attrs.get(key), attrs)
            if text is not None:
                keys.append(key)
                texts.append(text)
        # The code the run's capture will normalize for this call, so that its flagged secrets
        # (an `apiKey` value, a password in a URL) are redacted here as they will be there.
        code = ""
        tool = attr.tool_name(span, attrs)
        if tool and not too_large:
            try:
                code = call_line(tool, attr.arguments(attrs))
            except ValueError:
                code = ""  # arguments the mapping will reject: credential-shaped text only
        items.append((code, LANGUAGE, texts))
        fields.append(keys)
        reasons.append(too_large)
        refusals.append(refused)
    held: list[trace_pb2.Span] = []
    for span, keys, reason, refused, (_, _, texts), result in zip(
        spans, fields, reasons, refusals, items, prepare_captures(items), strict=True
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
                # a conversation id redaction would change (a secret, or merely long and
                # random, as OpenAI's `conv_...`): held as a digest naming the same session
                # (a usable one: those `conversation_problem` refuses are not held)
                text = digest_stand_in(sent)
            out.attributes.append(
                common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(string_value=text))
            )
        if reason is not None:
            out.attributes.append(
                common_pb2.KeyValue(key=TOO_LARGE, value=common_pb2.AnyValue(string_value=reason))
            )
        if refused is not None:
            out.attributes.append(
                common_pb2.KeyValue(
                    key=HELD_CONVERSATION_REFUSED, value=common_pb2.AnyValue(string_value=refused)
                )
            )
        held.append(out)
    return held


def settling_forms(spans: Sequence[trace_pb2.Span]) -> list[trace_pb2.Span]:
    """Agent spans that arrived with no call, as held while their calls may still come: their
    held forms, marked `SETTLING` (docs/capture.md, "Runs split over several Exports")."""
    held = held_forms(spans)
    for span in held:
        span.attributes.append(
            common_pb2.KeyValue(key=SETTLING, value=common_pb2.AnyValue(bool_value=True))
        )
    return held


def _shape_only(texts: list[str]) -> list[str]:
    result = prepare_captures([("", LANGUAGE, texts)])[0]
    if isinstance(result, Exception):
        raise result
    return result[1]
