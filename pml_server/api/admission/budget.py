"""Byte budgets of answers: no Suggest or list answer can fail because of another record's size.

A pattern in a Suggest or ListPatterns answer is trimmed past `PATTERN_BYTES` (its code and
template cut, fewer recent values and intents, `truncated` set; GetPattern returns it whole),
a filtered candidate's detail in an explained Suggest answer past `TRIMMED_DETAIL_CHARS` (the
filtered candidates take at most `FILTERED_BYTES`, the suggestions the rest),
and a listing page stops early at `RESPONSE_BYTES` with a page token for the rest (AIP-158: a
page may be shorter than asked; only an empty token ends the listing). A RunRetention answer
lists at most `RETENTION_ENTRIES` actions within `RESPONSE_BYTES`, with their total count.
GetPattern returns the whole pattern but for its intents: of those the engine shows
(domain/shown_intents.py), the first `GOT_INTENTS` that fit `RESPONSE_BYTES` (a pattern may
hold any number; ListPatternIntents pages through them).
"""

from __future__ import annotations

from pml_server._proto.pml.v1 import resources_pb2
from pml_server.domain import yielding
from pml_server.domain.limits import LIMITS

PATTERN_BYTES = LIMITS.answer_pattern.bound  # one pattern in a Suggest or list answer
TRIMMED_TEXT_CHARS = 8 * 1024  # `original_code` and `template` of a trimmed pattern
TRIMMED_VALUE_CHARS = 256  # each recent value kept in a trimmed pattern
TRIMMED_INTENTS = 16
RESPONSE_BYTES = LIMITS.answer.bound  # a whole Suggest or list answer
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
    """Trim `out` in place to about `PATTERN_BYTES` if it is larger."""
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


def fits(used_bytes: int, item_bytes: int, count: int) -> bool:
    """Whether an item of `item_bytes` still fits an answer holding `count` items of
    `used_bytes`; the first item always does (trimmed, it is at most `PATTERN_BYTES`)."""
    return count == 0 or used_bytes + item_bytes <= RESPONSE_BYTES
