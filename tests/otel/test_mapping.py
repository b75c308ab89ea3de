"""The pure OTLP mapping (`pml_server.otel`) on hand-built spans: the shapes an exporter can
send that the SDK tests do not reach (cycles, deep chains, orphans, odd ids)."""

from __future__ import annotations

import json

from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from pml_server import _core
from pml_server.otel import late_calls, map_spans
from pml_server.otel._code import call_line, synthesize

TRACE = bytes(range(16))
ERROR = trace_pb2.Status.STATUS_CODE_ERROR


def _sid(n: int) -> bytes:
    return n.to_bytes(8, "big")


def _span(
    n: int,
    parent: int | None,
    name: str = "work",
    start: int = 0,
    status: int = 0,
    **attributes: str,
) -> trace_pb2.Span:
    return trace_pb2.Span(
        trace_id=TRACE,
        span_id=_sid(n),
        parent_span_id=_sid(parent) if parent is not None else b"",
        name=name,
        start_time_unix_nano=start,
        end_time_unix_nano=start + 1_000_000,
        status=trace_pb2.Status(code=status),  # type: ignore[arg-type]
        attributes=[
            common_pb2.KeyValue(key=k.replace("__", "."), value=common_pb2.AnyValue(string_value=v))
            for k, v in attributes.items()
        ],
    )


def _agent(n: int, parent: int | None = None, **attrs: str) -> trace_pb2.Span:
    return _span(n, parent, "invoke_agent a", gen_ai__operation__name="invoke_agent", **attrs)


def _tool(n: int, parent: int, tool: str, start: int, **attrs: str) -> trace_pb2.Span:
    return _span(
        n,
        parent,
        f"execute_tool {tool}",
        start,
        gen_ai__operation__name="execute_tool",
        gen_ai__tool__name=tool,
        **attrs,
    )


def test_calls_in_start_order_whatever_the_export_order() -> None:
    spans = [
        _tool(3, 1, "second", 20),
        _tool(2, 1, "first", 10),
        _agent(1, gen_ai__agent__name="x"),
    ]
    (execution,) = map_spans(spans).executions
    assert [c.tool for c in execution.calls] == ["first", "second"]
    assert execution.intent == "x"
    assert "intent:agent_name" in execution.tags  # where its intent came from
    assert execution.request_id == f"otel:{TRACE.hex()}:{_sid(1).hex()}"


def test_nested_agents_own_their_own_calls() -> None:
    spans = [_agent(1), _tool(2, 1, "outer", 1), _agent(3, 1), _tool(4, 3, "inner", 2)]
    batch = map_spans(spans)
    calls = {e.request_id[-16:]: [c.tool for c in e.calls] for e in batch.executions}
    assert calls == {_sid(1).hex(): ["outer"], _sid(3).hex(): ["inner"]}


def test_orphans_wait_and_plain_spans_are_ignored() -> None:
    spans = [
        _tool(2, 99, "orphan", 1),  # its execution is not in this request
        _span(5, 6),  # a parent cycle
        _span(6, 5),
        _tool(7, 6, "in_cycle", 1),
        _span(8, None, "GET /"),  # a root without calls
    ]
    batch = map_spans(spans)
    assert batch.executions == []
    assert batch.rejections == []
    assert batch.ignored_spans == 1  # the root without calls
    # The calls with no execution above them wait, with the spans that may link them to it.
    (waiting,) = batch.waiting.values()
    assert sorted(s.span_id for s in waiting) == sorted(_sid(i) for i in (2, 5, 6, 7))


def test_plain_spans_with_no_call_never_wait() -> None:
    batch = map_spans([_span(5, 6), _span(6, 99), _span(8, None, "GET /")])
    assert batch.waiting == {}
    assert batch.ignored_spans == 3


