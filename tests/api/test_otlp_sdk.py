"""The official OpenTelemetry Python SDK against a real pml server (port 0): its OTLP gRPC and
OTLP/HTTP (protobuf) exporters behind a `BatchSpanProcessor`, agent turns shaped as GenAI
frameworks emit them (an `invoke_agent` root with `gen_ai.*` attributes and a conversation id,
a chat span, tool-call child spans), every compression the exporters offer, batches that split
a run over several Exports, and Exports retried after their answer was lost. Each run lands as
exactly one execution (docs/capture.md, "OTLP traces"; docs/connect.md, "OTLP traces in").
The SDK has no OTLP/JSON exporter; the JavaScript SDK's is in `test_otlp_http.py`."""

from __future__ import annotations

import http.server
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.rpc.error_details_pb2 import RetryInfo
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Tracer

from pml_server.api.server import RunningServer
from pml_server.client import PmlClient
from tests.conftest import StartServer

TOOLS = (
    ("read_file", {"path": "data/in.json"}),
    ("parse_json", {"strict": True}),
    ("write_file", {"path": "data/out.csv"}),
)
TEMPLATE = (
    'await mcp.read_file({"path": $PATH});\n'
    'await mcp.parse_json({"strict": true});\n'
    'await mcp.write_file({"path": $PATH_2});'
)
RUNS = 4
SPANS_A_RUN = 2 + len(TOOLS)  # the root, a chat span, the calls


def _turn(tracer: Tracer, n: int) -> None:
    """One agent turn: the root (`invoke_agent`, its user message, agent, provider and
    conversation), a chat span, then one `execute_tool` span a call."""
    messages = [{"role": "user", "parts": [{"type": "text", "content": f"Convert file {n}"}]}]
    with tracer.start_as_current_span(
        "invoke_agent converter",
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "converter",
            "gen_ai.provider.name": "openai",
            "gen_ai.conversation.id": f"conversation-{n % 2}",
            "gen_ai.input.messages": json.dumps(messages),
        },
    ):
        with tracer.start_as_current_span(
            "chat gpt-4o",
            attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"},
        ):
            pass
        for tool, arguments in TOOLS:
            with tracer.start_as_current_span(
                f"execute_tool {tool}",
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": tool,
                    "gen_ai.tool.call.id": f"call_{n}_{tool}",
                    "gen_ai.tool.call.arguments": json.dumps(arguments),
                },
            ):
                pass


def _send_turns(exporter: SpanExporter, batch: int) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "converter-agent"}))
    processor = BatchSpanProcessor(
        exporter, max_export_batch_size=batch, schedule_delay_millis=60_000
    )
    provider.add_span_processor(processor)
    try:
        tracer = provider.get_tracer("tests")
        for n in range(RUNS):
            _turn(tracer, n)
        assert provider.force_flush(120_000)
    finally:
        provider.shutdown()


def _spans(server: RunningServer, result: str) -> float:
    value = server.metrics.registry.get_sample_value("pml_otlp_spans_total", {"result": result})
    return value or 0.0


def _one_execution_a_run(server: RunningServer, retried: bool = False) -> None:
    """Every run captured once, whole: one pattern of the three calls used `RUNS` times, found
    by Suggest and read back by GetPattern; no span rejected or left to expire, and each span
    counted once unless `retried` (an Export taken twice counts its spans each time, as a
    replay or as seen twice: docs/capture.md, "Spans arriving after their run was mapped")."""
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        (pattern,) = client.iter_patterns()
        assert (pattern.template.strip(), pattern.usage_count) == (TEMPLATE, RUNS)
        assert client.get_pattern(pattern.name).usage_count == RUNS
        (best, *_) = client.suggest("convert file 7").suggestions
        assert best.pattern.name == pattern.name
    assert (_spans(server, "rejected"), _spans(server, "expired")) == (0, 0)
    if not retried:
        assert (_spans(server, "mapped"), _spans(server, "ignored")) == (
            RUNS * (1 + len(TOOLS)),
            RUNS,  # the chat spans
        )


@pytest.mark.parametrize(
    ("compression", "batch"),
    [
        (grpc.Compression.NoCompression, 512),
        (grpc.Compression.Gzip, 2),
        (grpc.Compression.Deflate, 3),
    ],
)
def test_the_sdk_grpc_exporter_lands_one_execution_a_run(
    start: StartServer, compression: grpc.Compression, batch: int
) -> None:
    server = start()
    exporter = GrpcSpanExporter(
        endpoint=f"127.0.0.1:{server.port}", insecure=True, compression=compression
    )
    _send_turns(exporter, batch)
    _one_execution_a_run(server)


