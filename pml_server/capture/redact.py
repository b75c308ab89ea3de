"""Rule 7, secrets: nothing a record carries reaches the store with a credential in it.

Applied once a record's code is normalized and before anything of it is written: the code
becomes the normalizer's `redacted_code` (secret literals and credential-shaped text
replaced), and every free text (intent, tool errors, arguments, trace) loses both the values
the normalizer flagged as secrets (those of at least `_core.MIN_SECRET_CHARS` characters:
shorter ones, "a" or "1", would blank ordinary text; a secret containing another is replaced
whole) and any credential-shaped token. The core does the text work with the normalization,
for a whole batch in one call (`normalize.prepare_captures` over `record_texts`); this module
says which texts a record has and puts the redacted ones back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from pml_server import _core
from pml_server.capture.normalize import NormalizedCode, prepare_captures
from pml_server.domain.model import ExecutionRecord, ToolCall

# The version of the core's rules for free text (`secrets.rs`, `redact_text`). Every store's
# stored free texts are redacted again once under each (`service/_free_text.py`): a change to
# those rules that redacts more bumps it, and that is all it takes for an older store to lose
# what the new rule finds (docs/capture.md, Secrets; docs/storage.md, Migrations).
# `tests/capture/test_redaction_rules.py` fails when `secrets.rs` changes and this does not.
REDACTION_RULES = 1
# The language the stored texts are redacted under (no code: any the core reads).
_NO_CODE_LANGUAGE = "python"


def record_texts(record: ExecutionRecord) -> list[str]:
    """The free texts of `record` to redact, in the order `redacted_record` reads them back:
    intent, trace (decoded), then each tool call's error and arguments."""
    texts = [record.intent, record.trace.decode("utf-8", "replace") if record.trace else ""]
    for call in record.tool_calls:
        texts += (call.error, call.arguments_json)
    return texts


def redacted_texts(groups: Sequence[Sequence[str]]) -> list[list[str]]:
    """Each group of texts stored together (an intent; a failure log entry's error and
    intent) redacted by today's rules for free text, as a capture's texts are, in one core call:
    `redact_text`, and a URL password or query credential one text of the group holds, quoted
    bare in another. The values a capture's code flagged as secret are not known any more (its
    stored code is redacted): a stored text kept one only when that capture's rules missed it
    in the code too."""
    out: list[list[str]] = []
    for result in prepare_captures([("", _NO_CODE_LANGUAGE, group) for group in groups]):
        if isinstance(result, Exception):
            raise result  # only a text that is not UTF-8-encodable, which is never stored
        out.append(result[1])
    return out


def redacted_name(name: str) -> str:
    """A tool name or tag with its credentials redacted, by the core's rules for names
    (`scheme://[REDACTED]@host`, `?access_token=[REDACTED]`, `password=[REDACTED]`, a token's
    shape, a field quoted or spaced, `{"token": "[REDACTED]"}`: docs/capture.md, Secrets).
    Names are not free text: the core's entropy rule would blank a name that merely looks
    random (a commit hash in a tag, `tool_a8f9e0b1...`), and its field rule a namespace
    (`auth:login`), which are still the names filters and grouping compare. A credential is
    never part of a name, and was stored as given: in `tools_used` (and every answer naming
    the tool) and in the pattern's tags."""
    return _core.redact_name(name)


def redacted_record(
    record: ExecutionRecord, normalized: NormalizedCode, texts: Sequence[str]
) -> ExecutionRecord:
    """`record` as it may be stored, given `texts`: its `record_texts` redacted, and its names
    (tools, tags) without URL credentials (`redacted_name`)."""
    intent, trace_text = texts[0], texts[1]
    calls = tuple(
        _cleaned_call(call, texts[2 + 2 * k], texts[3 + 2 * k])
        for k, call in enumerate(record.tool_calls)
    )
    trace = trace_text.encode("utf-8") if record.trace else record.trace
    code = normalized.redacted_code or record.code
    tags = tuple(redacted_name(tag) for tag in record.tags)
    unchanged = (record.code, record.intent, record.tool_calls, record.trace, record.tags)
    if (code, intent, calls, trace, tags) == unchanged:
        return record  # nothing to hide: no copy (a dataclass copy costs about as much)
    return replace(record, code=code, intent=intent, tool_calls=calls, trace=trace, tags=tags)


def _cleaned_call(call: ToolCall, error: str, arguments: str) -> ToolCall:
    tool = redacted_name(call.tool)
    if error == call.error and arguments == call.arguments_json and tool == call.tool:
        return call
    return replace(call, tool=tool, error=error, arguments_json=arguments)
