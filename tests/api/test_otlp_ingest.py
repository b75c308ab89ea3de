"""OTLP trace ingest end to end: spans made with the real OpenTelemetry SDK, sent by its OTLP
gRPC exporter to a real pml server (port 0, RocksDB on disk), then read back as patterns,
suggestions, failures and counters."""

from __future__ import annotations

import json
import logging
import re
import time
import unicodedata
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer

from pml_server.api.server import RunningServer
from pml_server.client import PmlClient
from pml_server.otel import LATE_CALL, incomplete_marker
from testing.otlp_spans import recorded, run_with_arguments
from tests.conftest import StartServer
from tests.support import eventually


def _messages(text: str) -> str:
    return json.dumps(
        [
            {"role": "system", "parts": [{"type": "text", "content": "You are helpful."}]},
            {"role": "user", "parts": [{"type": "text", "content": text}]},
        ]
    )


def _agent_run(
    tracer: Tracer,
    intent: str | None,
    calls: list[tuple[str, dict[str, object], str | None]],
    agent_name: str = "file-agent",
) -> None:
    """One `invoke_agent` span with an `execute_tool` span per call (tool, arguments, error)
    and an unrelated HTTP span."""
    attributes: dict[str, str] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent_name,
    }
    if intent is not None:
        attributes["gen_ai.input.messages"] = _messages(intent)
    with tracer.start_as_current_span(f"invoke_agent {agent_name}", attributes=attributes):
        with tracer.start_as_current_span("GET /health", kind=SpanKind.CLIENT):
            pass
        for tool, args, error in calls:
            with tracer.start_as_current_span(
                f"execute_tool {tool}",
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": tool,
                    "gen_ai.tool.call.arguments": json.dumps(args),
                },
            ) as span:
                if error is not None:
                    span.set_attribute("error.type", error)
                    span.set_status(Status(StatusCode.ERROR, "it failed"))


@contextmanager
def exporting_to(exporter: SpanExporter, service: str) -> Iterator[Tracer]:
    """A tracer of `service` whose spans go through a BatchSpanProcessor to `exporter`;
    everything is flushed when the block ends."""
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=60_000))
    try:
        yield provider.get_tracer("tests")
        assert provider.force_flush(30_000)
    finally:
        provider.shutdown()


def _exporting(port: int, api_key: str | None = None) -> AbstractContextManager[Tracer]:
    """`exporting_to` the OTLP gRPC exporter pointed at pml."""
    headers = {"authorization": f"Bearer {api_key}"} if api_key else None
    exporter = OTLPSpanExporter(endpoint=f"127.0.0.1:{port}", insecure=True, headers=headers)
    return exporting_to(exporter, "test-agent")


def _spans_counter(server: RunningServer, result: str) -> float:
    value = server.metrics.registry.get_sample_value("pml_otlp_spans_total", {"result": result})
    return value or 0.0


def _captures(server: RunningServer, outcome: str) -> float:
    value = server.metrics.registry.get_sample_value("pml_captures_total", {"outcome": outcome})
    return value or 0.0


def test_exported_agent_runs_become_a_pattern_and_a_suggestion(
    server: RunningServer, client: PmlClient
) -> None:
    with _exporting(server.port) as tracer:
        _agent_run(tracer, "Read JSON file", [("read_file", {"path": "a.json"}, None)])
        _agent_run(tracer, "Read the JSON file", [("read_file", {"path": "b.json"}, None)])
    patterns = list(client.iter_patterns())
    assert len(patterns) == 1
    pattern = patterns[0]
    assert pattern.tools_used == ["read_file"]
    assert pattern.usage_count == 2
    assert pattern.success_count == 2
    assert pattern.template == 'await mcp.read_file({"path": $PATH});\n'
    assert {i.text for i in pattern.intents} == {"Read JSON file", "Read the JSON file"}
    found = client.suggest("Read JSON file").suggestions
    assert [s.pattern.name for s in found] == [pattern.name]
    # 2 agent + 2 tool spans mapped, the 2 HTTP spans ignored.
    assert _spans_counter(server, "mapped") == 4
    assert _spans_counter(server, "ignored") == 2
    assert _spans_counter(server, "rejected") == 0
    assert _captures(server, "saved") == 1
    assert _captures(server, "counted") == 1


def test_calls_keep_start_order_and_failures_follow_all_or_nothing(
    server: RunningServer, client: PmlClient
) -> None:
    with _exporting(server.port) as tracer:
        _agent_run(
            tracer,
            "Email the report",
            [
                ("read_file", {"path": "report.txt"}, None),
                ("send_email", {"to": "boss@example.com", "subject": "report"}, "TimeoutError"),
            ],
        )
    assert list(client.iter_patterns()) == []  # a new pattern with a failed call: nothing
    failures = list(client.list_failures().failures)
    assert [(f.tool, f.error) for f in failures] == [("send_email", "TimeoutError: it failed")]
    assert failures[0].intent == "Email the report"
    assert _captures(server, "rejected") == 1
    with _exporting(server.port) as tracer:
        _agent_run(
            tracer,
            "Email the report",
            [
                ("read_file", {"path": "report.txt"}, None),
                ("send_email", {"to": "boss@example.com", "subject": "report"}, None),
            ],
        )
    (pattern,) = client.iter_patterns()
    assert pattern.tools_used == ["read_file", "send_email"]
    assert pattern.template.splitlines() == [
        'await mcp.read_file({"path": $PATH});',
        'await mcp.send_email({"subject": $SUBJECT, "to": $TO});',
    ]


def test_reexported_spans_count_nothing_twice(server: RunningServer, client: PmlClient) -> None:
    spans = recorded(
        lambda t: _agent_run(t, "Read JSON file", [("read_file", {"path": "a.json"}, None)])
    )
    exporter = OTLPSpanExporter(endpoint=f"127.0.0.1:{server.port}", insecure=True)
    try:
        for _ in range(3):
            assert exporter.export(spans) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    (pattern,) = client.iter_patterns()
    assert pattern.usage_count == 1
    assert _captures(server, "saved") == 3  # the same first answer, replayed
    assert client.stats().patterns == 1


def test_a_bad_span_is_rejected_alone(server: RunningServer, client: PmlClient) -> None:
    def runs(tracer: Tracer) -> None:
        _agent_run(tracer, "Read JSON file", [("read_file", {"path": "a.json"}, None)])
        bad_ref.append(run_with_arguments(tracer, "invoke_agent broken", "{not json"))

    bad_ref: list[str] = []
    request = encode_spans(recorded(runs))
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        reply = trace_service_pb2_grpc.TraceServiceStub(channel).Export(request)
    assert reply.partial_success.rejected_spans == 2  # the broken agent span and its tool span
    assert bad_ref[0] in reply.partial_success.error_message
    assert "gen_ai.tool.call.arguments" in reply.partial_success.error_message
    (pattern,) = client.iter_patterns()
    assert pattern.usage_count == 1
    assert _spans_counter(server, "rejected") == 2
    assert _spans_counter(server, "mapped") == 2


def test_a_run_calling_a_tool_with_an_invisible_character_is_rejected_alone(
    server: RunningServer, client: PmlClient
) -> None:
    """The record rules of every transport (docs/api.md, Requests): a tool name holding a
    right-to-left override is refused, its run alone; the run beside it is saved."""

    def runs(tracer: Tracer) -> None:
        _agent_run(tracer, "Read JSON file", [("read_file", {"path": "a.json"}, None)])
        _agent_run(tracer, "Delete the file", [("delete\u202efile", {"path": "a.json"}, None)])

    request = encode_spans(recorded(runs))
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        reply = trace_service_pb2_grpc.TraceServiceStub(channel).Export(request)
    assert reply.partial_success.rejected_spans == 2
    assert "U+202E" in reply.partial_success.error_message
    (pattern,) = client.iter_patterns()
    assert pattern.tools_used == ["read_file"]


@pytest.mark.parametrize("depth", [33, 100_000])
def test_deeply_nested_arguments_reject_their_execution_alone(
    server: RunningServer, client: PmlClient, depth: int
) -> None:
    """Before: JSON nested 100k deep in the arguments raised RecursionError, the Export answered
    INTERNAL (exporters do not retry it) and the valid run beside it was lost."""

    def runs(tracer: Tracer) -> None:
        _agent_run(tracer, "Read JSON file", [("read_file", {"path": "a.json"}, None)])
        run_with_arguments(tracer, "invoke_agent deep", '{"a": ' + "[" * depth + "]" * depth + "}")

    request = encode_spans(recorded(runs))
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        reply = trace_service_pb2_grpc.TraceServiceStub(channel).Export(request)
    assert reply.partial_success.rejected_spans == 2
    assert "nested deeper than 32 levels" in reply.partial_success.error_message
    (pattern,) = client.iter_patterns()
    assert pattern.tools_used == ["read_file"]
    assert pattern.usage_count == 1