@pytest.mark.parametrize(
    ("compression", "batch"),
    [(Compression.NoCompression, 512), (Compression.Gzip, 2), (Compression.Deflate, 3)],
)
def test_the_sdk_http_exporter_lands_one_execution_a_run(
    start: StartServer, compression: Compression, batch: int
) -> None:
    server = start(otlp_http_listen="127.0.0.1:0")
    assert server.otlp_http is not None
    exporter = HttpSpanExporter(
        endpoint=f"http://127.0.0.1:{server.otlp_http.port}/v1/traces", compression=compression
    )
    _send_turns(exporter, batch)
    _one_execution_a_run(server)


class _LosingFirstAnswers:
    """Which Exports a proxy has passed on: each is sent to pml, and the first time a body is
    seen its answer is lost (the exporter told to retry), so pml takes every Export twice."""

    def __init__(self) -> None:
        self._seen: set[bytes] = set()
        self._lock = threading.Lock()
        self.lost = 0

    def first_time(self, body: bytes) -> bool:
        with self._lock:
            if body in self._seen:
                return False
            self._seen.add(body)
            self.lost += 1
            return True


@contextmanager
def _http_proxy(target: str, losing: _LosingFirstAnswers) -> Iterator[str]:
    """An OTLP/HTTP proxy to `target` answering 503 (`Retry-After: 0`) after passing on an
    Export seen for the first time; the URL to export to."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            headers = {
                k: v
                for k, v in self.headers.items()
                if k.lower() in ("content-type", "content-encoding")
            }
            request = urllib.request.Request(target, data=body, headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    status, answer = response.status, response.read()
            except urllib.error.HTTPError as err:
                with err:
                    status, answer = err.code, err.read()
            if status == 200 and losing.first_time(body):
                status, answer = 503, b""
            self.send_response(status)
            if status == 503:
                self.send_header("Retry-After", "0")
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: object) -> None:
            pass

    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{proxy.server_address[1]}/v1/traces"
    finally:
        proxy.shutdown()
        proxy.server_close()
        thread.join(10)


@contextmanager
def _grpc_proxy(port: int, losing: _LosingFirstAnswers) -> Iterator[int]:
    """An OTLP gRPC proxy to pml on `port` answering UNAVAILABLE after passing on an Export
    seen for the first time; its port."""
    # `google.rpc.RetryInfo`: the delay the SDK's exporter waits before retrying (10 ms).
    retry = RetryInfo(retry_delay=Duration(nanos=10_000_000)).SerializeToString()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = trace_service_pb2_grpc.TraceServiceStub(channel)

    class Proxy(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(  # noqa: N802 (the service's name)
            self,
            request: trace_service_pb2.ExportTraceServiceRequest,
            context: grpc.ServicerContext,
        ) -> trace_service_pb2.ExportTraceServiceResponse:
            answer: trace_service_pb2.ExportTraceServiceResponse = stub.Export(request, timeout=30)
            if losing.first_time(request.SerializeToString(deterministic=True)):
                context.set_trailing_metadata((("google.rpc.retryinfo-bin", retry),))
                context.abort(grpc.StatusCode.UNAVAILABLE, "the answer was lost")
            return answer

    server = grpc.server(futures.ThreadPoolExecutor(4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Proxy(), server)
    proxy_port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield proxy_port
    finally:
        server.stop(None)
        channel.close()


@pytest.mark.parametrize("batch", [3, 512])
def test_sdk_http_exports_retried_after_a_lost_answer_land_once(
    start: StartServer, batch: int
) -> None:
    """Every Export reaches pml and its answer is lost (503), so the exporter sends it again:
    the retry of an Export that held calls, and of the one that brought their root, count
    nothing twice."""
    server = start(otlp_http_listen="127.0.0.1:0")
    assert server.otlp_http is not None
    losing = _LosingFirstAnswers()
    target = f"http://127.0.0.1:{server.otlp_http.port}/v1/traces"
    with _http_proxy(target, losing) as url:
        _send_turns(HttpSpanExporter(endpoint=url, compression=Compression.Gzip), batch)
    assert losing.lost == -(-RUNS * SPANS_A_RUN // batch)
    _one_execution_a_run(server, retried=True)


@pytest.mark.parametrize("batch", [3, 512])
def test_sdk_grpc_exports_retried_after_a_lost_answer_land_once(
    start: StartServer, batch: int
) -> None:
    server = start()
    losing = _LosingFirstAnswers()
    with _grpc_proxy(server.port, losing) as port:
        exporter = GrpcSpanExporter(
            endpoint=f"127.0.0.1:{port}", insecure=True, compression=grpc.Compression.Gzip
        )
        _send_turns(exporter, batch)
    assert losing.lost == -(-RUNS * SPANS_A_RUN // batch)
    _one_execution_a_run(server, retried=True)
