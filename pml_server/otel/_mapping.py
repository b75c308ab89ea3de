"""OTLP spans -> executions, following the GenAI semantic conventions (docs/capture.md, "OTLP
traces").

- An execution is an `invoke_agent` span, or, in a trace of the request with no agent span, each
  root span (no parent).
- Its tool calls are its outermost tool-call descendants (`execute_tool`, or MCP `tools/call`),
  not crossing a nested agent span, in start order. A tool-call span under another one (the MCP
  client span inside an `execute_tool` span, or the MCP server's span of the same call) is the
  same call seen twice: ignored.
- A call whose execution span is not in the request (a run still going when its batch processor
  flushed) waits, with the spans that may link it to its execution, in `MappedBatch.waiting`;
  the server holds them until a later request brings the execution span.
- A run with no tool call teaches nothing: its span is ignored, like every non-GenAI span; an
  agent span with no call in the request is also named in `MappedBatch.idle`, since its calls
  may come in later requests (the server holds it a short while: docs/capture.md, "Runs split
  over several Exports").
- A malformed span rejects its execution (every span of it), never the rest of the request.
- A span id that comes twice in a request is one span seen twice when both copies are equal
  (ignored), and malformed when they differ: which one the run made is not known.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from pml_server.domain.limits import LIMITS, intent_problem, session_id_problem
from pml_server.domain.sessions import digest_stand_in
from pml_server.otel import _attributes as attr
from pml_server.otel._code import LANGUAGE, synthesize

TRACE_ID_BYTES = 16
SPAN_ID_BYTES = 8
REQUEST_ID_PREFIX = "otel:"
TAG = "otel"
# The namespace of the attributes pml sets on the spans it holds (`INCOMPLETE_LINKS`, `SETTLING`,
# `HELD_TOO_LARGE`, `HELD_CONVERSATION_REFUSED`): dropped from the spans a client sends
# (`flatten`), so only pml's held forms carry them.
OWN_PREFIX = "pml.otlp."
# The held marker of a trace whose waiting spans were refused (`otlp_pending_spans`): span id 0
# (no span has it), the ids of the spans lost and of their parents as an array of bytes.
INCOMPLETE_SPAN_ID = bytes(SPAN_ID_BYTES)
INCOMPLETE_LINKS = OWN_PREFIX + "incomplete.links"
# The attribute marking the held form of an agent span that arrived with no call, held while
# its calls may still arrive (`pml_server.storage.pending_spans`, "settling").
SETTLING = OWN_PREFIX + "settling"
# `pml_server.otel._held.TOO_LARGE`: a held call whose run validation would refuse for its size.
HELD_TOO_LARGE = OWN_PREFIX + "held.too_large"
# `pml_server.otel._held`: why a held span's `gen_ai.conversation.id`, not held, is no usable
# session id (`session_id_problem`), for the warning of its run (`_unused_conversation`).
HELD_CONVERSATION_REFUSED = OWN_PREFIX + "held.conversation_refused"
# Where the intent came from, kept as a tag (`intent:<source>`).
FROM_MESSAGES = "input_messages"
FROM_AGENT_NAME = "agent_name"
FROM_SPAN_NAME = "span_name"


@dataclass(frozen=True)
class MappedCall:
    tool: str
    ok: bool
    error: str
    arguments_json: str
    duration_ms: float
    span_id: bytes = b""
    ended_ns: int = 0  # `end_time_unix_nano` (`MappedExecution.shorter_runs`)


@dataclass(frozen=True)
class MappedExecution:
    request_id: str
    intent: str
    code: str
    language: str
    calls: tuple[MappedCall, ...]
    duration_ms: float
    tags: tuple[str, ...]  # the OTLP tag and `intent:<where its intent came from>`
    # Spans this execution consumed (its own and its tool calls'), for the OTLP counts.
    span_count: int
    trace_id: bytes  # of the execution span
    span_id: bytes
    # The run's `gen_ai.conversation.id`, else its trace id (docs/ranking.md, Sessions).
    session_id: str = ""
    # Why a `gen_ai.conversation.id` of the run was not used as its session (a warning of the
    # answer, "span <ref>: ..."), else "".
    session_note: str = ""
    # The execution span itself failed (`error.type` set or an error status), whatever its
    # calls did: an agent that crashed or gave up after calls that succeeded.
    failed: bool = False
    call_ids: frozenset[bytes] = frozenset()  # the span ids of its calls
    ended_ns: int = 0  # its execution span's `end_time_unix_nano`

    @property
    def span(self) -> str:
        """The execution span as "<trace id hex>/<span id hex>"."""
        return f"{self.trace_id.hex()}/{self.span_id.hex()}"

    def shorter_runs(self, most: int) -> list[MappedExecution]:
        """This run as an Export that brought its root before some of its calls had ended
        captured it: without the calls that ended after its root and after a point, the
        latest point first (all calls but those that ended last, ...; last, none of those that
        ended after the root), at most `most` of them; none when no call ended after the root.
        A root sent again with a call that ended after it, in a process that no longer
        remembers its run (a restart, another replica), is that run when one of these replays
        its capture (docs/capture.md, "Spans arriving after their run was mapped")."""
        ends = sorted({c.ended_ns for c in self.calls if c.ended_ns > self.ended_ns}, reverse=True)
        runs: list[MappedExecution] = []
        for end in ends[:most]:
            kept = tuple(c for c in self.calls if c.ended_ns < end)
            if not kept:
                break
            lines = [(c.tool, json.loads(c.arguments_json)) for c in kept]
            runs.append(
                replace(
                    self,
                    calls=kept,
                    code=synthesize(lines),
                    span_count=self.span_count - (len(self.calls) - len(kept)),
                    call_ids=frozenset(c.span_id for c in kept),
                )
            )
        return runs

    def root_alone(self) -> MappedExecution | None:
        """This run without a call, when every call of it ended after its root (such calls may
        all have come after the Export that captured the root, and held since), else None.
        Never captured: a run whose request id was captured is that capture when only such
        calls are left to map its root with (docs/capture.md, "Spans arriving after their run
        was mapped")."""
        if not self.calls or any(c.ended_ns <= self.ended_ns for c in self.calls):
            return None
        return replace(
            self,
            calls=(),
            code="",
            span_count=self.span_count - len(self.calls),
            call_ids=frozenset(),
        )

    def calls_beyond(self, shorter: MappedExecution) -> list[str]:
        """The references ("<trace id hex>/<span id hex>") of this run's calls that `shorter`
        (one of `shorter_runs`, or `root_alone`) leaves out."""
        trace = self.trace_id.hex()
        return [
            f"{trace}/{c.span_id.hex()}" for c in self.calls if c.span_id not in shorter.call_ids
        ]


@dataclass(frozen=True)
class Rejection:
    span: str  # "<trace id hex>/<span id hex>"
    reason: str
    span_count: int


@dataclass
class MappedBatch:
    executions: list[MappedExecution] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    ignored_spans: int = 0
    # Per trace id: spans waiting for their execution span, which is not in this request (a
    # tool call whose run has not ended yet, and the spans that may lie between them).
    waiting: dict[bytes, list[trace_pb2.Span]] = field(default_factory=dict)
    # Per trace: the spans of the executions mapped (each execution span and every span below
    # it): a span arriving later below one of them belongs to a run already mapped.
    settled: dict[bytes, set[bytes]] = field(default_factory=dict)
    # Per trace: the tool-call spans among `settled` (each run's calls and the calls seen twice
    # below them): a late span below one of them is that call seen twice, not a call of its own.
    settled_calls: dict[bytes, set[bytes]] = field(default_factory=dict)
    # Per trace: its agent spans with no tool call in this request (counted as ignored).
    idle: dict[bytes, list[trace_pb2.Span]] = field(default_factory=dict)
    # Per trace with no call waiting: its spans that are no call and have no execution span
    # above them in this request (counted as ignored). They may link calls still to come to a
    # root held settling: the server holds them then (docs/capture.md, "A root span that
    # arrives first").
    unlinked: dict[bytes, list[trace_pb2.Span]] = field(default_factory=dict)
    # Per trace with a run mapped: the conversations its runs' spans name (`named`), for a
    # later Export of the trace (`map_spans`, `conversations`).
    conversations: dict[bytes, frozenset[str]] = field(default_factory=dict)

    @property
    def rejected_spans(self) -> int:
        return sum(r.span_count for r in self.rejections)


@dataclass
class _Span:
    proto: trace_pb2.Span
    attrs: dict[str, Any]
    is_agent: bool
    tool: str | None  # None: not a tool call

    @property
    def ref(self) -> str:
        return f"{self.proto.trace_id.hex()}/{self.proto.span_id.hex()}"


class _BadSpanError(ValueError):
    def __init__(self, span: _Span, reason: str) -> None:
        super().__init__(reason)
        self.span = span
        self.reason = reason


def flatten(request: Any) -> tuple[list[trace_pb2.Span], int]:
    """Every span of an `ExportTraceServiceRequest` a client sent, and how many of them came
    with attributes in pml's own namespace (`OWN_PREFIX`), which are dropped: the marks pml
    sets on the spans it holds are read only from its held forms, never from a client
    (docs/capture.md, What a held span keeps). Sent, `pml.otlp.held.too_large` rejected its
    run for a made-up reason, `pml.otlp.held.conversation_refused` planted a made-up warning,
    and `pml.otlp.incomplete.links` on a span of the marker's id (all zero) rejected the runs it
    named, that span counted nowhere; such a span is now rejected for its id."""
    spans: list[trace_pb2.Span] = []
    marked = 0
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                own = [i for i, kv in enumerate(span.attributes) if kv.key.startswith(OWN_PREFIX)]
                if own:
                    marked += 1
                    for i in reversed(own):
                        del span.attributes[i]
                spans.append(span)
    return spans, marked


def map_spans(
    spans: Iterable[trace_pb2.Span],
    max_intent_chars: int = LIMITS.intent.bound,
    conversations: dict[bytes, frozenset[str]] | None = None,
) -> MappedBatch:
    """Map `spans`; `conversations`: per trace, the conversations its runs mapped in earlier
    Exports named (`MappedBatch.conversations`), so a run naming none is in the one its trace
    named (docs/ranking.md, Sessions)."""
    batch = MappedBatch()
    traces: dict[bytes, dict[bytes, _Span]] = {}
    lost: dict[bytes, tuple[trace_pb2.Span, set[bytes]]] = {}
    conflicts: dict[bytes, set[bytes]] = {}  # per trace: span ids sent with different content
    for proto in spans:
        if proto.span_id == INCOMPLETE_SPAN_ID and (links := incomplete_links(proto)):
            if proto.trace_id in lost:  # held, and remembered in memory: one marker
                links |= lost[proto.trace_id][1]
                proto = incomplete_marker(proto.trace_id, links)
            lost[proto.trace_id] = (proto, links)
            continue
        if (
            len(proto.trace_id) != TRACE_ID_BYTES
            or len(proto.span_id) != SPAN_ID_BYTES
            or not any(proto.trace_id)
            or not any(proto.span_id)
        ):
            # All-zero ids are invalid (W3C trace context); a zero span id would also be held
            # under the key of its trace's marker of lost spans.
            reason = "trace_id must be 16 bytes, span_id 8, neither all zero"
            batch.rejections.append(Rejection(_ref(proto), reason, 1))
            continue
        trace = traces.setdefault(proto.trace_id, {})
        if (earlier := trace.get(proto.span_id)) is not None:
            if earlier.proto == proto:  # the same span twice (an Export merged with its retry)
                batch.ignored_spans += 1
            else:  # kept out of its run, which is rejected (`_map_trace`), and counted there
                conflicts.setdefault(proto.trace_id, set()).add(proto.span_id)
                reason = "sent twice with different content: which one the run made is unknown"
                batch.rejections.append(Rejection(_ref(proto), reason, 1))
            continue
        attrs = attr.attributes(proto)
        trace[proto.span_id] = _Span(
            proto, attrs, attr.is_agent(attrs), attr.tool_name(proto, attrs)
        )
    for trace_id, trace in traces.items():
        marker, links = lost.get(trace_id, (None, set()))
        twice = conflicts.get(trace_id, set())
        named_before = conversations.get(trace_id, frozenset()) if conversations else frozenset()
        _map_trace(trace, batch, max_intent_chars, links, twice, named_before)
        if marker is not None:  # kept: other runs of the trace may have lost spans too
            batch.waiting.setdefault(trace_id, []).append(marker)
        if waiting := [s for s in batch.waiting.get(trace_id, ()) if s.span_id in twice]:
            # Its run is not in this request: a marker rejects it when its root arrives.
            parents = {s.parent_span_id for s in waiting if s.parent_span_id}
            batch.waiting[trace_id].append(incomplete_marker(trace_id, twice | parents))
    return batch


# Why a tool-call span that arrives after its run was mapped is not captured (docs/capture.md,
# "Spans arriving after their run was mapped").
LATE_CALL = (
    "a tool call that ended after its run's root span and arrived after pml had mapped that "
    "run: a mapped run is never amended, so this call is not in it"
)


def late_calls(
    waiting: list[trace_pb2.Span], mapped: set[bytes], mapped_calls: set[bytes]
) -> list[trace_pb2.Span]:
    """The spans of `waiting` (spans of one trace with no execution span above them in their
    Export) that are tool calls of a run already mapped: a tool-call span, not itself mapped,
    whose chain of parents reaches a span of `mapped` (spans at or below mapped execution
    spans) through no other tool-call span and at no span of `mapped_calls` (the tool-call
    spans among them). A tool-call span below another one is that call seen twice."""
    by_id = {s.span_id: s for s in waiting}
    # Per span id: whether a call just below it would be a late call (None: on the path).
    clear: dict[bytes, bool | None] = {}

    def reaches_a_run(start: bytes) -> bool:
        path: list[bytes] = []
        current = start
        while current not in clear:
            span = by_id.get(current)
            if span is None:  # out of the waiting spans: a mapped span, or none
                clear[current] = current in mapped and current not in mapped_calls
                break
            if _is_call(span):
                clear[current] = False
                break
            clear[current] = None  # (a cycle ends here: not late)
            path.append(current)
            current = span.parent_span_id
        answer = bool(clear[current])
        for sid in path:
            clear[sid] = answer
        return answer

    return [
        s
        for s in waiting
        if s.span_id not in mapped
        and s.parent_span_id
        and _is_call(s)
        and reaches_a_run(s.parent_span_id)
    ]


def tool_of(span: trace_pb2.Span) -> str | None:
    """The tool a tool-call span (a sent one or a held form) calls, "" when it names none, None
    for a span that is no tool call."""
    return attr.tool_name(span, attr.attributes(span))


def _is_call(span: trace_pb2.Span) -> bool:
    return tool_of(span) is not None


def _ref(proto: trace_pb2.Span) -> str:
    return f"{proto.trace_id.hex()}/{proto.span_id.hex()}"


def incomplete_marker(trace_id: bytes, links: set[bytes]) -> trace_pb2.Span:
    """The held marker saying that spans of `trace_id` were refused: `links` are their ids and
    their parents' ids, so that the run they belonged to is rejected when it arrives instead of
    captured without them."""
    values = [common_pb2.AnyValue(bytes_value=link) for link in sorted(links)]
    return trace_pb2.Span(
        trace_id=trace_id,
        span_id=INCOMPLETE_SPAN_ID,
        name="pml: spans of this trace were refused",
        attributes=[
            common_pb2.KeyValue(
                key=INCOMPLETE_LINKS,
                value=common_pb2.AnyValue(array_value=common_pb2.ArrayValue(values=values)),
            )
        ],
    )


def incomplete_links(span: trace_pb2.Span) -> set[bytes]:
    """The links of a marker made by `incomplete_marker` (empty for any other span)."""
    for kv in span.attributes:
        if kv.key == INCOMPLETE_LINKS:
            return {v.bytes_value for v in kv.value.array_value.values if v.bytes_value}
    return set()


def _map_trace(
    trace: dict[bytes, _Span],
    batch: MappedBatch,
    max_intent_chars: int,
    lost: set[bytes],
    twice: set[bytes],
    earlier: frozenset[str],
) -> None:
    """Map one trace's spans; `lost`: the links of spans of it refused earlier (a run above
    one of them is incomplete: rejected); `twice`: its span ids sent twice with different
    content (a run they belong to is rejected); `earlier`: the conversations its runs mapped
    before named."""
    has_agent = any(s.is_agent for s in trace.values())

    def is_execution(s: _Span) -> bool:
        return s.is_agent if has_agent else not s.proto.parent_span_id

    # For each span: the execution span above it (None: none in this request) and the
    # outermost tool-call span between them (None: none). Resolved iteratively with
    # memoization, so a deep or cyclic parent chain costs linear time and no recursion.
    above: dict[bytes, tuple[bytes | None, bytes | None]] = {}

    def resolve(start: bytes) -> tuple[bytes | None, bytes | None]:
        path: list[bytes] = []
        on_path: set[bytes] = set()
        current = start
        while current not in above:
            parent_id = trace[current].proto.parent_span_id
            parent = trace.get(parent_id) if parent_id else None
            if parent is None:
                above[current] = (None, None)
            elif is_execution(parent):
                above[current] = (parent_id, None)
            elif parent_id in on_path or parent_id == current:  # a parent cycle
                above[current] = (None, None)
            else:
                path.append(current)
                on_path.add(current)
                current = parent_id
                continue
            break
        for child in reversed(path):  # nearest the top first: each parent is resolved
            parent_id = trace[child].proto.parent_span_id
            exec_above, top = above[parent_id]
            if top is None and trace[parent_id].tool is not None:
                top = parent_id
            above[child] = (exec_above, top)
        return above[start]

    calls_of: dict[bytes, list[_Span]] = {sid: [] for sid, s in trace.items() if is_execution(s)}
    ignored = 0
    loose: list[bytes] = []  # neither an execution nor a tool call
    orphans: list[_Span] = []  # calls whose execution span is not in this request
    # A call seen twice that failed fails the call it repeats (the MCP client span inside an
    # `execute_tool` span sets `error.type = tool_error` when the framework's span does not):
    # per outer call span, the first such error; those whose execution is not here wait.
    nested_failures: dict[bytes, str] = {}
    nested_waiting: list[_Span] = []
    for sid, span in trace.items():
        if sid in calls_of:
            if span.tool is not None:  # a root that is itself the only call
                calls_of[sid].append(span)
            continue
        if span.tool is None:
            loose.append(sid)
            continue
        exec_id, top = resolve(sid)
        if top is not None or (exec_id is not None and trace[exec_id].tool is not None):
            error = attr.failure(span.proto, span.attrs)  # a call seen twice
            if error is not None and exec_id is None:
                nested_waiting.append(span)
                continue
            outer = top if top is not None else exec_id
            if error is not None and outer is not None:
                nested_failures.setdefault(outer, error)
            ignored += 1
        elif exec_id is None:
            orphans.append(span)
        else:
            calls_of[exec_id].append(span)
    if orphans:
        # The run has not ended: its calls wait, with the spans that may link them to it.
        waiting = [s.proto for s in orphans + nested_waiting]
        for sid in loose:
            if resolve(sid)[0] is None:
                waiting.append(trace[sid].proto)
            else:
                ignored += 1
        batch.waiting[orphans[0].proto.trace_id] = waiting
    else:
        ignored += len(loose) + len(nested_waiting)  # (none: their outer call is an orphan)
        if unlinked := [trace[sid].proto for sid in loose if resolve(sid)[0] is None]:
            batch.unlinked[unlinked[0].trace_id] = unlinked
    mapped = {exec_id for exec_id, calls in calls_of.items() if calls}
    if mapped:
        settled = batch.settled.setdefault(next(iter(trace.values())).proto.trace_id, set())
        settled.update(mapped)
        settled.update(sid for sid in trace if sid not in calls_of and resolve(sid)[0] in mapped)
        batch.settled_calls.setdefault(next(iter(trace.values())).proto.trace_id, set()).update(
            sid for sid in settled if sid in trace and trace[sid].tool is not None
        )
    named: frozenset[str] = frozenset()
    if mapped:
        named = _named(trace.values(), earlier)
        batch.conversations[next(iter(trace.values())).proto.trace_id] = named

    def runs_of(ids: set[bytes]) -> set[bytes]:
        """The mapped runs `ids` are (or are below)."""
        runs = {exec_id for exec_id in mapped if exec_id in ids}
        runs.update(
            exec_id
            for sid in ids
            if sid in trace and sid not in calls_of and (exec_id := resolve(sid)[0]) in mapped
        )
        return runs

    incomplete = runs_of(lost) if lost else set()
    ambiguous = runs_of(twice) if twice else set()
    for exec_id, calls in calls_of.items():
        execution = trace[exec_id]
        own = 0 if execution.tool is not None else 1
        if not calls:
            ignored += 1
            if execution.is_agent and execution.tool is None:
                batch.idle.setdefault(execution.proto.trace_id, []).append(execution.proto)
            continue
        if exec_id in ambiguous:
            batch.rejections.append(
                Rejection(
                    execution.ref,
                    "a span of this run was sent twice with different content: not captured",
                    own + len(calls),
                )
            )
            continue
        if exec_id in incomplete:
            batch.rejections.append(
                Rejection(
                    execution.ref,
                    "spans of this run were refused earlier (past otlp_pending_spans or "
                    "otlp_pending_seconds while held, or sent twice with different content): "
                    "it is incomplete, not captured",
                    own + len(calls),
                )
            )
            continue
        try:
            batch.executions.append(
                _execution(execution, calls, own, max_intent_chars, nested_failures, named)
            )
        except _BadSpanError as bad:
            batch.rejections.append(Rejection(bad.span.ref, bad.reason, own + len(calls)))
    batch.ignored_spans += ignored


def _duration_ms(span: _Span) -> float:
    start, end = span.proto.start_time_unix_nano, span.proto.end_time_unix_nano
    if end < start:
        raise _BadSpanError(span, "end_time_unix_nano is before start_time_unix_nano")
    return (end - start) / 1e6


def _intent(execution: _Span, max_chars: int) -> tuple[str, str]:
    for source, text in (
        (FROM_MESSAGES, attr.last_user_message(execution.attrs)),
        (FROM_AGENT_NAME, execution.attrs.get(attr.AGENT_NAME)),
        (FROM_SPAN_NAME, execution.proto.name),
    ):
        if not isinstance(text, str) or not (text := text.strip()[:max_chars]):
            continue
        if intent_problem(text) is None:  # (a "👍" reply: the agent's name is the intent)
            return text, source
    raise _BadSpanError(
        execution, "no intent: no user message, agent name or span name with a letter or digit"
    )


def _execution(
    execution: _Span,
    calls: list[_Span],
    own: int,
    max_intent_chars: int,
    nested_failures: dict[bytes, str],
    named: frozenset[str],
) -> MappedExecution:
    calls.sort(key=lambda s: (s.proto.start_time_unix_nano, s.proto.span_id))
    mapped: list[MappedCall] = []
    lines: list[tuple[str, dict[str, Any]]] = []
    for call in calls:
        if not call.tool:
            raise _BadSpanError(call, f"a tool-call span without {attr.TOOL_NAME} (a string)")
        if isinstance(too_large := call.attrs.get(HELD_TOO_LARGE), str):
            raise _BadSpanError(call, too_large)  # held without its texts (_held.TOO_LARGE)
        try:
            args = attr.arguments(call.attrs)
        except ValueError as err:
            raise _BadSpanError(call, f"{attr.TOOL_ARGUMENTS}: {err}") from None
        error = attr.failure(call.proto, call.attrs) or nested_failures.get(call.proto.span_id)
        mapped.append(
            MappedCall(
                tool=call.tool,
                ok=error is None,
                error=error or "",
                arguments_json=json.dumps(args, sort_keys=True, ensure_ascii=False),
                duration_ms=_duration_ms(call),
                span_id=call.proto.span_id,
                ended_ns=call.proto.end_time_unix_nano,
            )
        )
        lines.append((call.tool, args))
    intent, source = _intent(execution, max_intent_chars)
    return MappedExecution(
        request_id=REQUEST_ID_PREFIX + execution.ref.replace("/", ":"),
        intent=intent,
        code=synthesize(lines),
        language=LANGUAGE,
        calls=tuple(mapped),
        duration_ms=_duration_ms(execution),
        tags=(TAG, f"intent:{source}"),
        span_count=own + len(calls),
        session_id=_session_id(execution, calls, named),
        session_note=_unused_conversation(execution, calls),
        failed=attr.failure(execution.proto, execution.attrs) is not None,
        trace_id=execution.proto.trace_id,
        span_id=execution.proto.span_id,
        call_ids=frozenset(c.proto.span_id for c in calls),
        ended_ns=execution.proto.end_time_unix_nano,
    )


def _conversation(span: _Span) -> str | None:
    """The span's `gen_ai.conversation.id` when it is a usable session id."""
    conversation = span.attrs.get(attr.CONVERSATION_ID)
    if isinstance(conversation, str) and session_id_problem(conversation) is None:
        return conversation
    return None


def _unused_conversation(execution: _Span, calls: list[_Span]) -> str:
    """The warning for the first `gen_ai.conversation.id` of the run's spans that is no usable
    session id (`session_id_problem`, the API's one check: docs/ranking.md, Sessions), else "".
    Such an id is passed over as a missing one; the run is captured."""
    for span in (execution, *calls):
        problem = conversation_problem(span.attrs)
        if problem is None and isinstance(held := span.attrs.get(HELD_CONVERSATION_REFUSED), str):
            problem = held[:_PROBLEM_CHARS]
        if problem is not None:
            return (
                f"span {span.ref}: {attr.CONVERSATION_ID} {problem}: not used as the run's session"
            )
    return ""


_PROBLEM_CHARS = 256  # of a held span's `HELD_CONVERSATION_REFUSED` read back


def conversation_problem(attrs: dict[str, Any]) -> str | None:
    """Why a span's `gen_ai.conversation.id` (a string, not empty) is no usable session id
    (`session_id_problem`), else None."""
    conversation = attrs.get(attr.CONVERSATION_ID)
    if isinstance(conversation, str) and conversation:
        return session_id_problem(conversation)
    return None


def _named(spans: Iterable[_Span], earlier: frozenset[str]) -> frozenset[str]:
    """The conversations a trace's runs name: those of its agent and tool-call spans, and
    `earlier` (its runs mapped in earlier Exports), each as the stand-in naming its session
    (`digest_stand_in`: an id and a held span's stand-in of it are one conversation). Two are
    enough to tell that the trace names more than one."""
    named = set(earlier)
    for span in spans:
        if len(named) > 1:
            break
        if (span.is_agent or span.tool is not None) and (found := _conversation(span)):
            named.add(digest_stand_in(found))
    return frozenset(sorted(named)[:2])


def _session_id(execution: _Span, calls: list[_Span], named: frozenset[str]) -> str:
    """The session a run belongs to (docs/ranking.md, Sessions): its `gen_ai.conversation.id`
    when that is a usable session id, its execution span's, else its first call's (in start
    order) that has one (an instrumentation may set it on the tool spans alone), else the
    conversation its trace's runs name when they name one (`named`: a run of an agent that
    sets it on some runs only), else its trace id (hex): the runs of one trace are one
    agent's consecutive steps."""
    for span in (execution, *calls):
        if conversation := _conversation(span):
            return conversation
    if len(named) == 1:
        return next(iter(named))
    return execution.proto.trace_id.hex()