def test_held_calls_join_their_execution_when_it_arrives() -> None:
    first = map_spans([_tool(2, 1, "read_file", 1), _tool(3, 1, "write_file", 2)])
    assert first.executions == []
    assert first.ignored_spans == 0
    (held,) = first.waiting.values()
    (execution,) = map_spans([*held, _agent(1)]).executions
    assert [c.tool for c in execution.calls] == ["read_file", "write_file"]


def test_deep_parent_chain_is_linear_not_recursive() -> None:
    depth = 20_000
    spans = [_agent(1)] + [_span(i, i - 1) for i in range(2, depth)]  # (span id 0: invalid)
    spans.append(_tool(depth, depth - 1, "deep", 5))
    (execution,) = map_spans(spans).executions
    assert [c.tool for c in execution.calls] == ["deep"]


def test_bad_ids_and_bad_spans_are_rejected_alone() -> None:
    bad_id = trace_pb2.Span(trace_id=b"short", span_id=_sid(1))
    nameless = _span(11, 10, "execute_tool", 1, gen_ai__operation__name="execute_tool")
    spans = [bad_id, _agent(10), nameless, _agent(20), _tool(21, 20, "fine", 1)]
    batch = map_spans(spans)
    assert [e.calls[0].tool for e in batch.executions] == ["fine"]
    assert batch.rejected_spans == 3
    assert any("gen_ai.tool.name" in r.reason for r in batch.rejections)


def test_intent_from_the_last_user_message() -> None:
    messages = [
        {"role": "user", "content": "first ask"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "parts": [{"type": "text", "content": "Summarize sales.csv"}]},
    ]
    spans = [_agent(1, gen_ai__input__messages=json.dumps(messages)), _tool(2, 1, "read", 1)]
    (execution,) = map_spans(spans).executions
    assert execution.intent == "Summarize sales.csv"
    assert execution.tags == ("otel", "intent:input_messages")
    (long,) = map_spans(
        [
            _agent(1, gen_ai__input__messages=json.dumps([{"role": "user", "content": "x" * 99}])),
            _tool(2, 1, "read", 1),
        ],
        max_intent_chars=10,
    ).executions
    assert long.intent == "x" * 10


def test_error_status_marks_a_failed_call() -> None:
    spans = [
        _agent(1),
        _span(2, 1, "t", 1, 2, gen_ai__operation__name="execute_tool", gen_ai__tool__name="flaky"),
    ]
    (execution,) = map_spans(spans).executions
    assert not execution.calls[0].ok
    assert execution.calls[0].error == "error"


def test_synthesized_code_normalizes_to_one_pattern_for_other_values() -> None:
    a = synthesize([("read_file", {"path": "a.json", "n": 1})])
    b = synthesize([("read_file", {"n": 7, "path": "b.json"})])
    assert a != b
    na, nb = _core.normalize(a, "typescript"), _core.normalize(b, "typescript")
    assert na.code_hash == nb.code_hash
    assert na.tool_calls == ["read_file"]
    assert call_line("gmail:get", {}) == 'await mcp["gmail:get"]({});'


def test_synthesized_code_names_every_tool_it_calls() -> None:
    """Tool names that are no identifiers (MCP servers use `resolve-library-id`, `gmail:get`)
    are written `mcp["..."](...)`; the normalizer reads them back as the same tools, so a run
    captured from spans never disagrees with its code (capture rule 4) and has its steps."""
    tools = ["resolve-library-id", "gmail:get", "read_file", "files.read"]
    code = synthesize([(tool, {"q": n}) for n, tool in enumerate(tools)])
    normalized = _core.normalize(code, "typescript")
    assert normalized.tool_calls == tools
    assert [step.tool for step in normalized.steps] == tools


def test_session_is_the_conversation_id_else_the_trace() -> None:
    """docs/ranking.md, Sessions: a run's `gen_ai.conversation.id`, when a usable session id,
    else its trace id."""
    for attrs, expected in (
        ({"gen_ai__conversation__id": "conv-42"}, "conv-42"),
        ({}, TRACE.hex()),
        ({"gen_ai__conversation__id": "x" * 129}, TRACE.hex()),
        ({"gen_ai__conversation__id": "a\nb"}, TRACE.hex()),
    ):
        batch = map_spans([_agent(1, **attrs), _tool(2, 1, "read_file", 5)])
        assert [e.session_id for e in batch.executions] == [expected]