def test_mcp_client_spans_under_a_root_without_agent(
    server: RunningServer, client: PmlClient
) -> None:
    def mcp_server_side(tracer: Tracer, tool: str) -> None:
        # The MCP server's own span of the same call (context propagated in `_meta`): the
        # same call seen twice, so ignored.
        attributes = {"mcp.method.name": "tools/call", "gen_ai.tool.name": tool}
        with tracer.start_as_current_span(
            f"tools/call {tool}", kind=SpanKind.SERVER, attributes=attributes
        ):
            pass

    def run(tracer: Tracer) -> None:
        with tracer.start_as_current_span("nightly cleanup job"):
            for tool, args in (("list_files", {"dir": "/tmp"}), ("delete_file", {"path": "x"})):
                with tracer.start_as_current_span(
                    f"tools/call {tool}",
                    kind=SpanKind.CLIENT,
                    attributes={
                        "mcp.method.name": "tools/call",
                        "gen_ai.tool.call.arguments": json.dumps(args),
                    },
                ):
                    mcp_server_side(tracer, tool)

    spans = recorded(run)
    exporter = OTLPSpanExporter(endpoint=f"127.0.0.1:{server.port}", insecure=True)
    try:
        assert exporter.export(spans) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    (pattern,) = client.iter_patterns()
    assert pattern.tools_used == ["list_files", "delete_file"]
    assert [i.text for i in pattern.intents] == ["nightly cleanup job"]
    assert _spans_counter(server, "mapped") == 3
    assert _spans_counter(server, "ignored") == 2


def test_otlp_uses_the_keys_tenant(start: StartServer, keys: tuple[Path, dict[str, str]]) -> None:
    keys_file, found = keys
    server = start(keys_file=keys_file)

    def run(tracer: Tracer) -> None:
        _agent_run(tracer, "Read JSON file", [("read_file", {"path": "a.json"}, None)])

    spans = recorded(run)
    for key, expected in (
        (None, SpanExportResult.FAILURE),
        ("acme-read", SpanExportResult.FAILURE),
    ):
        exporter = OTLPSpanExporter(
            endpoint=f"127.0.0.1:{server.port}",
            insecure=True,
            headers={"authorization": f"Bearer {found[key]}"} if key else None,
        )
        try:
            assert exporter.export(spans) is expected
        finally:
            exporter.shutdown()
    with _exporting(server.port, found["acme-write"]) as tracer:
        run(tracer)
    with PmlClient(f"127.0.0.1:{server.port}", api_key=found["acme-read"]) as acme:
        assert len(list(acme.iter_patterns())) == 1
    with PmlClient(f"127.0.0.1:{server.port}", api_key=found["globex-admin"]) as globex:
        assert list(globex.iter_patterns()) == []
    requests = server.metrics.registry.get_sample_value(
        "pml_requests_total", {"method": "Export", "code": "UNAUTHENTICATED"}
    )
    assert requests == 1


@pytest.mark.parametrize("intent", [None, "\U0001f44d", "?!"])
def test_intent_falls_back_to_the_agent_name(
    server: RunningServer, client: PmlClient, intent: str | None
) -> None:
    """No user message, or one with no letter or digit (a "\U0001f44d" reply, which no intent
    can be: before, the run was rejected for it): the agent's name is the intent."""
    with _exporting(server.port) as tracer:
        _agent_run(tracer, intent, [("read_file", {"path": "a.json"}, None)], "csv-summarizer")
    assert _spans_counter(server, "rejected") == 0
    (pattern,) = client.iter_patterns()
    assert [i.text for i in pattern.intents] == ["csv-summarizer"]
    hits = client.suggest("csv-summarizer", tags=["intent:agent_name"]).suggestions
    assert [s.pattern.name for s in hits] == [pattern.name]


def test_undecodable_export_is_invalid_argument(server: RunningServer) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        export = channel.unary_unary(
            "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
            request_serializer=None,
            response_deserializer=None,
        )
        with pytest.raises(grpc.RpcError) as caught:
            export(b"\xff\xff\xff\xff")
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_strings_that_are_not_utf8_do_not_refuse_the_export(
    server: RunningServer, client: PmlClient
) -> None:
    """A Latin-1 byte in an HTTP span's name and in the agent's name (protobuf `string`s must
    be UTF-8, but the Collector's OTLP receiver passes such bytes on). Before: the parser
    refused the whole Export with INVALID_ARGUMENT, which exporters drop, and the run in it was
    lost. Now each broken sequence reads as U+FFFD and the run is captured."""
    spans = recorded(
        lambda t: _agent_run(t, None, [("read_file", {"path": "a.json"}, None)], "cafe agent")
    )
    raw = encode_spans(spans).SerializeToString()
    raw = raw.replace(b"cafe agent", b"caf\xe9 agent").replace(b"/health", b"/h\xe9alth")
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        export = channel.unary_unary(
            "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
            request_serializer=None,
            response_deserializer=ExportTraceServiceResponse.FromString,
        )
        reply = export(raw, timeout=30)
    assert reply.partial_success.rejected_spans == 0
    (pattern,) = client.iter_patterns()
    assert [i.text for i in pattern.intents] == ["caf\ufffd agent"]
    assert list(pattern.tools_used) == ["read_file"]


def _nest(value: AnyValue, levels: int, kind: str) -> None:
    """`value` made a kvlist (or array) holding one nested `levels` deep, a string inside."""
    for _ in range(levels):
        if kind == "kvlist":
            inner = value.kvlist_value.values.add()
            inner.key = "k"
            value = inner.value
        else:
            value = value.array_value.values.add()
    value.string_value = "bottom"


@pytest.mark.parametrize("kind", ["kvlist", "array"])
def test_an_attribute_nested_past_the_parsers_bound_is_cut_not_the_export_refused(
    server: RunningServer, client: PmlClient, kind: str
) -> None:
    """One attribute of a tool span nested 10,000 deep (the parser refuses a message nested
    past 100). Before: the whole Export was refused INVALID_ARGUMENT, which exporters drop, and
    every run in it was lost. Now the value is cut where it nests too deep, as the mapper cuts
    structured values, and both runs are captured (docs/capture.md, "Values nested too
    deep")."""
    spans = recorded(
        lambda t: (
            _agent_run(t, "Read JSON file", [("read_file", {"path": "a.json"}, None)]),
            _agent_run(t, "Read the JSON file", [("read_file", {"path": "b.json"}, None)]),
        )
    )
    request = encode_spans(spans)
    tool_span = next(
        span
        for span in request.resource_spans[0].scope_spans[0].spans
        if span.name == "execute_tool read_file"
    )
    deep = tool_span.attributes.add()
    deep.key = "mcp.result"
    _nest(deep.value, 10_000, kind)
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        export = channel.unary_unary(
            "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
            request_serializer=None,
            response_deserializer=ExportTraceServiceResponse.FromString,
        )
        reply = export(request.SerializeToString(), timeout=30)
    assert reply.partial_success.rejected_spans == 0
    (pattern,) = client.iter_patterns()
    assert pattern.usage_count == 2
    assert list(pattern.tools_used) == ["read_file"]


