"""OTLP runs whose spans arrive in several Exports (docs/reliability.md, "OTLP runs split over
several Exports"): a real `pml serve` process (RocksDB, and a shared PostgreSQL store), spans
made by the OpenTelemetry SDK and sent in the SDK's OTLP encoding, the tool spans of each run
before its `invoke_agent` span (as the SDK's batch processor sends a run longer than its flush
interval). Every run is captured exactly once, with its failures; held spans survive a SIGKILL;
held spans that expire or overflow are counted on /metrics and reported."""

from __future__ import annotations

import json
import secrets
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer

from pml_server.client import PmlClient
from testing.otlp_spans import recorded, run_with_arguments
from testing.server_process import ServerProcess
from tests.support import eventually

RUNS = 8
PAUSE_SECONDS = 0.2  # between Exports: the server sees each as a separate call


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _metric(port: int, result: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    prefix = f'pml_otlp_spans_total{{result="{result}"}} '
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix) :])
    return 0.0


def _run(tracer: Tracer, n: int, failing: bool, pause: float = 0.0) -> None:
    """One agent run: an HTTP span and four tool calls (the last fails if `failing`)."""
    intent = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "Sum a file"}]}])
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "file-agent",
        "gen_ai.input.messages": intent,
    }
    calls = [
        ("read_file", {"path": f"in{n}.json"}),
        ("parse_json", {"strict": True}),
        ("sum_column", {"column": "total"}),
        ("write_file", {"path": f"out{n}.txt"}),
    ]
    with tracer.start_as_current_span("invoke_agent file-agent", attributes=attributes):
        with tracer.start_as_current_span("GET /health", kind=SpanKind.CLIENT):
            pass
        for i, (tool, args) in enumerate(calls):
            with tracer.start_as_current_span(
                f"execute_tool {tool}",
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": tool,
                    "gen_ai.tool.call.arguments": json.dumps(args),
                },
            ) as span:
                if failing and i == len(calls) - 1:
                    span.set_attribute("error.type", "PermissionError")
                    span.set_status(Status(StatusCode.ERROR, "read-only disk"))
            time.sleep(pause)


def _recorded_runs(failing: list[bool]) -> list[list[ReadableSpan]]:
    # in end order: the agent span last
    return [recorded(lambda t, n=n, f=f: _run(t, n, f)) for n, f in enumerate(failing)]