def test_session_of_a_run_whose_calls_carry_the_conversation_id() -> None:
    """The agent span's conversation id first, else the first call's in start order that is
    usable (docs/ranking.md, Sessions)."""
    conv = "gen_ai__conversation__id"
    for agent, calls, expected in (
        ({}, [{}, {conv: "conv-late"}], "conv-late"),
        ({}, [{conv: "a\nb"}, {conv: "conv-2"}], "conv-2"),
        ({conv: "conv-run"}, [{conv: "conv-call"}, {}], "conv-run"),
        ({}, [{}, {}], TRACE.hex()),
    ):
        spans = [_agent(1, **agent)]
        spans += [_tool(2 + n, 1, f"tool_{n}", 5 + n, **c) for n, c in enumerate(calls)]
        batch = map_spans(spans[::-1])
        assert [e.session_id for e in batch.executions] == [expected]


def _with(span: trace_pb2.Span, key: str, value: common_pb2.AnyValue) -> trace_pb2.Span:
    span.attributes.append(common_pb2.KeyValue(key=key, value=value))
    return span


def _kvlist(**values: common_pb2.AnyValue) -> common_pb2.AnyValue:
    return common_pb2.AnyValue(
        kvlist_value=common_pb2.KeyValueList(
            values=[common_pb2.KeyValue(key=k, value=v) for k, v in values.items()]
        )
    )


def test_arguments_json_cannot_carry_reject_their_execution() -> None:
    """Before: bytes in structured arguments raised TypeError (the whole Export INTERNAL); NaN,
    infinity (Python's `json.dumps` writes `NaN`, `1e999` reads as infinity) were stored as
    arguments no JSON reader parses."""
    args = "gen_ai.tool.call.arguments"
    for value in (
        _kvlist(path=common_pb2.AnyValue(bytes_value=b"\xff\x00")),
        _kvlist(n=common_pb2.AnyValue(double_value=float("nan"))),
        _kvlist(n=common_pb2.AnyValue(double_value=float("-inf"))),
        common_pb2.AnyValue(string_value='{"n": NaN}'),
        common_pb2.AnyValue(string_value='{"n": [Infinity]}'),
        common_pb2.AnyValue(string_value='{"n": 1e999}'),
    ):
        batch = map_spans([_agent(1), _with(_tool(2, 1, "read", 5), args, value)])
        assert batch.executions == []
        (rejection,) = batch.rejections
        assert rejection.reason.startswith(args), rejection.reason
    (ok,) = map_spans(
        [_agent(1), _tool(2, 1, "read", 5, **{"gen_ai__tool__call__arguments": '{"n": 1.5e3}'})]
    ).executions
    assert json.loads(ok.calls[0].arguments_json) == {"n": 1500.0}


def test_a_lone_surrogate_escape_becomes_a_replacement_character() -> None:
    """`JSON.stringify` of a string cut inside an emoji escapes the lone surrogate
    (`"\\ud83d"`): no character, not encodable as UTF-8. Before: the record could not be built
    and the whole Export failed INTERNAL."""
    messages = json.dumps([{"role": "user", "content": "Find \ud83d news"}])
    assert "\\ud83d" in messages
    spans = [
        _agent(1, gen_ai__input__messages=messages),
        _tool(
            2, 1, "search", 5, gen_ai__tool__call__arguments='{"q": "cut \\ud83d", "\\udc00": 1}'
        ),
    ]
    (execution,) = map_spans(spans).executions
    assert execution.intent == "Find \ufffd news"
    assert json.loads(execution.calls[0].arguments_json) == {"q": "cut \ufffd", "\ufffd": 1}
    execution.code.encode()  # every text is valid UTF-8 now


