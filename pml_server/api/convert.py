"""Proto <-> domain conversion. Requests are validated (`validate`) while they are converted."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypeVar

from google.protobuf import timestamp_pb2
from google.protobuf.message import Message

from pml_server._proto.pml.v1 import pml_pb2, resources_pb2
from pml_server.api import validate
from pml_server.api.admission import budget
from pml_server.api.validate import Violations
from pml_server.domain import model, yielding
from pml_server.domain.limits import Limits
from pml_server.ranking.plans import DEFAULT_PLAN_SIZE, MAX_PLAN_SIZE

PATTERNS = "patterns"
CAPABILITIES = "capabilities"

_STATUS_FROM_PROTO = {
    resources_pb2.EXECUTION_STATUS_SUCCESS: model.ExecutionStatus.SUCCESS,
    resources_pb2.EXECUTION_STATUS_FAILURE: model.ExecutionStatus.FAILURE,
}
_OUTCOME_TO_PROTO = {
    model.CaptureOutcome.SAVED: resources_pb2.CAPTURE_OUTCOME_SAVED,
    model.CaptureOutcome.COUNTED: resources_pb2.CAPTURE_OUTCOME_COUNTED,
    model.CaptureOutcome.REJECTED: resources_pb2.CAPTURE_OUTCOME_REJECTED,
}
_RETENTION_TO_PROTO = {
    model.RetentionAction.REMOVAL_CANDIDATE: resources_pb2.RETENTION_ACTION_REMOVAL_CANDIDATE,
    model.RetentionAction.REMOVED: resources_pb2.RETENTION_ACTION_REMOVED,
    model.RetentionAction.STALE: resources_pb2.RETENTION_ACTION_STALE,
    model.RetentionAction.SUPERSEDED: resources_pb2.RETENTION_ACTION_SUPERSEDED,
}


def name(collection: str, ident: str) -> str:
    return f"{collection}/{ident}" if ident else ""


def _ms(ts: timestamp_pb2.Timestamp) -> int:
    return ts.seconds * 1000 + ts.nanos // 1_000_000


def _ts(ms: int) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    _set_ts(ts, ms)
    return ts


# 9999-12-31T23:59:59.999Z, the last instant a Timestamp may hold.
_LAST_TIMESTAMP_MS = validate.LAST_SECOND * 1000 + 999


def _set_ts(ts: timestamp_pb2.Timestamp, ms: int) -> None:
    """`ts` set to `ms` since the epoch; 0 (never) leaves it unset, as before. A time in the
    Timestamp's range is set field by field: `FromMilliseconds`, a Python method that checks
    the range again, was a tenth of a Suggest answer's conversion (two a pattern and one an
    intent)."""
    if 0 < ms <= _LAST_TIMESTAMP_MS:
        seconds, millis = divmod(ms, 1000)
        ts.seconds = seconds
        ts.nanos = millis * 1_000_000
    elif ms:
        ts.FromMilliseconds(ms)  # before 1970, or out of range (it raises)


def check_status(out: Violations, field: str, value: int) -> None:
    """An `ExecutionStatus` this server knows. proto3 keeps any number a client sends: an
    unknown one (a newer client's status) was read as unset, and so counted a success whenever
    every tool call succeeded."""
    if value != resources_pb2.EXECUTION_STATUS_UNSPECIFIED and value not in _STATUS_FROM_PROTO:
        out.add(
            field,
            f"unknown ExecutionStatus {value}: use EXECUTION_STATUS_SUCCESS, "
            "EXECUTION_STATUS_FAILURE or leave it unset",
        )


def _status(
    value: resources_pb2.ExecutionStatus.ValueType, tool_calls: Sequence[model.ToolCall]
) -> model.ExecutionStatus:
    if value in _STATUS_FROM_PROTO:
        return _STATUS_FROM_PROTO[value]
    ok = all(call.ok for call in tool_calls)
    return model.ExecutionStatus.SUCCESS if ok else model.ExecutionStatus.FAILURE


def tool_call(
    msg: resources_pb2.ToolCall, field: str, out: Violations, limits: Limits
) -> model.ToolCall:
    validate.check_tool_call(out, field, msg.tool, msg.arguments_json, msg.error, limits)
    validate.check_timestamp(out, f"{field}.start_time", msg.start_time)
    if not math.isfinite(msg.duration_ms) or msg.duration_ms < 0:
        out.add(f"{field}.duration_ms", "must be a finite number >= 0")
    return model.ToolCall(
        tool=msg.tool,
        arguments_json=msg.arguments_json or "{}",
        ok=msg.ok,
        error=msg.error,
        started_at_ms=_ms(msg.start_time),
        duration_ms=msg.duration_ms,
    )


def execution_record(
    msg: resources_pb2.ExecutionRecord,
    field: str,
    limits: Limits,
    embedding_dim: int,
    default_request_id: str = "",
) -> model.ExecutionRecord:
    """A validated domain record; raises InvalidArgumentError listing every bad field."""
    out = Violations()
    validate.check_request_id(
        out, f"{field}.request_id", msg.request_id or default_request_id, required=True
    )
    validate.check_intent(out, f"{field}.intent", msg.intent, limits)
    validate.check_code(out, f"{field}.code", msg.code, limits)
    validate.check_language(out, f"{field}.language", msg.language)
    too_many_calls = limits.tool_calls.excess(msg.tool_calls)
    if too_many_calls is not None:
        out.add(f"{field}.tool_calls", too_many_calls)
        calls: tuple[model.ToolCall, ...] = ()
    else:
        calls = tuple(
            tool_call(c, f"{field}.tool_calls[{i}]", out, limits)
            for i, c in enumerate(msg.tool_calls)
        )
    trace_excess = limits.trace.excess(msg.trace)
    if trace_excess is not None:
        out.add(f"{field}.trace", trace_excess)
    validate.check_timestamp(out, f"{field}.start_time", msg.start_time)
    if not math.isfinite(msg.duration_ms) or msg.duration_ms < 0:
        out.add(f"{field}.duration_ms", "must be a finite number >= 0")
    check_status(out, f"{field}.status", msg.status)
    embedding = validate.check_embedding(
        out, f"{field}.intent_embedding", msg.intent_embedding, embedding_dim
    )
    validate.check_tags(out, f"{field}.tags", msg.tags, limits)
    validate.check_session_id(out, f"{field}.session_id", msg.session_id)
    out.raise_if_any()
    return model.ExecutionRecord(
        request_id=msg.request_id or default_request_id,
        intent=msg.intent,
        code=msg.code,
        language=msg.language,
        tool_calls=calls,
        status=_status(msg.status, calls),
        started_at_ms=_ms(msg.start_time),
        duration_ms=msg.duration_ms,
        trace=msg.trace,
        intent_embedding=embedding,
        tags=tuple(msg.tags),
        session_id=msg.session_id,
    )


def suggest_query(
    msg: pml_pb2.SuggestRequest, limits: Limits, embedding_dim: int
) -> model.SuggestQuery:
    out = Violations()
    context = None
    if msg.HasField("context"):
        validate.check_context(out, msg.context, limits)
        context = model.SuggestContext(
            session_id=msg.context.session_id,
            previous_patterns=tuple(msg.context.previous_patterns),
            previous_tools=tuple(msg.context.previous_tools),
        )
    if msg.intent.strip() or context is None or not context.names_a_step():
        validate.check_intent(out, "intent", msg.intent, limits)
    else:
        # without an intent (a blank one, as the engine reads it) a context naming a previous
        # step asks what usually comes next (docs/ranking.md, Sessions): its length only
        validate.check_text(out, "intent", msg.intent, limits.intent)
    embedding = validate.check_embedding(
        out, "intent_embedding", msg.intent_embedding, embedding_dim
    )
    min_match = msg.min_match if msg.HasField("min_match") else None
    min_success = msg.min_success if msg.HasField("min_success") else None
    validate.unit_interval(out, "min_match", min_match)
    validate.unit_interval(out, "min_success", min_success)
    validate.check_tags(out, "tags", msg.tags, limits)
    available: tuple[str, ...] | None = None
    if msg.HasField("available_tools"):
        available = tuple(msg.available_tools.tools)
        validate.check_available_tools(out, available, limits)
    plan_size = msg.plan_size if msg.HasField("plan_size") else DEFAULT_PLAN_SIZE
    if not 0 <= plan_size <= MAX_PLAN_SIZE:
        out.add("plan_size", f"must be 0..{MAX_PLAN_SIZE} (unset means {DEFAULT_PLAN_SIZE})")
    if not 0 <= msg.page_size <= limits.suggestions.bound:
        out.add("page_size", f"must be 1..{limits.suggestions.bound} (0 means the default)")
    out.raise_if_any()
    return model.SuggestQuery(
        intent=msg.intent,
        k=validate.suggestion_count(msg.page_size),
        intent_embedding=embedding,
        min_match=min_match,
        min_success=min_success,
        include_flagged=msg.include_flagged,
        available_tools=available,
        tags=tuple(msg.tags),
        explain=msg.explain,
        plan_size=plan_size,
        context=context,
    )


# ---- domain -> proto ---------------------------------------------------------------------------


def capture_result(result: model.CaptureResult) -> resources_pb2.CaptureResult:
    return resources_pb2.CaptureResult(
        outcome=_OUTCOME_TO_PROTO[result.outcome],
        pattern=name(PATTERNS, result.pattern_id),
        capability=name(CAPABILITIES, result.capability_id),
        new_pattern=result.new_pattern,
        tool_failures=[
            resources_pb2.ToolFailure(tool=f.tool, error=f.error) for f in result.tool_failures
        ],
        tool_mismatch=result.tool_mismatch,
        replayed=result.replayed,
    )


_ARG_KIND_TO_PROTO = {
    "parameter": resources_pb2.StepArgument.KIND_PARAMETER,
    "literal": resources_pb2.StepArgument.KIND_LITERAL,
    "reference": resources_pb2.StepArgument.KIND_REFERENCE,
    "unknown": resources_pb2.StepArgument.KIND_UNKNOWN,
}


def pattern(view: model.PatternView) -> resources_pb2.Pattern:
    out = resources_pb2.Pattern()
    fill_pattern(out, view)
    return out


def fill_pattern(out: resources_pb2.Pattern, view: model.PatternView) -> None:
    """Write `view` into `out` in place. Building nested messages bottom-up and passing them as
    constructor arguments copies each one into its parent; filling the parent's own fields does
    not (a Suggest answer cost a few times more the other way)."""
    out.name = name(PATTERNS, view.id)
    out.code_hash = view.code_hash
    out.template = view.template
    out.original_code = view.original_code
    out.language = view.language
    out.tools_used.extend(view.tools_used)
    for p in view.params:
        yielding.checkpoint()
        param = out.parameters.add(name=p.name, json_type=p.json_type, secret=p.secret)
        param.recent_values_json.extend(p.recent_values_json)
    out.parameter_schema_json = view.parameter_schema_json
    out.usage_count = view.usage_count
    out.success_count = view.success_count
    out.failure_count = view.failure_count
    _set_ts(out.create_time, view.first_seen_ms)
    _set_ts(out.last_used_time, view.last_used_ms)
    out.mean_duration_ms = view.mean_duration_ms
    out.capability = name(CAPABILITIES, view.capability_id)
    for i in view.intents:
        _fill_intent(out.intents.add(), i)
    out.intent_count = view.intent_count
    out.flagged_for_removal = view.flagged_for_removal
    out.superseded_by = name(PATTERNS, view.superseded_by)
    out.tool_mismatch_count = view.tool_mismatch_count
    for index, s in enumerate(view.steps):
        yielding.checkpoint()
        step = out.steps.add(index=index, tool=s.tool, flow_known=s.flow_known)
        step.depends_on.extend(s.depends_on)
        for a in s.arguments:
            arg = step.arguments.add(name=a.name, kind=_ARG_KIND_TO_PROTO.get(a.kind, 0))
            arg.parameters.extend(a.parameters)
            for source_step, path in a.sources:
                arg.sources.add(step=source_step, path=path)


def _fill_intent(out: resources_pb2.Intent, view: model.IntentView) -> None:
    out.id, out.text, out.hit_count = view.id, view.text, view.hit_count
    _set_ts(out.last_seen_time, view.last_seen_ms)


def got_pattern(view: model.PatternView) -> resources_pb2.Pattern:
    """A pattern as GetPattern answers it: whole, but for what does not fit its answer
    (`budget.fit_whole`: never its code or template)."""
    out = pattern(view)
    budget.fit_whole(out)
    return out


def intent(view: model.IntentView) -> resources_pb2.Intent:
    out = resources_pb2.Intent()
    _fill_intent(out, view)
    return out


def intent_page(
    intents: Sequence[model.IntentView], cursor: str
) -> tuple[list[resources_pb2.Intent], str]:
    """A ListPatternIntents page of `intents` (the engine's page, `cursor` after it), ending
    early past the answer's byte budget as `pattern_page`; and the cursor after the last one
    kept ("" at the end)."""
    return _budgeted_page(intents, cursor, intent)


def capability(view: model.CapabilityView) -> resources_pb2.Capability:
    return resources_pb2.Capability(
        name=name(CAPABILITIES, view.id),
        tools=list(view.tools),
        patterns=[name(PATTERNS, p) for p in view.pattern_ids],
        best_pattern=name(PATTERNS, view.best_pattern_id),
        intents=list(view.intents),
        usage_count=view.usage_count,
        success_count=view.success_count,
        failure_count=view.failure_count,
        last_used_time=_ts(view.last_used_ms),
        pattern_count=view.pattern_count,
    )


def score(parts: model.ScoreParts) -> resources_pb2.ScoreParts:
    out = resources_pb2.ScoreParts()
    _fill_score(out, parts)
    return out


def _fill_score(out: resources_pb2.ScoreParts, parts: model.ScoreParts) -> None:
    out.match = parts.match
    out.semantic = parts.semantic
    out.lexical = parts.lexical
    out.success_estimate = parts.success_estimate
    out.usage = parts.usage
    out.recency = parts.recency
    out.superseded_penalty = parts.superseded_penalty
    out.total = parts.total
    out.reliability = parts.reliability
    out.steps = parts.steps
    out.transition = parts.transition


def listed_pattern(view: model.PatternView) -> resources_pb2.Pattern:
    """A pattern as a Suggest or list answer carries it: trimmed past its byte budget."""
    out = pattern(view)
    budget.trim_pattern(out)
    return out


def pattern_page(
    views: Sequence[model.PatternView], next_cursor: str
) -> tuple[list[resources_pb2.Pattern], str]:
    """The patterns of a listing page that fit its byte budget, and the cursor after the
    last one kept (the engine's `next_cursor` when all fit)."""
    return _budgeted_page(views, next_cursor, listed_pattern)


def capability_page(
    views: Sequence[model.CapabilityView], next_cursor: str
) -> tuple[list[resources_pb2.Capability], str]:
    """The capabilities of a listing page that fit its byte budget, as `pattern_page`. A
    capability holds up to 50 intents of 4 KiB: a page of 30 was 6 MB, past any default
    client's 4 MiB."""
    return _budgeted_page(views, next_cursor, capability)


_View = TypeVar("_View", model.PatternView, model.CapabilityView, model.IntentView)
_Message = TypeVar("_Message", bound=Message)


def _budgeted_page(
    views: Sequence[_View], next_cursor: str, to_proto: Callable[[_View], _Message]
) -> tuple[list[_Message], str]:
    """`views` as messages while they fit the answer's byte budget (`budget.fits`: the first
    always); when one does not, the page ends before it, its cursor the last kept view's id."""
    kept: list[_Message] = []
    used = 0
    for view in views:
        out = to_proto(view)
        size = budget.item_bytes(out)
        if not budget.fits(used, size, len(kept)):
            return kept, views[len(kept) - 1].id
        kept.append(out)
        used += size
    return kept, next_cursor


def suggest_response(result: model.SuggestResult) -> pml_pb2.SuggestResponse:
    """Best first, as many as fit the answer's byte budget (the rest are the worst ranked).
    With `explain`, the filtered candidates are budgeted first (`budget.FILTERED_BYTES`, each
    detail cut), so that an answer explaining what was removed is whole and fits a client's
    default limit: outside the budget, long details took one past 4 MiB (docs/api.md)."""
    reply = pml_pb2.SuggestResponse()
    used = _filtered(reply, result.filtered)
    for n, s in enumerate(result.suggestions):
        # Filled in place: appending a finished item would copy it into the answer.
        item = reply.suggestions.add(capability=name(CAPABILITIES, s.capability_id))
        fill_pattern(item.pattern, s.pattern)
        budget.trim_pattern(item.pattern)
        _fill_score(item.score, s.score)
        size = budget.item_bytes(item)
        if not budget.fits(used, size, n):
            del reply.suggestions[n:]
            break
        used += size
    reply.read_as_follow_up = result.read_as_follow_up
    reply.removed_by_filters = result.removed_by_filters
    reply.missing_tools.extend(result.missing_tools)
    for plan in result.plans:
        item_plan = reply.plans.add()
        _fill_plan(item_plan, plan)
        size = budget.item_bytes(item_plan)
        if not budget.fits(used, size, 1):  # a plan never crowds out the suggestions
            del reply.plans[len(reply.plans) - 1 :]
            break
        used += size
    return reply


def _filtered(reply: pml_pb2.SuggestResponse, filtered: Sequence[model.FilteredCandidate]) -> int:
    """`filtered` into `reply`, each detail cut (`budget.trim_detail`), the first ones within
    `budget.FILTERED_BYTES`; the bytes they take."""
    used = 0
    for n, f in enumerate(filtered):
        item = reply.filtered.add(
            capability=name(CAPABILITIES, f.capability_id),
            pattern=name(PATTERNS, f.pattern_id),
            rule=f.rule,
            detail=budget.trim_detail(f.detail),
        )
        if f.score is not None:
            _fill_score(item.score, f.score)
        size = budget.item_bytes(item)
        if used + size > budget.FILTERED_BYTES:
            del reply.filtered[n:]
            break
        used += size
    return used


def _fill_plan(out: resources_pb2.Plan, plan: model.Plan) -> None:
    """`plan` into `out` in place (docs/ranking.md, Plans)."""
    for part in plan.parts:
        s = part.suggestion
        item = out.parts.add()
        item.suggestion.capability = name(CAPABILITIES, s.capability_id)
        fill_pattern(item.suggestion.pattern, s.pattern)
        budget.trim_pattern(item.suggestion.pattern)
        _fill_score(item.suggestion.score, s.score)
        item.covers.extend(plan.request_parts[n] for n in part.covers)
        item.covers_index.extend(part.covers)
        item.steps.extend(part.steps)
    for link in plan.links:
        out.links.add(
            from_part=link.from_part, output=link.output, to_part=link.to_part, input=link.input
        )
    score = plan.score
    out.score.coverage = score.coverage
    out.score.part_match.extend(score.part_match)
    out.score.part_reliability.extend(score.part_reliability)
    out.score.extra_part_cost = score.extra_part_cost
    out.score.unlinked_inputs = score.unlinked_inputs
    out.score.unlinked_input_cost = score.unlinked_input_cost
    out.score.total = score.total
    out.score.best_single = score.best_single
    out.tools.extend(plan.tools)


def failure(entry: model.FailureEntry) -> resources_pb2.Failure:
    return resources_pb2.Failure(
        request_id=entry.request_id,
        tool=entry.tool,
        error=entry.error,
        intent=entry.intent,
        code_hash=entry.code_hash,
        pattern=name(PATTERNS, entry.pattern_id),
        time=_ts(entry.time_ms),
    )


def retention(report: model.RetentionReport) -> pml_pb2.RunRetentionResponse:
    """The report's first entries, as many as fit the answer's byte budget (`budget.fits`)
    and at most `budget.RETENTION_ENTRIES`, with how many actions there were: a store with a
    million patterns due would otherwise answer past the gRPC message limit."""
    reply = pml_pb2.RunRetentionResponse(
        dry_run=report.dry_run,
        run_time=_ts(report.ran_at_ms),
        total_actions=len(report.entries),
    )
    used = 0
    for n, e in enumerate(report.entries):
        if n >= budget.RETENTION_ENTRIES:
            break
        entry = resources_pb2.RetentionEntry(
            pattern=name(PATTERNS, e.pattern_id),
            action=_RETENTION_TO_PROTO[e.action],
            reason=e.reason,
            superseded_by=name(PATTERNS, e.superseded_by),
        )
        size = budget.item_bytes(entry)
        if not budget.fits(used, size, n):
            break
        reply.entries.append(entry)
        used += size
    reply.truncated = len(reply.entries) < len(report.entries)
    return reply


def stats(s: model.Stats) -> pml_pb2.GetStatsResponse:
    return pml_pb2.GetStatsResponse(
        patterns=s.patterns,
        capabilities=s.capabilities,
        intents=s.intents,
        executions=s.executions,
        rejected=s.rejected,
        failures_logged=s.failures_logged,
    )