def _readme_block(heading: str, language: str) -> str:
    """The first code block tagged `language` ("" for an untagged one) under `heading` of
    docs/connect.md (the README links there for the walkthrough)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "connect.md").read_text()
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```(\w*)\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    return next(body for tag, body in blocks if tag == language)


def test_readme_walkthrough_spans_become_a_suggestion(
    server: RunningServer, client: PmlClient
) -> None:
    heading = "## Walkthrough: an OTel exporter's spans become a suggestion"
    script = _readme_block(heading, "python").replace("127.0.0.1:50051", f"127.0.0.1:{server.port}")
    exec(compile(script, "README walkthrough", "exec"), {"__name__": "walkthrough"})
    (best, *_) = client.suggest("Load a JSON file").suggestions
    assert list(best.pattern.tools_used) == ["read_file", "parse_json"]
    assert best.pattern.success_count == 2
    assert best.pattern.template == _readme_block(heading, "")


def test_a_draining_server_answers_unavailable_and_keeps_nothing_half_done(
    server: RunningServer, client: PmlClient
) -> None:
    spans = recorded(
        lambda t: _agent_run(t, "Read JSON file", [("read_file", {"path": "a.json"}, None)])
    )
    server.servicer.draining.set()
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.Export(encode_spans(spans), timeout=10)
        assert caught.value.code() is grpc.StatusCode.UNAVAILABLE
        server.servicer.draining.clear()
        reply = stub.Export(encode_spans(spans), timeout=10)
    assert reply.partial_success.rejected_spans == 0  # the HTTP span: ignored, and said so
    assert "1 spans ignored" in reply.partial_success.error_message
    (pattern,) = client.iter_patterns()
    assert pattern.usage_count == 1


def test_an_export_over_the_span_limit_is_resource_exhausted(server: RunningServer) -> None:
    """Before: one Export of 40k one-span executions took the server from 127 to 485 MB (the
    mapping holds every span at once). Past `limits.otlp_spans` the Export is refused whole,
    before any mapping, with RESOURCE_EXHAUSTED saying how to split it; at the limit it is
    taken."""
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
    from opentelemetry.proto.common.v1 import common_pb2
    from opentelemetry.proto.trace.v1 import trace_pb2

    from pml_server.domain.limits import LIMITS

    def export(count: int) -> trace_service_pb2.ExportTraceServiceRequest:
        operation = common_pb2.KeyValue(
            key="gen_ai.operation.name", value=common_pb2.AnyValue(string_value="invoke_agent")
        )
        spans = [
            trace_pb2.Span(
                trace_id=(i + 1).to_bytes(16, "big"),  # (all zero: invalid)
                span_id=(i + 1).to_bytes(8, "big"),
                name=f"invoke_agent agent{i}",
                attributes=[operation],
            )
            for i in range(count)
        ]
        scope = trace_pb2.ScopeSpans(spans=spans)
        return trace_service_pb2.ExportTraceServiceRequest(
            resource_spans=[trace_pb2.ResourceSpans(scope_spans=[scope])]
        )

    bound = LIMITS.otlp_spans.bound
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            stub.Export(export(bound + 1), timeout=60)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert f"is {bound + 1} items; the limit is {bound} items" in (
            refused.value.details() or ""
        )
        assert "smaller batches" in (refused.value.details() or "")
        assert _spans_counter(server, "ignored") == 0
        taken = stub.Export(export(bound), timeout=120)
        assert taken.partial_success.rejected_spans == 0
    # agent spans without a tool call, each alone in its trace: held for their settle window
    # (their calls may follow), then ignored
    assert _spans_counter(server, "held") == bound
    assert _spans_counter(server, "ignored") == 0


def test_runs_of_one_conversation_teach_what_comes_next(
    server: RunningServer, client: PmlClient
) -> None:
    """`gen_ai.conversation.id` on the agent runs makes them one session: the second run's
    capability becomes what usually follows the first (docs/ranking.md, Sessions)."""
    for conversation in ("conv-a", "conv-b"):
        with _exporting(server.port) as tracer:
            for intent, tool in (("List the folder", "list_dir"), ("Read JSON file", "read_file")):
                attributes = {
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.conversation.id": conversation,
                    "gen_ai.input.messages": _messages(intent),
                }
                call = {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": tool,
                    "gen_ai.tool.call.arguments": json.dumps({"path": "."}),
                }
                with (
                    tracer.start_as_current_span("invoke_agent a", attributes=attributes),
                    tracer.start_as_current_span(f"execute_tool {tool}", attributes=call),
                ):
                    pass
    following = client.suggest("", previous_tools=["list_dir"]).suggestions
    assert [list(s.pattern.tools_used) for s in following] == [["read_file"]]
    assert following[0].score.transition == pytest.approx(2 / 4)
    # the conversation's last step was read_file, after which nothing ever came
    assert list(client.suggest("", session_id="conv-b").suggestions) == []


def test_a_failed_agent_span_fails_its_run_though_its_calls_succeeded(
    server: RunningServer, client: PmlClient
) -> None:
    """An agent that raises after its tool calls succeeded: the SDK ends its `invoke_agent`
    span with status ERROR (and an exception event). Before: the span's status was not read,
    so the run was captured as a success (a new pattern saved, success counted)."""

    def crashed(tracer: Tracer) -> None:
        attributes = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.input.messages": _messages("Read JSON file"),
        }
        call = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "read_file",
            "gen_ai.tool.call.arguments": json.dumps({"path": "a.json"}),
        }
        try:
            with tracer.start_as_current_span("invoke_agent file-agent", attributes=attributes):
                with tracer.start_as_current_span("execute_tool read_file", attributes=call):
                    pass
                raise RuntimeError("max turns exceeded")  # the agent span sees it
        except RuntimeError:
            pass

    with _exporting(server.port) as tracer:
        crashed(tracer)
    assert list(client.iter_patterns()) == []  # a new pattern whose run failed: nothing
    assert _captures(server, "rejected") == 1
    with _exporting(server.port) as tracer:
        _agent_run(tracer, "Read JSON file", [("read_file", {"path": "b.json"}, None)])
        crashed(tracer)
    (pattern,) = client.iter_patterns()
    assert (pattern.usage_count, pattern.success_count) == (2, 1)
    assert _spans_counter(server, "rejected") == 0


def test_values_json_cannot_carry_never_fail_the_export(
    server: RunningServer, client: PmlClient
) -> None:
    """Real agents' careless attributes, through the SDK's exporter. Before: a lone surrogate
    escape (`JSON.stringify` of a string cut inside an emoji) in the arguments or the user
    message failed the whole Export INTERNAL (UnicodeEncodeError building the record; the
    exporter does not retry it, so the valid run beside it was lost); `NaN` (Python's
    `json.dumps` of a missing value) was stored as arguments no JSON reader parses; an int
    `gen_ai.tool.name` was stored as the tool `5`."""

    def call(tool: str | int, arguments: str) -> dict[str, str | int]:
        return {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.call.arguments": arguments,
        }

    def runs(tracer: Tracer) -> None:
        _agent_run(tracer, "Read JSON file", [("read_file", {"path": "a.json"}, None)])
        cut = json.dumps({"q": "news \ud83d"})  # '{"q": "news \\ud83d"}'
        agent = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.input.messages": json.dumps([{"role": "user", "content": "Find \ud83d"}]),
        }
        for name, attributes in (
            ("execute_tool search", call("search", cut)),
            ("execute_tool fill", call("fill", json.dumps({"n": float("nan")}))),
            ("execute_tool five", call(5, "{}")),
        ):
            with (
                tracer.start_as_current_span("invoke_agent a", attributes=agent),
                tracer.start_as_current_span(name, attributes=attributes),
            ):
                pass

    exporter = OTLPSpanExporter(endpoint=f"127.0.0.1:{server.port}", insecure=True)
    try:
        assert exporter.export(recorded(runs)) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    patterns = {p.tools_used[0]: p for p in client.iter_patterns()}
    assert sorted(patterns) == ["read_file", "search"]
    assert [i.text for i in patterns["search"].intents] == ["Find \ufffd"]
    assert patterns["search"].original_code == 'await mcp.search({"q": "news \ufffd"});\n'
    assert _spans_counter(server, "rejected") == 4  # the NaN run and the int-named run


def _bytes_in_arguments() -> tuple[ExportTraceServiceRequest, ExportTraceServiceRequest]:
    """One run whose call's arguments are a kvlist holding bytes, as (its tool and HTTP spans,
    its agent span)."""
    from opentelemetry.proto.common.v1 import common_pb2

    spans = recorded(
        lambda t: _agent_run(t, "Fetch a blob", [("fetch", {"path": "placeholder"}, None)])
    )
    head, root = encode_spans(spans[:-1]), encode_spans(spans[-1:])
    (tool,) = [s for s in head.resource_spans[0].scope_spans[0].spans if s.name.endswith("fetch")]
    (arguments,) = [kv for kv in tool.attributes if kv.key == "gen_ai.tool.call.arguments"]
    blob = common_pb2.KeyValue(key="blob", value=common_pb2.AnyValue(bytes_value=b"\xff"))
    arguments.value.CopyFrom(
        common_pb2.AnyValue(kvlist_value=common_pb2.KeyValueList(values=[blob]))
    )
    return head, root


def test_structured_bytes_arguments_reject_their_execution_alone(
    server: RunningServer, client: PmlClient
) -> None:
    """A kvlist `gen_ai.tool.call.arguments` holding bytes (OTLP allows it; the Python SDK
    cannot make a kvlist, so sent by hand). Before: TypeError writing the arguments as JSON, the
    whole Export INTERNAL, sent whole or held for its root."""
    valid = encode_spans(
        recorded(
            lambda t: _agent_run(t, "Read JSON file", [("read_file", {"path": "a.json"}, None)])
        )
    )
    head, root = _bytes_in_arguments()
    whole = ExportTraceServiceRequest()
    for part in (head, root, valid):
        whole.resource_spans.extend(part.resource_spans)
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        reply = stub.Export(whole, timeout=30)  # sent whole, beside a valid run
        assert reply.partial_success.rejected_spans == 2
        assert "holds a value JSON cannot carry" in reply.partial_success.error_message
        head, root = _bytes_in_arguments()  # another such run, split
        assert "2 spans held" in stub.Export(head, timeout=30).partial_success.error_message
        again = stub.Export(root, timeout=30)
    assert again.partial_success.rejected_spans == 2
    (pattern,) = client.iter_patterns()
    assert pattern.tools_used == ["read_file"]


def test_a_held_call_failed_by_an_int_error_type_is_a_failure(
    server: RunningServer, client: PmlClient
) -> None:
    """`error.type` set to the int 500 on a tool span held for its root (the SDK allows int
    attributes). Sent whole the call failed; before, the held form dropped the non-text
    attribute and the split run was captured as a success (a pattern saved)."""

    def run(tracer: Tracer) -> None:
        attributes = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.input.messages": _messages("Call the API"),
        }
        call: dict[str, str | int] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "call_api",
            "gen_ai.tool.call.arguments": json.dumps({"path": "/v1/items"}),
            "error.type": 500,
        }
        with (
            tracer.start_as_current_span("invoke_agent api-agent", attributes=attributes),
            tracer.start_as_current_span("execute_tool call_api", attributes=call),
        ):
            pass

    spans = recorded(run)  # in end order: the tool span, then the agent span
    exporter = OTLPSpanExporter(endpoint=f"127.0.0.1:{server.port}", insecure=True)
    try:
        for part in (spans[:1], spans[1:]):
            assert exporter.export(part) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    assert list(client.iter_patterns()) == []
    assert [(f.tool, f.error) for f in client.list_failures().failures] == [("call_api", "500")]
    assert _spans_counter(server, "held") == 1


def test_a_held_call_naming_its_tool_with_a_sequence_is_rejected_as_when_sent_whole(
    server: RunningServer, client: PmlClient
) -> None:
    """`gen_ai.tool.name` set to the sequence `["read_file"]` (the SDK allows sequence
    attributes): sent whole, the call names no tool (only a string does) and its run is
    rejected. Before: a call held for its root kept the value as the JSON text `["read_file"]`
    and the split run was captured with that tool."""

    def run(tracer: Tracer) -> None:
        call: dict[str, str | list[str]] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": ["read_file"],
            "gen_ai.tool.call.arguments": json.dumps({"path": "a.json"}),
        }
        with (
            tracer.start_as_current_span(
                "invoke_agent file-agent",
                attributes={
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.input.messages": _messages("Read JSON file"),
                },
            ),
            tracer.start_as_current_span("execute_tool read_file", attributes=call),
        ):
            pass

    whole, split = recorded(run), recorded(run)  # each in end order: tool span, agent span
    exporter = OTLPSpanExporter(endpoint=f"127.0.0.1:{server.port}", insecure=True)
    try:
        for part in (whole, split[:1], split[1:]):
            assert exporter.export(part) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    assert list(client.iter_patterns()) == []
    assert _spans_counter(server, "held") == 1
    assert _spans_counter(server, "rejected") == 4  # both runs, as sent whole


def test_a_held_call_whose_arguments_name_the_settling_mark_is_captured_with_its_run(
    server: RunningServer, client: PmlClient
) -> None:
    """A held call whose arguments hold the text `pml.otlp.settling` (the attribute key that
    marks a settling root's held form: an agent searching pml's own code). Before: the store
    took any held span holding those bytes for a settling root, so the call stayed out of its
    run when the root arrived and the run was captured short, without it. Now only the
    attribute marks a root settling."""
    calls: list[tuple[str, dict[str, object], str | None]] = [
        ("search_code", {"query": "pml.otlp.settling"}, None),
        ("read_file", {"path": "a.json"}, None),
    ]
    spans = recorded(lambda t: _agent_run(t, "Find the settling mark", calls))
    exporter = OTLPSpanExporter(endpoint=f"127.0.0.1:{server.port}", insecure=True)
    try:
        for part in (spans[:-1], spans[-1:]):  # the calls, then their root
            assert exporter.export(part) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    (pattern,) = client.iter_patterns()
    assert list(pattern.tools_used) == ["search_code", "read_file"]
    assert _spans_counter(server, "mapped") == 3


def test_a_sent_span_shaped_as_the_holds_marker_is_rejected_for_its_zero_id(
    server: RunningServer, client: PmlClient
) -> None:
    """A span sent with the all-zero span id and the attribute the hold's marker of lost spans
    carries (`pml.otlp.incomplete.links`), naming a run's agent span. Before: taken for the
    marker, it was counted nowhere (acknowledged, neither mapped, ignored nor rejected) and
    rejected that run as incomplete. Now a sent span is never a marker: refused for its id,
    the run beside it captured."""
    spans = recorded(
        lambda t: _agent_run(t, "Read JSON file", [("read_file", {"path": "a.json"}, None)])
    )
    request = encode_spans(spans)
    sent = request.resource_spans[0].scope_spans[0].spans
    root = next(s for s in sent if s.name.startswith("invoke_agent"))
    sent.append(incomplete_marker(root.trace_id, {root.span_id}))
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        reply = trace_service_pb2_grpc.TraceServiceStub(channel).Export(request, timeout=30)
    assert reply.partial_success.rejected_spans == 1
    assert "neither all zero" in reply.partial_success.error_message
    (pattern,) = client.iter_patterns()
    assert list(pattern.tools_used) == ["read_file"]
    counted = sum(_spans_counter(server, r) for r in ("mapped", "ignored", "rejected"))
    assert counted == len(sent)


def test_an_mcp_servers_own_spans_exported_after_the_run_are_never_held(
    server: RunningServer, client: PmlClient
) -> None:
    """The agent process and the MCP server process each export their spans (context
    propagated in the call): the server's `tools/call` SERVER spans, children of the agent's
    client spans, reach pml after the agent's Export captured the run. Before: held as calls
    waiting for a root that had come and gone, counted against `otlp_pending_spans`, written
    to disk, then expired with a warning; now the same calls seen twice, ignored."""
    from opentelemetry import context, propagate

    agent_side, server_side = InMemorySpanExporter(), InMemorySpanExporter()
    tracers = []
    for memory in (agent_side, server_side):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(memory))
        tracers.append(provider.get_tracer("tests"))
    agent, mcp = tracers
    attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "file-agent"}
    with agent.start_as_current_span("invoke_agent file-agent", attributes=attributes):
        for tool in ("read_file", "parse_json"):
            call = {"mcp.method.name": "tools/call", "gen_ai.tool.name": tool}
            with agent.start_as_current_span(
                f"tools/call {tool}", kind=SpanKind.CLIENT, attributes=call
            ):
                carrier: dict[str, str] = {}
                propagate.inject(carrier)  # the MCP request's `_meta`
                token = context.attach(propagate.extract(carrier, context=context.Context()))
                with mcp.start_as_current_span(
                    f"tools/call {tool}", kind=SpanKind.SERVER, attributes=call
                ):
                    pass
                context.detach(token)
    exporter = OTLPSpanExporter(endpoint=f"127.0.0.1:{server.port}", insecure=True)
    try:
        assert exporter.export(agent_side.get_finished_spans()) is SpanExportResult.SUCCESS
        assert exporter.export(server_side.get_finished_spans()) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    assert _spans_counter(server, "held") == 0
    assert _spans_counter(server, "ignored") == 2
    (pattern,) = client.iter_patterns()
    assert (list(pattern.tools_used), pattern.usage_count) == (["read_file", "parse_json"], 1)


def test_a_retried_export_of_a_split_runs_root_is_not_a_rejection(
    server: RunningServer, client: PmlClient
) -> None:
    """A run split over two Exports (its first call held), the second sent again (an exporter
    retrying after its deadline passed while pml captured it). Before: the retry mapped the
    root with the second call alone, a different execution under the run's request id,
    answered as rejected (`rejected_spans` 2, counted); now answered as the capture it
    repeats."""
    spans = recorded(
        lambda t: _agent_run(
            t,
            "Read JSON file",
            [("read_file", {"path": "a.json"}, None), ("parse_json", {"strict": True}, None)],
        )
    )  # end order: the HTTP span, read_file, parse_json, the agent span
    first, second = spans[:2], spans[2:]
    exporter = OTLPSpanExporter(endpoint=f"127.0.0.1:{server.port}", insecure=True)
    try:
        for part in (first, second, second):
            assert exporter.export(part) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        reply = trace_service_pb2_grpc.TraceServiceStub(channel).Export(encode_spans(second))
    assert reply.partial_success.rejected_spans == 0
    assert _spans_counter(server, "rejected") == 0
    (pattern,) = client.iter_patterns()
    assert (list(pattern.tools_used), pattern.usage_count) == (["read_file", "parse_json"], 1)


def _a_call_ending_after_its_root(tracer: Tracer) -> None:
    """A run whose second call ends after the run's `invoke_agent` span (a call the agent
    started and did not wait for): end order read_file, the agent span, parse_json."""
    attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "file-agent"}
    root = tracer.start_span("invoke_agent file-agent", attributes=attributes)
    inside = trace.set_span_in_context(root)
    calls = [
        tracer.start_span(
            f"execute_tool {tool}",
            context=inside,
            attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool},
        )
        for tool in ("read_file", "parse_json")
    ]
    calls[0].end()
    root.end()
    calls[1].end()


def _export(port: int, spans: list[ReadableSpan]) -> ExportTracePartialSuccess:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        return stub.Export(encode_spans(spans), timeout=30).partial_success


@pytest.mark.parametrize("with_root", [False, True])
def test_a_call_that_ends_after_its_captured_run_is_rejected_saying_so(
    server: RunningServer, client: PmlClient, with_root: bool
) -> None:
    """The run is captured with the calls exported beside its root; a call that ended after
    the root comes in a later Export, alone or beside the root again (a collector's retry).
    Before: alone, it was "ignored (no GenAI tool call, or one seen twice)"; beside the root,
    the run was rejected as another execution under a request id ("give each execution its
    own request_id"), its two captured spans counted as rejected too. Now the late call alone
    is rejected for what it is; the run's capture stands, never amended nor counted twice."""
    spans = recorded(_a_call_ending_after_its_root)
    late = f"{spans[2].context.trace_id:032x}/{spans[2].context.span_id:016x}"
    assert _export(server.port, spans[:2]) == ExportTracePartialSuccess()
    answer = _export(server.port, spans if with_root else spans[2:])
    assert answer.rejected_spans == 1
    assert answer.error_message == (
        f"span {late}: a tool call that ended after its run's root span and arrived after pml "
        "had mapped that run: a mapped run is never amended, so this call is not in it"
    )
    assert (_spans_counter(server, "rejected"), _spans_counter(server, "held")) == (1, 0)
    (pattern,) = client.iter_patterns()
    assert (list(pattern.tools_used), pattern.usage_count) == (["read_file"], 1)


def _calls_ending_after_their_root(tracer: Tracer) -> None:
    """A run whose calls but the first end after its `invoke_agent` span: end order read_file,
    the agent span, parse_json, write_file."""
    attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "file-agent"}
    root = tracer.start_span("invoke_agent file-agent", attributes=attributes)
    inside = trace.set_span_in_context(root)
    calls = [
        tracer.start_span(
            f"execute_tool {tool}",
            context=inside,
            attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool},
        )
        for tool in ("read_file", "parse_json", "write_file")
    ]
    calls[0].end()
    root.end()
    calls[1].end()
    calls[2].end()


