"""The held form of a span waiting for its run's root (`pml_server.otel.held_forms`): the run
maps to the same execution from it as from the spans sent, and nothing else of the span is kept
(docs/capture.md, What a held span keeps)."""

from __future__ import annotations

import json

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from pml_server.domain.sessions import digest_stand_in
from pml_server.otel import (
    OWN_PREFIX,
    flatten,
    held_forms,
    incomplete_marker,
    map_spans,
    settling_forms,
)
from pml_server.storage.repo._sessions import session_key
from tests.otel.test_mapping import _agent, _span, _tool

ERROR = trace_pb2.Status.STATUS_CODE_ERROR


def test_a_run_maps_alike_from_its_held_spans() -> None:
    nested = common_pb2.AnyValue(
        kvlist_value=common_pb2.KeyValueList(
            values=[common_pb2.KeyValue(key="path", value=common_pb2.AnyValue(string_value="a"))]
        )
    )
    structured = _tool(3, 1, "read", 10)
    structured.attributes.append(
        common_pb2.KeyValue(key="gen_ai.tool.call.arguments", value=nested)
    )
    calls = [
        _tool(2, 1, "fetch", 5, gen_ai__tool__call__arguments=json.dumps({"n": 1, "q": "x"})),
        structured,
        _span(4, 1, "tools/call list_files", 20, mcp__method__name="tools/call"),
        _tool(5, 1, "write", 30, error__type="OSError"),
        _span(6, 1, "GET /health"),
    ]
    calls[3].status.CopyFrom(trace_pb2.Status(code=ERROR, message="disk full"))
    root = _agent(1, gen_ai__conversation__id="conv-1")
    (sent,) = map_spans([*calls, root]).executions
    (held,) = map_spans([*held_forms(calls), root]).executions
    assert held == sent
    assert [c.tool for c in held.calls] == ["fetch", "read", "list_files", "write"]
    assert held.calls[3].error == "OSError: disk full"


def test_a_held_span_keeps_no_secret_and_nothing_unread() -> None:
    secret = "sk-live-0123456789abcdef01234567"
    tool = _tool(
        2,
        1,
        "call_api",
        5,
        gen_ai__tool__call__arguments=json.dumps({"apiKey": secret, "note": "n"}),
        url__full=f"https://api.internal/v1?key={secret}",
        gen_ai__conversation__id=f"token {secret}",
        error__type=f"401 for {secret}",
    )
    tool.events.append(trace_pb2.Span.Event(name="exception"))
    (held,) = held_forms([tool])
    assert secret not in str(held)
    assert not held.events
    kept = {kv.key: kv.value.string_value for kv in held.attributes}
    assert set(kept) == {
        "gen_ai.operation.name",
        "gen_ai.tool.name",
        "gen_ai.tool.call.arguments",
        "gen_ai.conversation.id",
        "error.type",
    }
    assert json.loads(kept["gen_ai.tool.call.arguments"]) == {"apiKey": "[REDACTED]", "note": "n"}
    # the conversation id as a digest naming the same session row, never the id
    stand_in = kept["gen_ai.conversation.id"]
    assert stand_in == digest_stand_in(f"token {secret}")
    assert session_key("t", stand_in) == session_key("t", f"token {secret}")


def test_a_held_run_keeps_its_conversation_as_its_session() -> None:
    """A conversation id redaction would change (long and random, as OpenAI's `conv_...`), on
    a held root or a held call: the run maps to the session the id names, not to its trace
    (docs/capture.md, What a held span keeps)."""
    conversation = "conv_689667905b048191b4740501625afd940c7533ace33a2dab"
    cases = (
        ([_agent(1, gen_ai__conversation__id=conversation)], [_tool(2, 1, "read", 5)]),
        ([_agent(1)], [_tool(2, 1, "read", 5, gen_ai__conversation__id=conversation)]),
    )
    for roots, calls in cases:
        (sent,) = map_spans([*roots, *calls]).executions
        assert sent.session_id == conversation
        assert conversation not in str(held_forms([*roots, *calls]))
        for spans in ([*held_forms(roots), *calls], [*roots, *held_forms(calls)]):
            (held,) = map_spans(spans).executions
            assert session_key("t", held.session_id) == session_key("t", conversation)


def test_arguments_the_mapping_rejects_are_rejected_from_the_held_form_too() -> None:
    number = _tool(2, 1, "t", 5)
    number.attributes.append(
        common_pb2.KeyValue(
            key="gen_ai.tool.call.arguments", value=common_pb2.AnyValue(int_value=3)
        )
    )
    for bad in (number, _tool(2, 1, "t", 5, gen_ai__tool__call__arguments="[1]")):
        sent = map_spans([bad, _agent(1)]).rejections
        held = map_spans([*held_forms([bad]), _agent(1)]).rejections
        assert [r.reason for r in held] == [r.reason for r in sent]
        assert "not a JSON object" in sent[0].reason


