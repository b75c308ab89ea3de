"""Per-execution capture decisions (docs/capture.md, Capture rules 1, 2, 4 and 7), free of storage.

Rule 1 (all-or-nothing), rule 2 (a failed run of a known pattern counts as a try), rule 4 (tools
used come from the record; a disagreement with the code is recorded, not dropped) and the
redaction and error signatures of rule 7 live here; rules 3, 5 and 6 need the store and are
applied by the engine with the helpers of this package.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from pml_server import _core
from pml_server.capture.normalize import NormalizedCode, NormalizedParam
from pml_server.domain.errors import FieldViolation, InvalidArgumentError
from pml_server.domain.limits import (
    LIMITS,
    Limit,
    Limits,
    language_problem,
    request_id_problem,
    session_id_problem,
    tool_name_problem,
)
from pml_server.domain.model import ExecutionRecord, ExecutionStatus, ToolFailure
from pml_server.domain.records import FailureSignature, PatternCounters

REDACTED = '"[REDACTED]"'
# Placeholder names and the schema of `LIMITS.parameters` parameters, beyond twice the code.
PATTERN_OVERHEAD_BYTES = 128 * 1024
MAX_STORED_VALUE_CHARS = 1024  # one recent value of a parameter, as JSON text
# A pattern's recent values in all, as JSON text (`within_budget`): 256 placeholders with 5
# values of 1 KiB each were 1.3 MB, rewritten by every capture of the pattern, and a thousand
# values a placeholder (`recent_values_per_param` goes to 1024) 256 MB.
RECENT_VALUES_CHARS = 256 * 1024


@dataclass(frozen=True)
class CaptureLimits:
    """The request limits of the one table (`fields`, the engine's configured one) and what a
    pattern keeps."""

    fields: Limits = field(default=LIMITS)
    recent_values_per_param: int = 5
    failure_signatures_per_pattern: int = 16


def validate_record(record: ExecutionRecord, limits: CaptureLimits) -> None:
    """Raise InvalidArgumentError naming every bad field of `record`."""
    bad: list[FieldViolation] = []
    table = limits.fields

    def check(name: str, value: str, limit: Limit) -> None:
        if not value.strip():
            bad.append(FieldViolation(name, "must not be empty"))
        elif (excess := limit.excess(value)) is not None:
            bad.append(FieldViolation(name, excess))

    check("request_id", record.request_id, table.request_id)
    check("intent", record.intent, table.intent)
    check("code", record.code, table.code)
    check("language", record.language, table.language)
    # Every transport's record passes here (gRPC, streams, MCP through gRPC, OTLP): the shape
    # and "no credential" rules of docs/api.md, Requests.
    for name, value, problem_of in (
        ("request_id", record.request_id, request_id_problem),
        ("language", record.language, language_problem),
    ):
        already = any(v.field == name for v in bad)
        if value.strip() and not already and (problem := problem_of(value)) is not None:
            bad.append(FieldViolation(name, problem))
    if (too_many := table.tool_calls.excess(record.tool_calls)) is not None:
        bad.append(FieldViolation("tool_calls", too_many))
    for i, call in enumerate(record.tool_calls[: table.tool_calls.bound]):
        name = f"tool_calls[{i}].tool"
        check(name, call.tool, table.tool)
        if call.tool.strip() and (problem := tool_name_problem(call.tool)) is not None:
            bad.append(FieldViolation(name, problem))
        if not math.isfinite(call.duration_ms) or call.duration_ms < 0:
            bad.append(FieldViolation(f"tool_calls[{i}].duration_ms", "must be finite and >= 0"))
    if not math.isfinite(record.duration_ms) or record.duration_ms < 0:
        bad.append(FieldViolation("duration_ms", "must be finite and >= 0"))
    if record.session_id and (problem := session_id_problem(record.session_id)) is not None:
        bad.append(FieldViolation("session_id", problem))
    if bad:
        raise InvalidArgumentError(bad)


def check_pattern_size(normalized: NormalizedCode, limits: CaptureLimits) -> None:
    """A pattern's stored text (template, code, schema) is bounded: the normalizer caps its
    parameters and their names, so only code built to grow its template (secrets redacted past
    the parameter cap) can reach this; it is refused naming `code`."""
    size = (
        len(normalized.template.encode("utf-8"))
        + len(normalized.redacted_code.encode("utf-8"))
        + len(normalized.schema_json)
    )
    bound = 2 * limits.fields.code.bound + PATTERN_OVERHEAD_BYTES
    if size > bound:
        raise InvalidArgumentError(
            FieldViolation("code", f"its pattern would be {size} bytes; the limit is {bound}")
        )


def tool_failures(record: ExecutionRecord) -> tuple[ToolFailure, ...]:
    return tuple(ToolFailure(c.tool, c.error) for c in record.tool_calls if not c.ok)


def run_succeeded(record: ExecutionRecord) -> bool:
    """Rule 1: a run counts as a success only if its status and every tool call succeeded."""
    return record.status is ExecutionStatus.SUCCESS and all(c.ok for c in record.tool_calls)


def tools_used(record: ExecutionRecord) -> tuple[str, ...]:
    """Rule 4: the ordered tool calls that succeeded, as the runtime observed them."""
    return tuple(c.tool for c in record.tool_calls if c.ok)


def tool_signature(tools: Sequence[str]) -> tuple[str, ...]:
    """The grouping signature: tools in order with consecutive repeats collapsed, so one loop
    that ran twice or three times gives the same signature."""
    out: list[str] = []
    for tool in tools:
        if not out or out[-1] != tool:
            out.append(tool)
    return tuple(out)


def tools_disagree(code_tools: Sequence[str], used: Sequence[str], parse_ok: bool) -> bool:
    """Rule 4: the code's statically read tool calls name other tools than the run used.
    Compared as sets: a loop or a branch legitimately changes counts and order at run time.
    A name agrees with the same name under or without its server's namespace, however each
    side writes it (`same_tool`). When the code did not parse, nothing was read statically and
    nothing can disagree."""
    if not parse_ok:
        return False
    code, run = set(code_tools), set(used)
    if code == run:
        return False
    return not (
        all(any(same_tool(c, r) for r in run) for c in code)
        and all(any(same_tool(c, r) for c in code) for r in run)
    )


def same_tool(a: str, b: str) -> bool:
    """The same tool, named with or without its server (docs/capture.md, rule 4): the core's
    rule, which `available_tools` applies too (`tool_names.rs`)."""
    return _core.same_tool(a, b)


def redacted_values(params: Sequence[NormalizedParam]) -> dict[str, str]:
    """Placeholder -> value (JSON text); secrets never reach the store, and a value longer than
    `MAX_STORED_VALUE_CHARS` is kept as its start (an example, not the data: a pattern's
    counters, rewritten by every capture, stay small)."""
    return {p.name: (REDACTED if p.secret else _bounded(p.value_json)) for p in params}


def _bounded(value_json: str) -> str:
    if len(value_json) <= MAX_STORED_VALUE_CHARS:
        return value_json
    value = json.loads(value_json)
    if not isinstance(value, str):
        return value_json  # a number: never this long in practice, and it must stay a number
    return json.dumps(value[: MAX_STORED_VALUE_CHARS // 2] + "…", ensure_ascii=False)


def push_recent(
    recent: dict[str, list[str]], values: dict[str, str], bound: int
) -> dict[str, list[str]]:
    """Newest first, no repeats, at most `bound` per placeholder, within
    `RECENT_VALUES_CHARS` (`within_budget`)."""
    merged = {name: list(vals) for name, vals in recent.items()}
    for name, value in values.items():
        kept = [v for v in merged.get(name, []) if v != value]
        merged[name] = [value, *kept][:bound]
    return within_budget(merged)


def within_budget(recent: dict[str, list[str]]) -> dict[str, list[str]]:
    """`recent` (newest first) with its oldest values dropped, all placeholders alike, until
    their JSON texts hold at most `RECENT_VALUES_CHARS` in all; each keeps its newest value
    (docs/capture.md, The three levels)."""
    size = sum(len(v) for values in recent.values() for v in values)
    depth = max((len(values) for values in recent.values()), default=0)
    if size <= RECENT_VALUES_CHARS:
        return recent
    kept = {name: list(values) for name, values in recent.items()}
    while size > RECENT_VALUES_CHARS and depth > 1:
        depth -= 1
        for values in kept.values():
            while len(values) > depth:
                size -= len(values.pop())
    return kept


_NUMBER = re.compile(r"\b0x[0-9a-fA-F]+\b|\b\d+(\.\d+)?\b")
_QUOTED = re.compile(r"\"[^\"]*\"|'[^']*'")


def error_signature(tool: str, error: str) -> str:
    """`tool: error` with numbers and quoted values blanked, so "timeout after 30s" and
    "timeout after 31s" are one kind of failure."""
    text = _QUOTED.sub("'?'", error.strip())
    text = _NUMBER.sub("#", text)
    return f"{tool}: {' '.join(text.split())[:200]}"


def count_success(
    counters: PatternCounters,
    record: ExecutionRecord,
    values: dict[str, str],
    mismatch: bool,
    now_ms: int,
    limits: CaptureLimits,
) -> PatternCounters:
    """Rule 2 (success) and rule 3 (a new pattern starts from zero counters: usage=1, success=1)."""
    return replace(
        counters,
        usage=counters.usage + 1,
        success=counters.success + 1,
        last_used_ms=now_ms,
        # saturated: a sum of finite durations may overflow, and no stored float may be infinite
        duration_sum_ms=min(counters.duration_sum_ms + record.duration_ms, sys.float_info.max),
        duration_runs=counters.duration_runs + 1,
        mismatch_count=counters.mismatch_count + (1 if mismatch else 0),
        recent_values=push_recent(counters.recent_values, values, limits.recent_values_per_param),
        tags=pattern_tags(counters.tags, record.tags),
    )


def pattern_tags(kept: Sequence[str], added: Sequence[str]) -> list[str]:
    """A pattern's tags after a successful run tagged `added`, sorted: those it has stay, and
    the run's new ones join (in order of name) while it holds fewer than `LIMITS.tags.bound`.
    Keeping the first names of all seen instead let a run with many tags push out one that
    earlier runs carried (and that later runs carrying it could never bring back): a Suggest
    filtered on it stopped finding the pattern."""
    tags = set(kept)
    for tag in sorted(set(added) - tags):
        if len(tags) >= LIMITS.tags.bound:
            break
        tags.add(tag)
    return sorted(tags)


def count_failed_try(
    counters: PatternCounters,
    record: ExecutionRecord,
    values: dict[str, str],
    now_ms: int,
    limits: CaptureLimits,
) -> PatternCounters:
    """Rule 2 (a failed run of a known pattern) and rule 7 (its values and error signature)."""
    failures = tool_failures(record) or (ToolFailure("", "execution failed"),)
    signatures = list(counters.failure_signatures)
    for failure in failures:
        signature = error_signature(failure.tool, failure.error)
        found = next((i for i, s in enumerate(signatures) if s.signature == signature), None)
        if found is None:
            entry = FailureSignature(signature, failure.tool, failure.error, 1, now_ms, values)
        else:
            old = signatures.pop(found)
            entry = replace(old, count=old.count + 1, last_ms=now_ms, values_json=values)
        signatures.insert(0, entry)
    return replace(
        counters,
        usage=counters.usage + 1,
        failure=counters.failure + 1,
        last_used_ms=now_ms,
        failure_signatures=signatures[: limits.failure_signatures_per_pattern],
    )


def merged_counters(
    kept: PatternCounters, merged: PatternCounters, limits: CaptureLimits
) -> PatternCounters:
    """The counters of a pattern `merged` into the pattern `kept` (two patterns an older build
    made of one code: docs/storage.md, Migrations): counts summed, the latest use, each
    placeholder's recent values and the failure signatures of both, the more recently used
    pattern's first, bounded as a capture bounds them, and the tags of both. The intent
    summary is the caller's (it depends on the intents merged)."""
    newer, older = (merged, kept) if merged.last_used_ms > kept.last_used_ms else (kept, merged)
    recent: dict[str, list[str]] = {}
    for name in {*newer.recent_values, *older.recent_values}:
        values = [*newer.recent_values.get(name, []), *older.recent_values.get(name, [])]
        recent[name] = list(dict.fromkeys(values))[: limits.recent_values_per_param]
    recent = within_budget(recent)
    signatures: dict[str, FailureSignature] = {}
    for signature in (*newer.failure_signatures, *older.failure_signatures):
        seen = signatures.get(signature.signature)
        signatures[signature.signature] = (
            signature
            if seen is None
            else replace(
                seen,
                count=seen.count + signature.count,
                last_ms=max(seen.last_ms, signature.last_ms),
            )
        )
    ordered = sorted(signatures.values(), key=lambda s: -s.last_ms)
    return replace(
        kept,
        usage=kept.usage + merged.usage,
        success=kept.success + merged.success,
        failure=kept.failure + merged.failure,
        last_used_ms=newer.last_used_ms,
        duration_sum_ms=min(kept.duration_sum_ms + merged.duration_sum_ms, sys.float_info.max),
        duration_runs=kept.duration_runs + merged.duration_runs,
        mismatch_count=kept.mismatch_count + merged.mismatch_count,
        recent_values=recent,
        failure_signatures=ordered[: limits.failure_signatures_per_pattern],
        tags=pattern_tags(kept.tags, merged.tags),
    )