@pytest.mark.parametrize("captured", [2, 3])
def test_a_root_sent_again_with_a_later_call_after_a_restart_rejects_that_call_alone(
    start: StartServer, captured: int
) -> None:
    """The process that captured the run is gone (a restart, another replica): the root
    exported again beside a call that ended after it and after the Export that brought the
    root (`captured` 3: a call that also ended after the root, in that Export, is in the run).
    Before: rejected whole as captured before, the root and the calls captured with it
    counted rejected beside their capture (`rejected_spans` 4 and 3). Now the run short of the
    calls that came later replays its capture: those calls alone are rejected, as in the
    process that captured the run, and the rest count as that capture."""
    server = start()
    spans = recorded(_calls_ending_after_their_root)
    late = [f"{s.context.trace_id:032x}/{s.context.span_id:016x}" for s in spans[captured:]]
    assert _export(server.port, spans[:captured]) == ExportTracePartialSuccess()
    server.stop(grace=1.0)
    again = start()
    answer = _export(again.port, spans)
    assert answer == ExportTracePartialSuccess(
        rejected_spans=len(late), error_message="; ".join(f"span {r}: {LATE_CALL}" for r in late)
    )
    assert _spans_counter(again, "rejected") == len(late)
    assert _spans_counter(again, "mapped") == captured
    with PmlClient(f"127.0.0.1:{again.port}") as client:
        (pattern,) = client.iter_patterns()
    tools = ["read_file", "parse_json", "write_file"][: captured - 1]
    assert (list(pattern.tools_used), pattern.usage_count) == (tools, 1)


