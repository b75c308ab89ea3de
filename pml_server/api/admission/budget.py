"""Byte budgets of answers: every answer fits what a default gRPC client receives
(`LIMITS.answer`, 4 MiB), and no Suggest or list answer can fail because of another record's size
(docs/api.md, "Answer sizes").

An answer's items (and each item's tag and length, `FRAMING_BYTES`) take at most
`RESPONSE_BYTES`: the rest of `LIMITS.answer` is kept for what the answer holds besides them (a
page token, its flags and counts). A pattern in a Suggest or ListPatterns answer is trimmed past
`PATTERN_BYTES` (its code and template cut, fewer recent values and intents, `truncated` set;
GetPattern returns it whole), a filtered candidate's detail in an explained Suggest answer past
`TRIMMED_DETAIL_CHARS` (the filtered candidates take at most `FILTERED_BYTES`, the suggestions
the rest), and a listing page stops early at `RESPONSE_BYTES` with a page token for the rest
(AIP-158: a page may be shorter than asked; only an empty token ends the listing). A
RunRetention answer lists at most `RETENTION_ENTRIES` actions within `RESPONSE_BYTES`, with their
total count. GetPattern answers a pattern's code and template whole (`max_code_bytes` is bounded
for it, `LIMITS.code_ceiling`); of the rest, what does not fit is left out of that answer, in
the order `fit_whole` says, with `truncated` set: first intents (of those the engine shows,
domain/shown_intents.py, the first `GOT_INTENTS`; ListPatternIntents pages through all).
"""

from __future__ import annotations

from google.protobuf.message import Message

from pml_server._proto.pml.v1 import resources_pb2
from pml_server.domain import yielding
from pml_server.domain.limits import LIMITS

PATTERN_BYTES = LIMITS.answer_pattern.bound  # one pattern in a Suggest or list answer
TRIMMED_TEXT_CHARS = 8 * 1024  # `original_code` and `template` of a trimmed pattern
TRIMMED_VALUE_CHARS = 256  # each recent value kept in a trimmed pattern
TRIMMED_INTENTS = 16
# What an answer holds besides its items: a page token (at most `LIMITS.page_token`), its
# flags and counts, and the tag and length of GetPattern's one pattern.
ENVELOPE_BYTES = LIMITS.page_token.bound + 64
RESPONSE_BYTES = LIMITS.answer.bound - ENVELOPE_BYTES  # the items of an answer, with framing
# A filtered candidate's detail (`explain`): `available_tools`' names every tool the caller
# cannot reach, up to 1024 of 256 characters for one pattern; cut, it still names the first.
TRIMMED_DETAIL_CHARS = 1024
# An explained answer's filtered candidates, all of them (at most a few thousand, each under
# 1.3 KB with its detail cut), leaving room for at least the first suggestion, whole.
FILTERED_BYTES = RESPONSE_BYTES - 2 * PATTERN_BYTES
# What an item costs in its answer besides its own bytes: its field tag and length, at most.
FRAMING_BYTES = 8
RETENTION_ENTRIES = LIMITS.retention_entries.bound  # entries of a RunRetention answer
GOT_INTENTS = LIMITS.page_size.bound  # intents of a GetPattern answer, as a listing page's


def trim_pattern(out: resources_pb2.Pattern) -> None:
    """Trim `out` in place to `PATTERN_BYTES` if it is larger (code and template cut first)."""
    if out.ByteSize() <= PATTERN_BYTES:
        return
    out.truncated = True
    out.original_code = out.original_code[:TRIMMED_TEXT_CHARS]
    out.template = out.template[:TRIMMED_TEXT_CHARS]
    for param in out.parameters:
        yielding.checkpoint()
        kept = [v for v in param.recent_values_json[:1] if len(v) <= TRIMMED_VALUE_CHARS]
        del param.recent_values_json[:]
        param.recent_values_json.extend(kept)
    del out.intents[TRIMMED_INTENTS:]
    for intent in out.intents:
        intent.text = intent.text[:TRIMMED_VALUE_CHARS]
    if out.ByteSize() > PATTERN_BYTES:  # steps keep their tools and edges, not their arguments
        for step in out.steps:
            del step.arguments[:]
    if out.ByteSize() > PATTERN_BYTES:  # parameters and schema alone (bounded by the normalizer)
        del out.parameters[:]
        out.parameter_schema_json = ""
    _last_resort(out, PATTERN_BYTES)


def fit_whole(out: resources_pb2.Pattern) -> None:
    """GetPattern's pattern within `RESPONSE_BYTES`: `original_code`, `template`, parameters
    and schema always whole (`LIMITS.code_ceiling` leaves them room). Past the budget, each
    left out only while the answer is still over, `truncated` set: intents (`fit_intents`), the
    parameters' recent values, the steps' arguments, then `_last_resort`."""
    fit_intents(out)
    if out.ByteSize() <= RESPONSE_BYTES:
        return
    out.truncated = True
    for param in out.parameters:
        del param.recent_values_json[:]
    if out.ByteSize() > RESPONSE_BYTES:
        for step in out.steps:
            del step.arguments[:]
    _last_resort(out, RESPONSE_BYTES)


def _last_resort(out: resources_pb2.Pattern, bound: int) -> None:
    """Past `bound` with the rest cut, the steps, then the tools past those that fit: only a
    pattern of thousands of tool calls (`max_tool_calls` raised) with long names gets here."""
    if out.ByteSize() <= bound:
        return
    out.truncated = True
    del out.steps[:]
    over = out.ByteSize() - bound
    while over > 0 and out.tools_used:
        over -= len(out.tools_used[-1].encode()) + 2  # at least its tag and length freed
        del out.tools_used[-1]


def trim_detail(detail: str) -> str:
    """A filtered candidate's `detail`, cut past `TRIMMED_DETAIL_CHARS`, saying how much."""
    if len(detail) <= TRIMMED_DETAIL_CHARS:
        return detail
    cut = len(detail) - TRIMMED_DETAIL_CHARS
    return f"{detail[:TRIMMED_DETAIL_CHARS]}... ({cut} more characters)"


def fit_intents(out: resources_pb2.Pattern) -> None:
    """Keep the first intents of `out` (GetPattern's) that fit `RESPONSE_BYTES` with the rest
    of the pattern, at most `GOT_INTENTS`; `truncated` when any is left out."""
    intents = list(out.intents[:GOT_INTENTS])
    del out.intents[:]
    used = out.ByteSize()
    kept = []
    for intent in intents:
        used += intent.ByteSize() + 8  # its tag and length in the pattern, at most
        if used > RESPONSE_BYTES:
            break
        kept.append(intent)
    out.intents.extend(kept)
    if len(kept) < out.intent_count:
        out.truncated = True


def item_bytes(item: Message) -> int:
    """What `item` takes in its answer: its bytes, tag and length."""
    return item.ByteSize() + FRAMING_BYTES


def fits(used_bytes: int, item_bytes: int, count: int) -> bool:
    """Whether an item of `item_bytes` (`item_bytes()`) still fits an answer holding `count`
    items of `used_bytes`; the first item always does (trimmed, it is at most `PATTERN_BYTES`)."""
    return count == 0 or used_bytes + item_bytes <= RESPONSE_BYTES