def test_a_held_call_failed_by_a_non_text_error_type_still_failed() -> None:
    """An `error.type` that is no string (an HTTP status sent as the int 500) fails the call
    sent whole. Before: the held form kept only text attributes, dropped it, and the held call
    was captured as a success."""
    for value in (
        common_pb2.AnyValue(int_value=500),
        common_pb2.AnyValue(bool_value=True),
        common_pb2.AnyValue(bytes_value=b"Timeout"),
    ):
        call = _tool(2, 1, "call_api", 5)
        call.attributes.append(common_pb2.KeyValue(key="error.type", value=value))
        (sent,) = map_spans([call, _agent(1)]).executions
        (held,) = map_spans([*held_forms([call]), _agent(1)]).executions
        assert not sent.calls[0].ok
        assert held == sent


def test_structured_arguments_json_cannot_carry_are_held_and_rejected() -> None:
    """Before: bytes inside structured arguments raised TypeError in `held_forms` (the whole
    Export failed INTERNAL, the span was never held)."""
    args = common_pb2.AnyValue(
        kvlist_value=common_pb2.KeyValueList(
            values=[common_pb2.KeyValue(key="p", value=common_pb2.AnyValue(bytes_value=b"\xff"))]
        )
    )
    messages = common_pb2.AnyValue(
        array_value=common_pb2.ArrayValue(values=[common_pb2.AnyValue(bytes_value=b"\xff")])
    )
    call = _tool(2, 1, "t", 5)
    call.attributes.append(common_pb2.KeyValue(key="gen_ai.tool.call.arguments", value=args))
    call.attributes.append(common_pb2.KeyValue(key="gen_ai.input.messages", value=messages))
    (held_form,) = held_forms([call])
    assert map_spans([call, _agent(1)]).rejections
    (rejection,) = map_spans([held_form, _agent(1)]).rejections
    assert rejection.reason.startswith("gen_ai.tool.call.arguments")


def test_a_held_span_keeps_texts_bounded_to_what_the_mapping_reads() -> None:
    """Before: held whole, a call's 7 MB arguments, an LLM span's whole message history and
    a megabyte status message were written to the store and read back by every Export of the
    trace. A call its size dooms (arguments or error text over their limits) is held without
    them and rejected for it; other texts are held as far as the mapping reads them."""
    big = json.dumps({"content": "y" * 100_000})
    history = json.dumps(
        [{"role": "user", "content": f"turn {n} " + "x" * 10_000} for n in range(50)]
    )
    calls = [
        _tool(2, 1, "write_file", 5, gen_ai__tool__call__arguments=big),
        _tool(3, 1, "read_file", 6, error__type="E" * 20_000),
        _span(4, 1, "chat", 7, gen_ai__operation__name="chat", gen_ai__input__messages=history),
    ]
    held = held_forms(calls)
    assert all(h.ByteSize() < 30_000 for h in held), [h.ByteSize() for h in held]
    sent = map_spans([*calls, _agent(1)]).executions[0]
    assert len(sent.calls[0].arguments_json) > 65_536  # the API's validation refuses it
    (rejection,) = map_spans([*held, _agent(1)]).rejections
    assert rejection.reason == (
        "gen_ai.tool.call.arguments: is 100015 bytes; the limit is 65536 bytes"
    )
    (error_rejection,) = map_spans([*held[1:], _agent(1)]).rejections
    assert "is 20000 characters; the limit is 16384 characters" in error_rejection.reason


def test_every_mark_pml_sets_on_held_forms_is_dropped_when_a_client_sends_it() -> None:
    """The marks of held forms (a call held without its too large arguments, a refused
    conversation id, a settling root, the marker of lost spans) are all in pml's namespace, and
    the OTLP edge (`flatten`) drops each from spans a client sends, so only held forms read back
    from the store carry them (docs/capture.md, What a held span keeps). A mark added outside
    the namespace would be one a client could send."""
    mapped = {
        "gen_ai.operation.name",
        "gen_ai.tool.name",
        "gen_ai.tool.call.arguments",
        "gen_ai.agent.name",
        "gen_ai.conversation.id",
        "gen_ai.input.messages",
        "error.type",
        "mcp.method.name",
    }
    huge = _tool(2, 1, "write", 5, gen_ai__tool__call__arguments=json.dumps({"c": "y" * 70_000}))
    refused = _tool(3, 1, "read", 6, gen_ai__conversation__id="c" * 200)
    forms = [
        *held_forms([huge, refused]),
        *settling_forms([_agent(1)]),
        incomplete_marker(huge.trace_id, {huge.span_id}),
    ]
    marks = {kv.key for form in forms for kv in form.attributes} - mapped
    assert len(marks) == 4
    assert all(mark.startswith(OWN_PREFIX) for mark in marks)
    request = ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.extend(forms)
    sent, marked = flatten(request)
    assert marked == len(forms)
    assert {kv.key for span in sent for kv in span.attributes} <= mapped