@pytest.mark.parametrize("restarts", [1, 2])
def test_a_late_call_held_after_a_restart_is_rejected_alone_when_its_root_comes_again(
    start: StartServer, restarts: int
) -> None:
    """The run is captured from its root and the call that ended before it; the process is
    gone (a restart, another replica), then the call that ended after the root comes alone (it
    is held: no process remembers its run) and the root is exported again alone (a retry),
    after one more restart or not. Before: the root and the held call were rejected whole as
    "captured before with other calls", the root counted rejected beside its capture. Now the
    root's request id is found captured (`captured_answer`): the root counts as that capture,
    the held call alone is rejected as arriving after its run was mapped, as the process that
    captured the run answers, and nothing stays held."""
    spans = recorded(_a_call_ending_after_its_root)  # read_file, the root, parse_json
    late = f"{spans[2].context.trace_id:032x}/{spans[2].context.span_id:016x}"
    server = start()
    assert _export(server.port, spans[:2]) == ExportTracePartialSuccess()
    for restart in range(restarts):
        server.stop(grace=1.0)
        server = start()
        if restart == 0:
            held = _export(server.port, spans[2:])
            assert held.error_message.startswith("1 spans held until their run's invoke_agent")
    answer = _export(server.port, spans[1:2])
    assert answer == ExportTracePartialSuccess(
        rejected_spans=1, error_message=f"span {late}: {LATE_CALL}"
    )
    assert (_spans_counter(server, "mapped"), _spans_counter(server, "rejected")) == (1, 1)
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        (pattern,) = client.iter_patterns()
    assert (list(pattern.tools_used), pattern.usage_count) == (["read_file"], 1)
    # the held call was consumed: the root once more is the mapped run's seen again
    assert _export(server.port, spans[1:2]).rejected_spans == 0
    assert _spans_counter(server, "rejected") == 1


def test_a_root_sent_again_with_other_calls_after_a_restart_names_why_it_is_rejected(
    start: StartServer,
) -> None:
    """The root exported again, after a restart, beside a call that ended before it and that
    its run was not captured with (the root exported again with other spans): another
    execution under the run's request id, rejected whole with a message saying the run's root
    span was captured before with other calls (not the API's message for a client's request
    id, "give each execution its own request_id ... StreamTraces"); the capture stands."""
    server = start()
    spans = recorded(
        lambda t: _agent_run(t, "Read JSON file", [("read_file", {"path": "a.json"}, None)])
    )
    root = spans[-1]
    assert _export(server.port, spans) == ExportTracePartialSuccess(
        error_message="1 spans ignored (no GenAI tool call, or one seen twice)"
    )
    server.stop(grace=1.0)
    again = start()
    other = recorded(
        lambda t: _agent_run(t, "Read JSON file", [("write_file", {"path": "b.json"}, None)])
    )[1]  # a call that ended before the root
    other._context = trace.SpanContext(
        root.context.trace_id, other.context.span_id, is_remote=False
    )
    other._parent = root.context
    assert root.start_time is not None
    assert root.end_time is not None
    other._start_time, other._end_time = root.start_time + 1, root.end_time - 1
    answer = _export(again.port, [other, root])
    assert answer.rejected_spans == 2
    assert "request_id" not in answer.error_message
    assert answer.error_message.endswith(
        ": this run's root span was captured before with other calls or content (a call that "
        "ended after the root span, or the root exported again with other spans): a captured "
        "run is never amended, so this one is not captured"
    )
    assert _spans_counter(again, "rejected") == 2
    with PmlClient(f"127.0.0.1:{again.port}") as client:
        (pattern,) = client.iter_patterns()
        assert (list(pattern.tools_used), pattern.usage_count) == (["read_file"], 1)


@pytest.mark.parametrize("split", [False, True])
def test_a_tool_error_on_the_mcp_client_span_fails_the_call(
    server: RunningServer, client: PmlClient, split: bool
) -> None:
    """The agent framework's `execute_tool` span (no error set) around the MCP client span,
    which sets `error.type = tool_error` for a result with `isError`. Before: the client span
    was ignored as the same call seen twice, its failure with it, and the run captured as a
    success (a pattern saved). Sent whole, or its tool spans before its agent span."""

    def run(tracer: Tracer) -> None:
        attributes = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.input.messages": _messages("Read JSON file"),
        }
        call = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "read_file",
            "gen_ai.tool.call.arguments": json.dumps({"path": "a.json"}),
        }
        mcp = {"mcp.method.name": "tools/call", "gen_ai.tool.name": "read_file"}
        with (
            tracer.start_as_current_span("invoke_agent file-agent", attributes=attributes),
            tracer.start_as_current_span("execute_tool read_file", attributes=call),
            tracer.start_as_current_span(
                "tools/call read_file", kind=SpanKind.CLIENT, attributes=mcp
            ) as client_span,
        ):
            client_span.set_attribute("error.type", "tool_error")
            client_span.set_status(Status(StatusCode.ERROR, "no such file"))

    spans = recorded(run)  # end order: the MCP client span, execute_tool, invoke_agent
    exporter = OTLPSpanExporter(endpoint=f"127.0.0.1:{server.port}", insecure=True)
    try:
        for part in (spans[:2], spans[2:]) if split else (spans,):
            assert exporter.export(part) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    assert list(client.iter_patterns()) == []
    failures = [(f.tool, f.error) for f in client.list_failures().failures]
    assert failures == [("read_file", "tool_error: no such file")]


def test_a_run_whose_spans_overflowed_the_hold_is_rejected_not_captured_short(
    start: StartServer,
) -> None:
    """`otlp_pending_spans = 2`: a run's first two calls are held, its third is refused
    (overflow, said in `partial_success`), its fourth arrives with its root. Before: the run
    was captured from the three calls it still had, a shorter run stored as a success pattern
    (`read_file, parse_json, write_file`). Now it is rejected when its root arrives, and the
    held spans it can no longer use are let go: the next run fits and is captured whole."""
    server = start(otlp_pending_spans=2)
    tools = ["read_file", "parse_json", "sum_column", "write_file"]

    def run(tracer: Tracer) -> None:
        _agent_run(tracer, "Sum a file", [(tool, {"n": 1}, None) for tool in tools])

    def export(spans: list[ReadableSpan]) -> ExportTracePartialSuccess:
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = trace_service_pb2_grpc.TraceServiceStub(channel)
            reply = stub.Export(encode_spans(spans), timeout=30)
            return reply.partial_success  # type: ignore[no-any-return]

    spans = [s for s in recorded(run) if s.name != "GET /health"]  # 4 calls, then the root
    assert "2 spans held" in export(spans[:2]).error_message
    refused = export(spans[2:3])
    assert refused.rejected_spans == 1
    assert "otlp_pending_spans = 2" in refused.error_message
    last = export(spans[3:])
    assert last.rejected_spans == 2
    assert "incomplete, not captured" in last.error_message
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        assert list(client.iter_patterns()) == []
        spans = [s for s in recorded(run) if s.name != "GET /health"]
        assert "1 spans held" in export(spans[:1]).error_message
        assert export(spans[1:]).rejected_spans == 0
        (pattern,) = client.iter_patterns()
    assert pattern.tools_used == tools


