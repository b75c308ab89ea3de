"""OTLP ingest memory (docs/reliability.md, "OTLP Export memory"): a real server process takes
Exports of one-span executions (an `execute_tool` root span each, as a client with nothing
else to trace sends) at the largest span count an Export may hold (`limits.otlp_spans`), and
its peak resident memory rise per Export byte is measured (Linux: peak RSS reset through
`/proc/<pid>/clear_refs` before each Export). Baseline, same process and run: an Export of
the same number of spans that are not GenAI (received, decoded and ignored). Also reported:
what stays resident once the Exports are done (memory given back)."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from benches.common import Row
from pml_server.domain.limits import LIMITS
from testing.server_process import ServerProcess

SUITE = "otlp"
EXPORTS = 3


def _attr(key: str, value: str) -> common_pb2.KeyValue:
    return common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(string_value=value))


def _request(spans: int, genai: bool, seed: int) -> trace_service_pb2.ExportTraceServiceRequest:
    out = []
    for i in range(spans):
        n = seed * 1_000_000 + i
        attrs = [_attr("http.route", f"/files/{n}")]
        if genai:
            attrs = [
                _attr("gen_ai.operation.name", "execute_tool"),
                _attr("gen_ai.tool.name", f"tool_{i % 50}"),
                _attr("gen_ai.tool.call.arguments", json.dumps({"path": f"f{n}.json"})),
            ]
        out.append(
            trace_pb2.Span(
                trace_id=(n + 1).to_bytes(16, "big"),  # (all zero: invalid)
                span_id=(n + 1).to_bytes(8, "big"),
                name=f"execute_tool tool_{i % 50}",
                start_time_unix_nano=1_000_000_000,
                end_time_unix_nano=1_002_000_000,
                attributes=attrs,
            )
        )
    return trace_service_pb2.ExportTraceServiceRequest(
        resource_spans=[trace_pb2.ResourceSpans(scope_spans=[trace_pb2.ScopeSpans(spans=out)])]
    )


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/{pid}/status")


def _peak_rise_bytes(
    process: ServerProcess, request: trace_service_pb2.ExportTraceServiceRequest
) -> int:
    assert process.proc is not None
    pid = process.proc.pid
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # peak RSS := current RSS
    before = _status_kb(pid, "VmRSS")
    with grpc.insecure_channel(process.target) as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        reply = stub.Export(request, timeout=600)
    assert reply.partial_success.rejected_spans == 0, reply.partial_success.error_message
    return (_status_kb(pid, "VmHWM") - before) * 1024


def run(large: bool) -> list[Row]:
    quick = os.environ.get("PML_BENCH_QUICK") == "1"
    spans = 512 if quick else LIMITS.otlp_spans.bound
    with tempfile.TemporaryDirectory() as tmp:
        process = ServerProcess(Path(tmp) / "data")
        process.start()
        try:
            assert process.proc is not None
            pid = process.proc.pid
            start_rss = _status_kb(pid, "VmRSS") * 1024
            plain = [_request(spans, False, 100 + k) for k in range(EXPORTS)]
            genai = [_request(spans, True, k) for k in range(EXPORTS)]
            plain_bytes = plain[0].ByteSize()
            genai_bytes = genai[0].ByteSize()
            plain_rise = max(_peak_rise_bytes(process, r) for r in plain)
            time.sleep(1)
            retained_plain = _status_kb(pid, "VmRSS") * 1024 - start_rss
            began = time.perf_counter()
            genai_rise = max(_peak_rise_bytes(process, r) for r in genai)
            seconds = time.perf_counter() - began
            time.sleep(1)
            retained = _status_kb(pid, "VmRSS") * 1024 - start_rss
        finally:
            process.terminate()
    per_byte = genai_rise / genai_bytes
    baseline = max(plain_rise, 1) / plain_bytes
    return [
        Row(
            SUITE,
            f"peak RSS rise per Export byte, {spans} one-span executions",
            per_byte,
            "B/B",
            baseline=baseline,
            baseline_name=f"{spans} non-GenAI spans, ignored",
            lower_is_better=True,
            extra={
                "export_bytes": genai_bytes,
                "baseline_export_bytes": plain_bytes,
                "peak_rise_mb": round(genai_rise / 2**20, 1),
                "baseline_peak_rise_mb": round(plain_rise / 2**20, 1),
                "exports_each": EXPORTS,
                "resident_after_baseline_exports_mb": round(retained_plain / 2**20, 1),
                "resident_after_all_mb": round(retained / 2**20, 1),
                "genai_exports_seconds": round(seconds, 1),
            },
        )
    ]
