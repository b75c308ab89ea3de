"""Rule 7, secrets: nothing a record carries reaches the store with a credential in it.

Applied once a record's code is normalized and before anything of it is written: the code
becomes the normalizer's `redacted_code` (secret literals and credential-shaped text
replaced), and every free text (intent, tool errors, arguments, trace) loses both the values
the normalizer flagged as secrets and any credential-shaped token (`_core.redact_text`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace

from pml_server.capture.normalize import NormalizedCode, redact_text
from pml_server.domain.model import ExecutionRecord, ToolCall

REDACTED_TEXT = "[REDACTED]"
MIN_SECRET_CHARS = 4  # shorter flagged values ("a", "1") would blank ordinary text


def redact_record(record: ExecutionRecord, normalized: NormalizedCode) -> ExecutionRecord:
    """`record` as it may be stored: see the module doc."""
    known = sorted(
        {
            value
            for p in normalized.params
            if p.secret
            for value in [_decoded(p.value_json)]
            if len(value) >= MIN_SECRET_CHARS
        },
        key=len,
        reverse=True,  # a secret containing another is replaced whole
    )

    def clean(text: str) -> str:
        for value in known:
            text = text.replace(value, REDACTED_TEXT)
        return redact_text(text)

    calls = tuple(_clean_call(call, clean) for call in record.tool_calls)
    trace = record.trace
    if trace:
        trace = clean(trace.decode("utf-8", "replace")).encode("utf-8")
    code = normalized.redacted_code or record.code
    intent = clean(record.intent)
    unchanged = (record.code, record.intent, record.tool_calls, record.trace)
    if (code, intent, calls, trace) == unchanged:
        return record  # nothing to hide: no copy (a dataclass copy costs about as much)
    return replace(record, code=code, intent=intent, tool_calls=calls, trace=trace)


def _clean_call(call: ToolCall, clean: Callable[[str], str]) -> ToolCall:
    error = clean(call.error) if call.error else call.error
    arguments = clean(call.arguments_json)
    if error == call.error and arguments == call.arguments_json:
        return call
    return replace(call, error=error, arguments_json=arguments)


def _decoded(value_json: str) -> str:
    try:
        value = json.loads(value_json)
    except ValueError:
        return value_json
    return value if isinstance(value, str) else value_json