def test_a_run_whose_held_spans_expired_is_rejected_not_captured_short(
    start: StartServer,
) -> None:
    """`otlp_pending_seconds = 0.5`: a run's first calls are held and expire; its root then
    arrives with its last call. Before: captured from that last call alone, a one-call run
    stored as a success pattern (`write_file`), though the docs said such a run is not
    captured. Now it is rejected."""
    server = start(otlp_pending_seconds=0.5)
    tools = ["read_file", "parse_json", "write_file"]
    spans = [
        s
        for s in recorded(
            lambda t: _agent_run(t, "Sum a file", [(tool, {"n": 1}, None) for tool in tools])
        )
        if s.name != "GET /health"
    ]  # 3 calls, then the root
    exporter = OTLPSpanExporter(endpoint=f"127.0.0.1:{server.port}", insecure=True)
    try:
        assert exporter.export(spans[:2]) is SpanExportResult.SUCCESS
        time.sleep(1.0)
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = trace_service_pb2_grpc.TraceServiceStub(channel)
            reply = stub.Export(encode_spans(spans[2:]), timeout=30)
    finally:
        exporter.shutdown()
    assert reply.partial_success.rejected_spans == 2
    assert "incomplete, not captured" in reply.partial_success.error_message
    assert _spans_counter(server, "expired") == 2
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        assert list(client.iter_patterns()) == []


def test_huge_arguments_of_held_calls_are_not_held(
    server: RunningServer, client: PmlClient, data_dir: Path
) -> None:
    """A run's calls each with 1 MB of arguments (a `write_file` of a whole file), exported
    before its root as the SDK's processors do. Before: each held whole (8 MB written for 8
    calls, every later Export of the trace reading them all back; 60 calls of 7 MB took the
    server to 3.5 GB when the root arrived), though the API refuses arguments over 64 KiB.
    Now held without them, and the run rejected for them when its root arrives."""

    def run(tracer: Tracer) -> None:
        content = "y" * 1_000_000
        calls = [("write_file", {"path": f"f{n}", "content": content}, None) for n in range(8)]
        _agent_run(tracer, "Write the files", calls)

    spans = recorded(run)  # end order: the calls, then the agent span
    exporter = OTLPSpanExporter(endpoint=f"127.0.0.1:{server.port}", insecure=True)

    def stored() -> int:
        return sum(p.stat().st_size for p in data_dir.rglob("*") if p.is_file())

    before = stored()
    try:
        for span in spans[:-1]:
            assert exporter.export([span]) is SpanExportResult.SUCCESS
        assert stored() - before < 1_000_000
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = trace_service_pb2_grpc.TraceServiceStub(channel)
            reply = stub.Export(encode_spans(spans[-1:]), timeout=30)
    finally:
        exporter.shutdown()
    assert reply.partial_success.rejected_spans == 9
    assert "gen_ai.tool.call.arguments: is 1000029 bytes; the limit is 65536 bytes" in (
        reply.partial_success.error_message
    )
    assert list(client.iter_patterns()) == []


def _root_first(tools: list[str]) -> list[ReadableSpan]:
    """A run's spans in the order an exporter sending each span alone over concurrent requests
    may deliver them: the `invoke_agent` root first, then its calls."""
    spans = recorded(
        lambda t: _agent_run(t, "Sum a file", [(tool, {"n": 1}, None) for tool in tools])
    )  # end order: the HTTP span, the calls, the agent span
    return spans[-1:] + spans[:-1]


def _export_each(port: int, spans: list[ReadableSpan]) -> list[ExportTracePartialSuccess]:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        return [stub.Export(encode_spans([s]), timeout=30).partial_success for s in spans]


def test_a_root_exported_before_its_calls_is_captured_whole(start: StartServer) -> None:
    """The root span reaches pml before its calls, each span in its own Export (the
    JavaScript SDK's simple span processor over HTTP, whose requests do not wait for each
    other). Before: the root alone was ignored and its calls held until they expired, the run
    never captured. Now the root is held for `otlp_settle_seconds`, the calls arriving
    meanwhile beside it, and the settle thread captures the run whole once."""
    server = start(otlp_settle_seconds=0.5)
    tools = ["read_file", "parse_json", "write_file"]
    replies = _export_each(server.port, _root_first(tools))
    assert replies[0].rejected_spans == 0
    assert "1 invoke_agent spans with no tool call held 0.5 s" in replies[0].error_message
    assert all(r.rejected_spans == 0 for r in replies)
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        assert eventually(lambda: list(client.iter_patterns()), 20)
        (pattern,) = client.iter_patterns()
        assert (list(pattern.tools_used), pattern.usage_count) == (tools, 1)
        assert pattern.success_count == 1
    assert _spans_counter(server, "mapped") == 4  # the root and its three calls
    # the HTTP span held as a possible link, let go with the run
    assert eventually(lambda: _spans_counter(server, "ignored") == 1, 20)


def test_a_root_first_run_whose_step_span_comes_before_its_calls_is_captured_whole(
    start: StartServer,
) -> None:
    """The calls sit under a step span of the agent (a framework's chain or step), each span
    in its own Export, the root first and the step before its calls (concurrent requests
    reorder them as they reorder the root). Before: the step, no call and nothing above it in
    its Export, was ignored, so the calls arriving after it never reached the settling root:
    held until they expired, the run never captured. Now the step is held beside the root."""

    def run(tracer: Tracer) -> None:
        agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "sum agent"}
        with (
            tracer.start_as_current_span("invoke_agent sum", attributes=agent),
            tracer.start_as_current_span("step 1"),
        ):
            for tool in ("read_file", "write_file"):
                call = {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": tool,
                    "gen_ai.tool.call.arguments": json.dumps({"n": 1}),
                }
                with tracer.start_as_current_span(f"execute_tool {tool}", attributes=call):
                    pass

    server = start(otlp_settle_seconds=0.5)
    first, second, step, root = recorded(run)  # (in end order)
    replies = _export_each(server.port, [root, step, first, second])
    assert all(r.rejected_spans == 0 for r in replies)
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        assert eventually(lambda: list(client.iter_patterns()), 20)
        (pattern,) = client.iter_patterns()
        assert (list(pattern.tools_used), pattern.success_count) == (["read_file", "write_file"], 1)
    assert _spans_counter(server, "mapped") == 3  # the root and its two calls
    assert eventually(lambda: _spans_counter(server, "ignored") == 1, 20)  # the step


def test_a_settling_root_sent_again_does_not_capture_its_run_short(start: StartServer) -> None:
    """A root-first run whose root's Export is retried (its answer lost) after its first call
    arrived and before the others. Before: the retry mapped the root with that one call at
    once, the run stored as a one-call success and the two calls after it ignored as seen
    twice. Now the root sent again is that root seen twice; the window decides, and the run
    is captured whole."""
    server = start(otlp_settle_seconds=1.0)
    tools = ["read_file", "parse_json", "write_file"]
    root, http, first, second, third = _root_first(tools)
    replies = _export_each(server.port, [root, first, root, second, third, http])
    assert all(r.rejected_spans == 0 for r in replies)
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        assert eventually(lambda: list(client.iter_patterns()), 20)
        (pattern,) = client.iter_patterns()
        assert (list(pattern.tools_used), pattern.usage_count) == (tools, 1)
    assert _spans_counter(server, "mapped") == 4  # the root and its three calls


def test_a_turn_that_called_no_tool_is_let_go_after_the_settle_window(
    start: StartServer,
) -> None:
    """An `invoke_agent` span with no call (a chat-only turn) is held for the window, then
    ignored and deleted: nothing is captured and nothing stays held."""
    server = start(otlp_settle_seconds=0.3)
    spans = recorded(lambda t: _agent_run(t, "Say hello", []))
    root = [s for s in spans if s.name.startswith("invoke_agent")]
    (reply,) = _export_each(server.port, root)
    assert "held 0.3 s" in reply.error_message
    assert eventually(lambda: _spans_counter(server, "ignored") == 1, 20)
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        assert list(client.iter_patterns()) == []
    assert _spans_counter(server, "held") == 1


def test_a_root_first_run_held_over_a_restart_is_captured_after_it(
    start: StartServer,
) -> None:
    """The server stops between a root-first run's spans and the end of its settle window:
    they were acknowledged, so they are on disk, and the next start captures the run."""
    server = start(otlp_settle_seconds=1.0)
    tools = ["read_file", "write_file"]
    _export_each(server.port, _root_first(tools))
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        assert list(client.iter_patterns()) == []
    server.stop(grace=1.0)
    again = start(otlp_settle_seconds=1.0)
    with PmlClient(f"127.0.0.1:{again.port}") as client:
        assert eventually(lambda: list(client.iter_patterns()), 20)
        (pattern,) = client.iter_patterns()
        assert (list(pattern.tools_used), pattern.usage_count) == (tools, 1)


def test_a_batch_export_of_whole_runs_holds_nothing(
    server: RunningServer, client: PmlClient
) -> None:
    """What the batch processor sends (a run's spans, its root last, in one Export) is mapped
    in that Export: a run with calls captured, a turn with no call but other spans of its own
    (here an HTTP span) ignored at once, not held for the settle window."""

    def runs(tracer: Tracer) -> None:
        _agent_run(tracer, "Copy a file", [("read_file", {}, None), ("write_file", {}, None)])
        _agent_run(tracer, "Say hello", [])

    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        reply = trace_service_pb2_grpc.TraceServiceStub(channel).Export(
            encode_spans(recorded(runs))
        )
    assert "held" not in reply.partial_success.error_message
    assert _spans_counter(server, "held") == 0
    assert _spans_counter(server, "ignored") == 3  # the two HTTP spans and the turn's root
    (pattern,) = client.iter_patterns()
    assert list(pattern.tools_used) == ["read_file", "write_file"]