def _split(spans: list[ReadableSpan], exports: int) -> list[list[ReadableSpan]]:
    """`exports` (2-5) non-empty Exports in end order, the root span alone in the last."""
    head, root = spans[:-1], spans[-1:]
    size = -(-len(head) // (exports - 1))
    return [head[i : i + size] for i in range(0, len(head), size)] + [root]


def _export(target: str, spans: list[ReadableSpan]) -> trace_service_pb2.ExportTraceServiceResponse:
    with grpc.insecure_channel(target) as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        reply: trace_service_pb2.ExportTraceServiceResponse = stub.Export(
            encode_spans(spans), timeout=30
        )
        return reply


@pytest.fixture(params=["rocksdb", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_flags(request: pytest.FixtureRequest) -> list[str]:
    if request.param == "rocksdb":
        return []
    dsn: str = request.getfixturevalue("postgres_dsn")
    return ["--store", dsn]


def test_runs_split_over_several_exports_are_captured_once_with_their_failures(
    tmp_path: Path, store_flags: list[str]
) -> None:
    metrics_port = free_port()
    process = ServerProcess(tmp_path / "data", "--metrics-port", str(metrics_port), *store_flags)
    process.start()
    try:
        failing = [n % 3 == 2 for n in range(RUNS)]  # runs 2 and 5 fail, 0 succeeds first
        runs = _recorded_runs(failing)
        exports = [_split(spans, 2 + n % 4) for n, spans in enumerate(runs)]
        # The first run completes alone (a new pattern with a failure would store nothing).
        for part in exports[0]:
            assert _export(process.target, part).partial_success.rejected_spans == 0
        # The others interleave: every run's first Exports, then (after a SIGKILL and a restart:
        # held spans were acknowledged, so they are on disk) every later one, root spans last.
        rounds = max(len(e) for e in exports[1:])
        for step in range(rounds):
            if step == 1:
                process.kill()
                process.start()
            for parts in exports[1:]:
                index = step - (rounds - len(parts))  # aligned so the roots come last
                if index >= 0:
                    reply = _export(process.target, parts[index])
                    assert reply.partial_success.rejected_spans == 0
                time.sleep(PAUSE_SECONDS)
        with PmlClient(process.target) as client:
            (pattern,) = client.iter_patterns()
            assert pattern.tools_used == ["read_file", "parse_json", "sum_column", "write_file"]
            failures = list(client.list_failures().failures)
        successes = failing.count(False)
        assert pattern.success_count == successes
        assert pattern.usage_count == RUNS  # every run once: each failure counted, none stored
        assert [(f.tool, f.error) for f in failures] == [
            ("write_file", "PermissionError: read-only disk")
        ] * failing.count(True)
        # All held spans were released: re-sending a root span alone captures nothing again.
        assert _export(process.target, runs[1][-1:]).partial_success.rejected_spans == 0
        with PmlClient(process.target) as client:
            assert next(iter(client.iter_patterns())).usage_count == RUNS
    finally:
        process.terminate()


def test_a_live_sdk_run_longer_than_the_flush_interval_is_captured(tmp_path: Path) -> None:
    """The OpenTelemetry SDK's own batch processor and OTLP gRPC exporter, flushing every
    100 ms, during a run of about 1 s: its tool spans go out before its agent span."""
    process = ServerProcess(tmp_path / "data")
    process.start()
    try:
        exporter = OTLPSpanExporter(endpoint=process.target, insecure=True)
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=100))
        try:
            _run(provider.get_tracer("tests"), 0, failing=True, pause=0.25)
            assert provider.force_flush(30_000)
        finally:
            provider.shutdown()
        with PmlClient(process.target) as client:
            assert list(client.iter_patterns()) == []  # the run failed: all or nothing
            failures = list(client.list_failures().failures)
        assert [(f.tool, f.intent) for f in failures] == [("write_file", "Sum a file")]
    finally:
        process.terminate()


@pytest.fixture
def short_hold(tmp_path: Path) -> Iterator[tuple[ServerProcess, int]]:
    metrics_port = free_port()
    process = ServerProcess(
        tmp_path / "data",
        "--metrics-port",
        str(metrics_port),
        "--otlp-pending-seconds",
        "1",
        "--otlp-pending-spans",
        "12",
    )
    process.start()
    yield process, metrics_port
    process.terminate()


def test_held_spans_expire_and_overflow_counted_and_reported(
    short_hold: tuple[ServerProcess, int],
) -> None:
    process, metrics_port = short_hold
    runs = _recorded_runs([False] * 4)
    heads = [spans[:-1] for spans in runs]  # 5 spans each, waiting for their root
    for head in heads[:2]:
        reply = _export(process.target, head)
        assert reply.partial_success.rejected_spans == 0
        assert "5 spans held" in reply.partial_success.error_message
    # 10 held, limit 12: the third run's 5 do not fit and are refused, named, counted.
    reply = _export(process.target, heads[2])
    assert reply.partial_success.rejected_spans == 5
    assert "otlp_pending_spans = 12" in reply.partial_success.error_message
    assert _metric(metrics_port, "overflow") == 5
    assert _metric(metrics_port, "held") == 10
    time.sleep(1.5)  # past otlp_pending_seconds
    # The next Export of the tenant expires the two held runs (10 spans) first.
    reply = _export(process.target, heads[3])
    assert reply.partial_success.rejected_spans == 0
    assert _metric(metrics_port, "expired") == 10
    assert "expired" in process.log_tail()
    # Their roots now arrive too late: nothing of those runs is captured; the fourth is.
    for spans in runs[:2]:
        _export(process.target, spans[-1:])
    _export(process.target, runs[3][-1:])
    with PmlClient(process.target) as client:
        (pattern,) = client.iter_patterns()
    assert pattern.usage_count == 1


def test_a_run_split_across_two_replicas_of_a_shared_store(
    tmp_path: Path, postgres_dsn: str
) -> None:
    """Its tool spans reach one replica, its root span the other (which had already seen the
    tenant): the run is captured once, by the second, from the spans the first held."""
    a = ServerProcess(tmp_path / "a", "--store", postgres_dsn)
    b = ServerProcess(tmp_path / "b", "--store", postgres_dsn)
    a.start()
    b.start()
    try:
        first, second = _recorded_runs([False, False])
        _export(b.target, first)  # b has seen the tenant before a holds anything
        reply = _export(a.target, second[:-1])
        assert "5 spans held" in reply.partial_success.error_message
        assert _export(b.target, second[-1:]).partial_success.rejected_spans == 0
        with PmlClient(b.target) as client:
            (pattern,) = client.iter_patterns()
        assert pattern.usage_count == 2
        assert pattern.success_count == 2
    finally:
        a.terminate()
        b.terminate()


def test_a_root_first_run_split_across_two_replicas_of_a_shared_store(
    tmp_path: Path, postgres_dsn: str
) -> None:
    """Its root span reaches one replica first, alone (an exporter sending each span over
    concurrent requests), its calls the other: the first holds the root settling, the second
    holds the calls beside it (it reads the root from the store and sees it settling), and the
    first captures the run whole once the window has passed."""
    flags = ("--store", postgres_dsn, "--otlp-settle-seconds", "0.5")
    a = ServerProcess(tmp_path / "a", *flags)
    b = ServerProcess(tmp_path / "b", *flags)
    a.start()
    b.start()
    try:
        (spans,) = _recorded_runs([False])
        reply = _export(a.target, spans[-1:])
        assert "invoke_agent spans with no tool call held" in reply.partial_success.error_message
        for span in spans[:-1]:
            assert _export(b.target, [span]).partial_success.rejected_spans == 0
        with PmlClient(b.target) as client:
            assert eventually(lambda: list(client.iter_patterns()), 20)
            (pattern,) = client.iter_patterns()
        assert list(pattern.tools_used) == ["read_file", "parse_json", "sum_column", "write_file"]
        assert (pattern.usage_count, pattern.success_count) == (1, 1)
    finally:
        a.terminate()
        b.terminate()


def test_a_deeply_nested_held_span_rejects_its_run_alone(tmp_path: Path) -> None:
    """A tool span with arguments nested 100k deep arrives before its root, beside another
    run's tool spans; when both roots arrive in one Export, that run alone is rejected
    (partial success naming why) and the other is captured."""
    depth = 100_000
    deep = recorded(
        lambda t: run_with_arguments(
            t, "invoke_agent deep", '{"a": ' + "[" * depth + "]" * depth + "}"
        )
    )
    (good,) = _recorded_runs([False])
    process = ServerProcess(tmp_path / "data")
    process.start()
    try:
        reply = _export(process.target, deep[:-1] + good[:-1])
        assert reply.partial_success.rejected_spans == 0
        reply = _export(process.target, [deep[-1], good[-1]])
        assert reply.partial_success.rejected_spans == 2  # the deep run's root and its call
        assert "nested deeper than 32 levels" in reply.partial_success.error_message
        with PmlClient(process.target) as client:
            (pattern,) = client.iter_patterns()
        assert pattern.usage_count == 1
        assert len(pattern.tools_used) == 4
    finally:
        process.terminate()


def test_held_spans_store_no_secret(tmp_path: Path) -> None:
    """Tool spans held for their root carry a credential in their arguments, error, a URL
    attribute, a header attribute and an exception event: after they are acknowledged (and the
    server SIGKILLed, so the write-ahead log holds whatever was written), no byte of the data
    directory holds the credential, while a marker sent beside it is found (the search sees what
    was written). When the root arrives the run's failure is recorded, its texts redacted."""
    secret = "sk-live-" + secrets.token_hex(12)
    password = "Tr0ub4dor&3-horse-" + secrets.token_hex(4)
    marker = "marker" + secrets.token_hex(5)

    def make(tracer: Tracer) -> None:
        messages = json.dumps([{"role": "user", "content": f"call the api with {secret}"}])
        with (
            tracer.start_as_current_span(
                "invoke_agent api-agent",
                attributes={
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.input.messages": messages,
                },
            ),
            tracer.start_as_current_span(
                "execute_tool call_api",
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "call_api",
                    "gen_ai.tool.call.arguments": json.dumps({"apiKey": secret, "note": marker}),
                    "url.full": f"https://admin:{password}@api.internal/v1?key={secret}",
                    "http.request.header.authorization": [f"Bearer {secret}"],
                    "gen_ai.tool.call.result": f"token {secret} accepted",
                    "error.type": f"401 for {secret}",
                },
            ) as span,
        ):
            span.add_event("exception", {"exception.message": f"rejected {secret} {password}"})
            span.set_status(Status(StatusCode.ERROR, f"denied postgresql://a:{password}@db/x"))

    run = recorded(make)
    data = tmp_path / "data"
    process = ServerProcess(data, "--durability", "sync")
    process.start()
    try:
        reply = _export(process.target, run[:-1])
        assert "1 spans held" in reply.partial_success.error_message
        process.kill()

        def on_disk(needle: str) -> int:
            return sum(
                p.read_bytes().count(needle.encode()) for p in data.rglob("*") if p.is_file()
            )

        assert on_disk(marker) > 0
        assert (on_disk(secret), on_disk(password)) == (0, 0)
        process.start()
        assert _export(process.target, run[-1:]).partial_success.rejected_spans == 0
        with PmlClient(process.target) as client:
            (failure,) = client.list_failures().failures
            answer = str(failure)
        assert failure.tool == "call_api"
        assert failure.error.startswith("401 for [REDACTED]: denied"), answer
        assert secret not in answer
        assert password not in answer
        process.kill()
        assert (on_disk(secret), on_disk(password)) == (0, 0)
    finally:
        process.kill()