def test_only_a_string_names_a_tool() -> None:
    """Before: an int, bytes, bool or array `gen_ai.tool.name` was stored as the tool `5`,
    `b'..'`, `True` or `['a', 'b']`."""
    name = "gen_ai.tool.name"
    for value in (
        common_pb2.AnyValue(int_value=5),
        common_pb2.AnyValue(bool_value=True),
        common_pb2.AnyValue(bytes_value=b"read"),
        common_pb2.AnyValue(
            array_value=common_pb2.ArrayValue(values=[common_pb2.AnyValue(string_value="a")])
        ),
    ):
        tool = _span(2, 1, "execute_tool", 5, gen_ai__operation__name="execute_tool")
        batch = map_spans([_agent(1), _with(tool, name, value)])
        assert batch.executions == []
        assert [r.reason for r in batch.rejections] == [
            "a tool-call span without gen_ai.tool.name (a string)"
        ]


def test_a_call_seen_twice_fails_when_either_view_failed() -> None:
    """The MCP client span inside an `execute_tool` span sets `error.type = tool_error` (a
    result with `isError`) while the framework's span does not. Before: the inner span was
    ignored as the same call seen twice, and its failure with it: the call was ok. Split over
    two Exports, the failing inner span waits with its outer call."""
    inner = _span(
        3,
        2,
        "tools/call read_file",
        6,
        ERROR,
        mcp__method__name="tools/call",
        gen_ai__tool__name="read_file",
        error__type="tool_error",
    )
    spans = [_agent(1), _tool(2, 1, "read_file", 5), inner, _tool(4, 1, "parse", 9)]
    (execution,) = map_spans(spans).executions
    assert [(c.tool, c.ok, c.error) for c in execution.calls] == [
        ("read_file", False, "tool_error"),
        ("parse", True, ""),
    ]
    early = map_spans(spans[1:])
    assert sorted(s.span_id for s in early.waiting[TRACE]) == [_sid(2), _sid(3), _sid(4)]
    assert map_spans([spans[0], *early.waiting[TRACE]]).executions == [execution]
    ok_inner = _span(3, 2, "tools/call read_file", 6, mcp__method__name="tools/call")
    (fine,) = map_spans([_agent(1), _tool(2, 1, "read_file", 5), ok_inner]).executions
    assert fine.calls[0].ok


def test_all_zero_ids_are_rejected() -> None:
    """All-zero trace and span ids are invalid (W3C trace context). Before: taken as ids; a
    zero span id held for its root would share the key of its trace's marker of lost spans."""
    zero_span = _tool(0, 1, "read_file", 5)
    zero_trace = _tool(2, 1, "read_file", 5)
    zero_trace.trace_id = bytes(16)
    batch = map_spans([_agent(1), zero_span, zero_trace])
    assert batch.executions == []
    assert [r.reason for r in batch.rejections] == [
        "trace_id must be 16 bytes, span_id 8, neither all zero"
    ] * 2


def test_late_calls_are_the_calls_below_a_mapped_run_through_no_other_call() -> None:
    """A run (agent 1, step 2, call 3) was mapped; a later Export brings, with no execution
    span: call 5 below a new step 4 below the agent (a call that ended after its root), an
    MCP span 6 below the mapped call 3 and a span 8 below call 7 below step 2 (calls seen
    twice: 8 is below another call), and call 9 whose parent was never seen (not below a run)."""
    mcp = {"mcp__method__name": "tools/call", "gen_ai__tool__name": "read_file"}
    waiting = [
        _span(4, 1),
        _tool(5, 4, "parse_json", 0),
        _span(6, 3, "tools/call read_file", **mcp),
        _tool(7, 2, "write_file", 0),
        _span(8, 7, "tools/call write_file", **mcp),
        _tool(9, 99, "list_dir", 0),
    ]
    mapped = {_sid(1), _sid(2), _sid(3)}
    late = late_calls(waiting, mapped, mapped_calls={_sid(3)})
    assert [s.span_id for s in late] == [_sid(5), _sid(7)]