def test_settling_roots_count_against_the_hold_bound(start: StartServer) -> None:
    """Lone roots are held within `otlp_pending_spans` like calls: past it, one is ignored as
    before the settle window existed (never an error), and the room comes back once the held
    ones have settled."""
    server = start(otlp_settle_seconds=0.3, otlp_pending_spans=2)
    roots = [
        [s for s in recorded(lambda t: _agent_run(t, "Say hello", [])) if s.parent is None]
        for _ in range(4)
    ]  # four traces
    replies = _export_each(server.port, [r[0] for r in roots[:3]])
    assert ["held" in r.error_message for r in replies] == [True, True, False]
    assert all(r.rejected_spans == 0 for r in replies)
    assert (_spans_counter(server, "held"), _spans_counter(server, "ignored")) == (2, 1)
    assert eventually(lambda: _spans_counter(server, "ignored") == 3, 20)  # settled, let go
    (reply,) = _export_each(server.port, roots[3])
    assert "held" in reply.error_message


def _conversation_run(
    tracer: Tracer, intent: str, tool: str, on_agent: str | None, on_call: str | None
) -> None:
    """One agent run calling `tool` once, `gen_ai.conversation.id` set on its agent span and
    on its call span as given (None: not set there)."""
    agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.input.messages": _messages(intent)}
    call = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool,
        "gen_ai.tool.call.arguments": json.dumps({"path": "."}),
    }
    if on_agent is not None:
        agent["gen_ai.conversation.id"] = on_agent
    if on_call is not None:
        call["gen_ai.conversation.id"] = on_call
    with (
        tracer.start_as_current_span("invoke_agent a", attributes=agent),
        tracer.start_as_current_span(f"execute_tool {tool}", attributes=call),
    ):
        pass


def test_a_conversation_id_on_the_calls_only_is_the_runs_session(
    server: RunningServer, client: PmlClient
) -> None:
    """An instrumentation that sets `gen_ai.conversation.id` on its tool-call spans and not on
    the agent's: each turn of the conversation is its own trace, so the trace id would make
    every turn a session of one step. The run's conversation id is its agent span's, else its
    first call's (docs/ranking.md, Sessions)."""
    for conversation in ("conv-a", "conv-b"):
        for intent, tool in (("List the folder", "list_dir"), ("Read JSON file", "read_file")):
            with _exporting(server.port) as tracer:  # one trace a turn
                _conversation_run(tracer, intent, tool, None, conversation)
    following = client.suggest("", previous_tools=["list_dir"]).suggestions
    assert [list(s.pattern.tools_used) for s in following] == [["read_file"]]
    assert following[0].score.transition == pytest.approx(2 / 4)


@pytest.mark.parametrize("unseen", ["\u202e", "\u200b", "\u2028", "\x01"])
def test_a_conversation_id_the_api_refuses_is_not_the_runs_session_and_says_so(
    server: RunningServer, client: PmlClient, unseen: str
) -> None:
    """A `gen_ai.conversation.id` holding a control or invisible character, which the API
    refuses as a `session_id` (docs/ranking.md, Sessions): the run is captured in its trace's
    session, and the answer names the attribute as a warning. Before: a control character was
    passed over in silence, and an invisible one (a right-to-left override, a zero-width
    space, a line separator) made a session the API would have refused."""
    conversation = f"conv{unseen}-a"
    name = unicodedata.name(unseen, "unnamed")
    for intent, tool in (("List the folder", "list_dir"), ("Read JSON file", "read_file")):
        spans = recorded(lambda t, i=intent, u=tool: _conversation_run(t, i, u, conversation, None))
        root = f"{spans[-1].context.trace_id:032x}/{spans[-1].context.span_id:016x}"
        assert _export(server.port, spans) == ExportTracePartialSuccess(
            error_message=f"span {root}: gen_ai.conversation.id must not contain control or "
            f"invisible characters (U+{ord(unseen):04X} {name}): not used as the run's session"
        )
    assert sorted(p.tools_used[0] for p in client.iter_patterns()) == ["list_dir", "read_file"]
    # Each run is its own trace's session: no step followed another.
    assert client.suggest("", previous_tools=["list_dir"]).suggestions == []


@pytest.mark.parametrize(
    ("conversation", "problem"),
    [
        ("c" * 200, "is 200 characters; the limit is 128 characters"),
        ("conv\u202e-a", "must not contain control or invisible characters (U+202E "
                         "RIGHT-TO-LEFT OVERRIDE)"),
    ],
)  # fmt: skip
def test_a_held_calls_refused_conversation_id_is_named_when_its_run_is_captured(
    server: RunningServer, client: PmlClient, conversation: str, problem: str
) -> None:
    """The refused conversation id is on a call held for its root (exported first). Before:
    the held form dropped one over 128 characters, and the run's answer said nothing, where the
    run sent whole names it; now the held form keeps why it was refused (never the id)."""
    spans = recorded(lambda t: _conversation_run(t, "List it", "list_dir", None, conversation))
    call = f"{spans[0].context.trace_id:032x}/{spans[0].context.span_id:016x}"
    assert _export(server.port, spans[:1]).rejected_spans == 0
    assert _export(server.port, spans[1:]) == ExportTracePartialSuccess(
        error_message=f"span {call}: gen_ai.conversation.id {problem}: not used as the run's "
        "session"
    )
    (pattern,) = client.iter_patterns()
    assert list(pattern.tools_used) == ["list_dir"]


# A conversation id as OpenAI's Conversations API names them: credential-shaped to redaction
# (long, random), so a held span may not keep it as it is.
OPENAI_CONVERSATION = "conv_689667905b048191b4740501625afd940c7533ace33a2dab"


def test_a_run_split_over_several_exports_keeps_its_conversation(start: StartServer) -> None:
    """Two turns of one conversation, the first exported whole, the second span by span with
    its root first (held settling, then captured from its held form). Before: the held root
    dropped a conversation id that redaction would change, and the second turn became a
    session of its own (its trace id): nothing was learned. Now the held root keeps a digest
    of it, which names the same session (docs/capture.md, What a held span keeps)."""
    server = start(otlp_settle_seconds=0.5)
    first = recorded(
        lambda t: _conversation_run(t, "List the folder", "list_dir", OPENAI_CONVERSATION, None)
    )
    second = recorded(
        lambda t: _conversation_run(t, "Read JSON file", "read_file", OPENAI_CONVERSATION, None)
    )
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        assert stub.Export(encode_spans(first), timeout=30).partial_success.rejected_spans == 0
    replies = _export_each(server.port, second[-1:] + second[:-1])
    assert "1 invoke_agent spans with no tool call held" in replies[0].error_message
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        assert eventually(lambda: len(list(client.iter_patterns())) == 2, 20)
        following = client.suggest("", previous_tools=["list_dir"]).suggestions
        assert [list(s.pattern.tools_used) for s in following] == [["read_file"]]


def _copy_run(tools: list[str]) -> ExportTraceServiceRequest:
    """One Export of a whole run (root, its calls and an HTTP span), as the SDK encodes it."""
    return encode_spans(
        recorded(lambda t: _agent_run(t, "Copy a file", [(tool, {"n": 1}, None) for tool in tools]))
    )


def test_the_same_spans_twice_in_one_export_count_once(server: RunningServer) -> None:
    """A collector that merges an Export with its retry sends every span twice in one request.
    Before: the copies vanished from the counts (neither mapped, ignored nor rejected). Now
    each copy is a span seen twice, ignored and counted, and the run is captured once."""
    request = _copy_run(["read_file", "write_file"])
    spans = request.resource_spans[0].scope_spans[0].spans
    spans.extend(list(spans))
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        answer = stub.Export(request, timeout=30).partial_success
    assert answer.rejected_spans == 0
    assert _spans_counter(server, "mapped") == 3
    assert _spans_counter(server, "ignored") == 1 + 4  # the HTTP span; the 4 copies
    assert "5 spans ignored" in answer.error_message
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        [pattern] = client.iter_patterns()
    assert list(pattern.tools_used) == ["read_file", "write_file"]
    assert pattern.usage_count == 1


def test_a_span_id_sent_twice_with_other_content_rejects_its_run(server: RunningServer) -> None:
    """Two different spans under one id (two processes whose seeded `random` made the same
    ids, their spans merged by a collector). Before: the later one silently replaced the
    earlier, and the run was captured as a success of one call though it made two. Now the
    run is rejected, its spans and the copy counted as rejected, and nothing is stored."""
    request = _copy_run(["read_file"])
    spans = request.resource_spans[0].scope_spans[0].spans
    [call] = [s for s in spans if s.name == "execute_tool read_file"]
    other = type(call)()
    other.CopyFrom(call)
    for kv in other.attributes:
        if kv.key == "gen_ai.tool.name":
            kv.value.string_value = "delete_file"
    spans.append(other)
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        answer = stub.Export(request, timeout=30).partial_success
    assert answer.rejected_spans == 3  # the root, its call, and the other span of that id
    assert f"{call.span_id.hex()}: sent twice with different content" in answer.error_message
    assert _spans_counter(server, "mapped") == 0
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        assert list(client.iter_patterns()) == []


def test_calls_held_and_sent_again_with_their_root_are_captured_once(
    server: RunningServer,
) -> None:
    """An exporter retrying the Export of calls pml holds, now with their root: the calls
    arrive both held and sent. They are one call each, never a conflict; the run is captured
    once with both calls."""
    request = _copy_run(["read_file", "write_file"])
    spans = list(request.resource_spans[0].scope_spans[0].spans)
    calls = [s for s in spans if s.name.startswith("execute_tool")]
    first = ExportTraceServiceRequest()
    first.resource_spans.add().scope_spans.add().spans.extend(calls)
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        assert "2 spans held" in stub.Export(first, timeout=30).partial_success.error_message
        answer = stub.Export(request, timeout=30).partial_success
    assert answer.rejected_spans == 0
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        [pattern] = client.iter_patterns()
    assert list(pattern.tools_used) == ["read_file", "write_file"]
    assert pattern.usage_count == 1


def test_a_held_span_id_sent_twice_with_other_content_rejects_its_run_later(
    server: RunningServer,
) -> None:
    """The same as above with the run's root still to come: the calls are held with a marker
    of the conflict, and the root arriving later rejects the run (before: captured with
    whichever copy came last)."""
    request = _copy_run(["read_file"])
    spans = list(request.resource_spans[0].scope_spans[0].spans)
    [call] = [s for s in spans if s.name == "execute_tool read_file"]
    [root] = [s for s in spans if s.name.startswith("invoke_agent")]
    other = type(call)()
    other.CopyFrom(call)
    other.name = "execute_tool delete_file"
    for kv in other.attributes:
        if kv.key == "gen_ai.tool.name":
            kv.value.string_value = "delete_file"
    calls, last = ExportTraceServiceRequest(), ExportTraceServiceRequest()
    calls.resource_spans.add().scope_spans.add().spans.extend([call, other])
    last.resource_spans.add().scope_spans.add().spans.extend([root])
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        assert stub.Export(calls, timeout=30).partial_success.rejected_spans == 1
        answer = stub.Export(last, timeout=30).partial_success
    assert answer.rejected_spans == 2
    assert "sent twice with different content" in answer.error_message
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        assert list(client.iter_patterns()) == []


def _two_runs(
    tracer: Tracer, first: str | None, second: str | None, *, on_call: bool = False
) -> None:
    """One trace of two agent runs under a workflow span (not an agent's): `list_dir`, then
    `read_file`, each run's `gen_ai.conversation.id` as given (None: not set), on its agent
    span or (`on_call`) on its call span."""
    with tracer.start_as_current_span("workflow"):
        for intent, tool, conversation in (
            ("List the folder", "list_dir", first),
            ("Read JSON file", "read_file", second),
        ):
            if on_call:
                _conversation_run(tracer, intent, tool, None, conversation)
            else:
                _conversation_run(tracer, intent, tool, conversation, None)


def _follows_list_dir(client: PmlClient) -> list[list[str]]:
    """The capabilities the sessions learned to follow `list_dir`."""
    following = client.suggest("", previous_tools=["list_dir"]).suggestions
    return [list(s.pattern.tools_used) for s in following]


@pytest.mark.parametrize(
    ("first", "second", "on_call"),
    [("conv-a", None, False), (None, "conv-a", False), ("conv-a", None, True)],
    ids=["first-run-names-it", "second-run-names-it", "on-a-call"],
)
def test_runs_of_a_trace_that_names_one_conversation_are_in_it(
    server: RunningServer, client: PmlClient, first: str | None, second: str | None, on_call: bool
) -> None:
    """Two runs of one trace, one of them carrying `gen_ai.conversation.id`. Before: the other
    run fell back to its trace id, so the two were two sessions and nothing was learned. A
    trace whose runs name one conversation is that conversation (docs/ranking.md, Sessions)."""
    with _exporting(server.port) as tracer:
        _two_runs(tracer, first, second, on_call=on_call)
    _assert_a_later_turn_of_conv_a_follows(server, client)


def _assert_a_later_turn_of_conv_a_follows(server: RunningServer, client: PmlClient) -> None:
    """The trace's runs are in conversation `conv-a`: `read_file` follows `list_dir`, and a
    later turn of `conv-a`, its own trace, follows the trace's last step."""
    with _exporting(server.port) as tracer:
        _conversation_run(tracer, "Write the file", "write_file", "conv-a", None)
    assert _follows_list_dir(client) == [["read_file"]]
    following = client.suggest("", previous_tools=["read_file"]).suggestions
    assert [list(s.pattern.tools_used) for s in following] == [["write_file"]]


def test_two_conversations_in_one_trace_stay_apart(
    server: RunningServer, client: PmlClient
) -> None:
    """A trace whose runs name two conversations: each run stays in its own (a run naming
    none would be in its trace's session, which neither is)."""
    with _exporting(server.port) as tracer:
        _two_runs(tracer, "conv-a", "conv-b")
    assert len(list(client.iter_patterns())) == 2
    assert _follows_list_dir(client) == []


def test_a_trace_whose_conversation_came_in_an_earlier_export_keeps_it(
    server: RunningServer, client: PmlClient
) -> None:
    """The trace's first run, with its conversation id, in one Export; its second run, naming
    none, in the next (a batch processor flushing between them). The second run is in the
    conversation the first named, as when both come in one Export."""
    spans = recorded(lambda t: _two_runs(t, "conv-a", None))
    first_run = [s for s in spans if s.name != "workflow" and "read_file" not in s.name][:2]
    rest = [s for s in spans if s not in first_run]
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        for part in (first_run, rest):
            assert stub.Export(encode_spans(part), timeout=30).partial_success.rejected_spans == 0
    _assert_a_later_turn_of_conv_a_follows(server, client)


def test_a_split_run_whose_conversation_id_comes_in_the_second_export_is_in_it(
    server: RunningServer, client: PmlClient
) -> None:
    """A run's call, with no conversation id, in one Export (held: its root has not ended); its
    agent span, naming the conversation, in the next. The run is in that conversation."""
    with _exporting(server.port) as tracer:
        _conversation_run(tracer, "List the folder", "list_dir", "conv-a", None)
    spans = recorded(lambda t: _conversation_run(t, "Read JSON file", "read_file", "conv-a", None))
    replies = _export_each(server.port, spans)
    assert "held until their run's invoke_agent" in replies[0].error_message
    assert _follows_list_dir(client) == [["read_file"]]


@pytest.mark.parametrize(
    ("span", "key", "claim"),
    [
        ("execute_tool read_file", "pml.otlp.held.too_large", "made up: too large"),
        ("invoke_agent file-agent", "pml.otlp.held.conversation_refused", "made up warning"),
        ("execute_tool read_file", "pml.otlp.held.conversation_refused", "made up warning"),
    ],
)
def test_attributes_named_as_pmls_own_held_marks_are_dropped_from_sent_spans(
    server: RunningServer, client: PmlClient, span: str, key: str, claim: str
) -> None:
    """A client sends a whole run with an attribute named as one pml sets on the held form of
    a span (`pml.otlp.*`: docs/capture.md, What a held span keeps). Before: the mapping read
    it as pml's own, so `pml.otlp.held.too_large` rejected the run for a made-up reason and
    `pml.otlp.held.conversation_refused` planted a made-up warning in its answer. Now such
    attributes are dropped at the OTLP edge: the run is captured, and the answer says that
    attributes of pml's namespace were dropped."""
    spans = recorded(
        lambda t: _agent_run(t, "Read JSON file", [("read_file", {"path": "a.json"}, None)])
    )
    request = encode_spans(spans)
    sent = request.resource_spans[0].scope_spans[0].spans
    target = next(s for s in sent if s.name == span)
    target.attributes.add(key=key).value.string_value = claim
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        reply = trace_service_pb2_grpc.TraceServiceStub(channel).Export(request, timeout=30)
    assert reply.partial_success.rejected_spans == 0
    assert claim not in reply.partial_success.error_message
    assert "1 spans carried attributes named pml.otlp.*" in reply.partial_success.error_message
    (pattern,) = client.iter_patterns()
    assert list(pattern.tools_used) == ["read_file"]
    assert (_spans_counter(server, "mapped"), _spans_counter(server, "rejected")) == (2, 0)


def test_an_expired_held_call_is_named_in_the_log_with_its_tool_and_why(
    start: StartServer, caplog: pytest.LogCaptureFixture
) -> None:
    """After a restart a call that ended after its captured run's root, sent alone, is held
    (this process no longer remembers the run) and acknowledged, then expires after
    `otlp_pending_seconds`. Before: the log said only how many spans of the tenant expired, not
    which call was lost nor why. Now it names the span, its tool and why it could not be
    captured; the `expired` counter counts it once."""
    server = start()
    spans = recorded(_a_call_ending_after_its_root)
    late = f"{spans[2].context.trace_id:032x}/{spans[2].context.span_id:016x}"
    assert _export(server.port, spans[:2]) == ExportTracePartialSuccess()
    server.stop(grace=1.0)
    again = start(otlp_pending_seconds=0.5)
    caplog.set_level(logging.WARNING, logger="pml.otlp")
    assert "1 spans held" in _export(again.port, spans[2:]).error_message
    time.sleep(1.0)
    other = recorded(
        lambda t: _agent_run(t, "Read JSON file", [("read_file", {"path": "a.json"}, None)])
    )
    _export(again.port, other)  # the tenant's next Export expires what is held past its age
    (line,) = [r.getMessage() for r in caplog.records if "expired" in r.getMessage()]
    assert f"{late} (parse_json)" in line
    assert "root span never arrived" in line
    assert "captured before" in line
    assert _spans_counter(again, "expired") == 1
