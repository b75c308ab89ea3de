"""Server side of the service benchmark, run as its own process:

    python -m benches.harness.service_server populate DATA_DIR COUNT EMBEDDER (vectors|text)
    python -m benches.harness.service_server serve DATA_DIR EMBEDDER DURABILITY
    python -m benches.harness.service_server null
    python -m benches.harness.service_server embed-only
    python -m benches.harness.service_server null-spending PYTHON_US NATIVE_US
    python -m benches.harness.service_server canned DATA_DIR

`populate` fills a store in-process (fast durability, client vectors or the embedder), so the
Suggest runs start from 10k or 100k intents without paying for capture over gRPC. `serve` is
`pml serve` (the real `start_server`, the real engine) on a free loopback port; `null` is the
ceiling: a servicer of the same proto on the same gRPC server settings that does no work.
`canned` is our whole API layer (the real `start_server`: interceptor, auth, quotas, request
validation, proto conversion) over an engine that answers every Suggest with one real answer
computed at start: the cost of everything but the engine's work. All print `PORT <n>` once bound
and stop on SIGTERM;
`serve` adds `METRICS <n>`, the port of its Prometheus /metrics. `embed-only` is the null
servicer whose Suggest embeds the query, and RecordExecution a successful run's intent, with the
server's own default embedder stack (cache, metering, MiniLM) and switch interval, and does
nothing else: what any server with the model can reach on this harness, the ceiling of the
MiniLM rows. `null-spending` is the null servicer spending, on every StreamTraces message,
PYTHON_US microseconds of CPU in Python (the GIL held) and NATIVE_US in native code with the GIL
released (hashing a buffer, as the core's calls do), with the real server's switch interval:
what a capture may cost the server for a streaming row to reach a given share of the null
servicer (`python -m benches.profile.stream_budget`).
"""

from __future__ import annotations

import hashlib
import sys
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from benches.harness import service_workload as work
from benches.harness.fill import bulk_record_new, record_all
from pml_server._proto.pml.v1 import pml_pb2, pml_pb2_grpc, resources_pb2
from pml_server.api.server import (
    SWITCH_INTERVAL_SECONDS,
    StopSignal,
    _options,
    start_server,
)
from pml_server.capture.normalize import normalize
from pml_server.config import EngineConfig, ServerConfig, config_of
from pml_server.domain.model import ExecutionRecord, SuggestQuery, SuggestResult, ToolCall
from pml_server.embedding import make_embedder
from pml_server.service import Engine

TENANT = "default"


def _record(i: int, vector: tuple[float, ...] | None) -> ExecutionRecord:
    return ExecutionRecord(
        request_id=f"pop-{i}",
        intent=work.intent_text(i),
        code=work.code_for(i),
        language="javascript",
        tool_calls=tuple(ToolCall(tool=t, duration_ms=1.0) for t in work.tools_for(i)),
        duration_ms=5.0,
        intent_embedding=vector,
    )


def populate(
    data_dir: Path, count: int, embedder: str, with_vectors: bool, bulk: bool = True
) -> None:
    """Fill a fresh store with executions 0..count. With client vectors every execution is
    a new pattern of its own tool pair: `bulk_record_new` (a 1M store in minutes, not hours);
    without, the server's embedder embeds the intents, batch by batch (`record_all`).
    No snapshot of the vector index while filling, only the one at close (the store is the
    same): every 300 s the default one serialized the whole graph under the index's read lock
    (the insert waits), copied it under the GIL, hashed it and wrote it into RocksDB; at 700k
    intents of a 1M fill, half the profile's samples were in them."""
    config = EngineConfig(
        data_dir=data_dir, embedder=embedder, durability="fast", snapshot_interval_seconds=0
    )
    engine = Engine.open(config, normalizer=normalize)
    if not engine.admin.wait_ready(600):
        raise RuntimeError("engine index did not become ready")
    vectors = work.stored_vectors(count) if with_vectors else None

    def make(i: int) -> ExecutionRecord:
        return _record(i, tuple(vectors[i].tolist()) if vectors is not None else None)

    try:
        if with_vectors and bulk:
            bulk_record_new(engine, TENANT, count, make)
        else:
            record_all(engine, TENANT, count, make)
    finally:
        engine.close()


def serve(data_dir: Path, embedder: str, durability: str) -> None:
    config = config_of(
        listen="127.0.0.1:0",
        data_dir=data_dir,
        embedder=embedder,
        durability=durability,
        metrics_port=0,  # the harness reads the model's CPU seconds from /metrics
    )
    engine = Engine.open(config.engine, normalizer=normalize)
    running = start_server(config, engine)  # health turns SERVING once the index is loaded
    stop = StopSignal()  # caught before the port is announced
    print(f"PORT {running.port} METRICS {running.metrics_port}", flush=True)
    stop.wait()
    running.stop(grace=5.0)


class CannedEngine:
    """The real engine, except that Suggest returns an answer computed once (the API layer's
    ceiling); whatever else the server asks is answered by the real engine."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        vector = work.query_vectors(1)[0]
        self.answer = engine.suggest(
            TENANT, SuggestQuery(work.query_text(0), k=5, intent_embedding=tuple(vector.tolist()))
        )

    def suggest(self, tenant: str, query: SuggestQuery) -> SuggestResult:
        return self.answer

    def __getattr__(self, name: str) -> object:
        return getattr(self._engine, name)


def serve_canned(data_dir: Path) -> None:
    config = config_of(
        listen="127.0.0.1:0", data_dir=data_dir, embedder="minilm", durability="fast"
    )
    engine = Engine.open(config.engine, normalizer=normalize)
    if not engine.admin.wait_ready(600):
        raise RuntimeError("engine index did not become ready")
    canned = CannedEngine(engine)
    if len(canned.answer.suggestions) < 5:
        raise RuntimeError("the canned answer should hold five suggestions")
    running = start_server(config, canned)  # type: ignore[arg-type]
    stop = StopSignal()  # caught before the port is announced
    print(f"PORT {running.port}", flush=True)
    stop.wait()
    running.stop(grace=5.0)


class NullServicer(pml_pb2_grpc.PmlServiceServicer):
    """Answers without doing anything: the cost of gRPC and protobuf alone."""

    _saved = resources_pb2.CaptureResult(outcome=resources_pb2.CAPTURE_OUTCOME_SAVED)

    def RecordExecution(  # noqa: N802 (the proto's method name)
        self, request: pml_pb2.RecordExecutionRequest, context: grpc.ServicerContext
    ) -> pml_pb2.RecordExecutionResponse:
        return pml_pb2.RecordExecutionResponse(result=self._saved)

    def Suggest(  # noqa: N802 (the proto's method name)
        self, request: pml_pb2.SuggestRequest, context: grpc.ServicerContext
    ) -> pml_pb2.SuggestResponse:
        return pml_pb2.SuggestResponse()

    def StreamTraces(  # noqa: N802 (the proto's method name)
        self, request_iterator: Iterator[pml_pb2.StreamTracesRequest], context: grpc.ServicerContext
    ) -> Iterator[pml_pb2.StreamTracesResponse]:
        for received in request_iterator:
            acks = [
                pml_pb2.StreamTracesResponse(
                    execution_id=message.execution_id, sequence=message.sequence, result=self._saved
                )
                for message in received.batch or (received,)
            ]
            # as the real server answers: a batch's acks in one message
            yield acks[0] if not received.batch else pml_pb2.StreamTracesResponse(batch=acks)


class EmbedOnlyServicer(NullServicer):
    """The null servicer, except that Suggest embeds its intent and RecordExecution a
    successful run's intent, as the real server does (its embedder stack, its switch
    interval, set by `main`), and nothing else: any server's ceiling on the model's rows."""

    def __init__(self) -> None:
        self._embedder = make_embedder("minilm")
        self._embedder.embed(["warm up"])

    def Suggest(  # noqa: N802 (the proto's method name)
        self, request: pml_pb2.SuggestRequest, context: grpc.ServicerContext
    ) -> pml_pb2.SuggestResponse:
        self._embedder.embed([request.intent])
        return pml_pb2.SuggestResponse()

    def RecordExecution(  # noqa: N802 (the proto's method name)
        self, request: pml_pb2.RecordExecutionRequest, context: grpc.ServicerContext
    ) -> pml_pb2.RecordExecutionResponse:
        record = request.record
        succeeded = record.status == resources_pb2.EXECUTION_STATUS_SUCCESS
        if succeeded and all(call.ok for call in record.tool_calls):  # rule 1: else no vector
            self._embedder.embed([record.intent])
        return pml_pb2.RecordExecutionResponse(result=self._saved)


class SpendingServicer(NullServicer):
    """The null servicer, except that StreamTraces spends `python_us` of CPU in Python and
    `native_us` with the GIL released on every message (of a batch: every record) before
    answering it."""

    def __init__(self, python_us: float, native_us: float) -> None:
        self._python_seconds = python_us / 1e6
        # Hashing releases the GIL over more than 2 KiB: calibrated here, bytes a microsecond.
        self._buffer = bytes(1 << 20)
        start = time.thread_time()
        for _ in range(8):
            hashlib.sha256(self._buffer).digest()
        per_us = 8 * len(self._buffer) / max(1e-9, (time.thread_time() - start) * 1e6)
        self._native_bytes = min(len(self._buffer), int(native_us * per_us))

    def _spend(self) -> None:
        if self._native_bytes > 2048:
            hashlib.sha256(memoryview(self._buffer)[: self._native_bytes]).digest()
        until = time.thread_time() + self._python_seconds
        while time.thread_time() < until:
            pass

    def StreamTraces(  # noqa: N802 (the proto's method name)
        self, request_iterator: Iterator[pml_pb2.StreamTracesRequest], context: grpc.ServicerContext
    ) -> Iterator[pml_pb2.StreamTracesResponse]:
        def spending() -> Iterator[pml_pb2.StreamTracesRequest]:
            for received in request_iterator:
                for _ in received.batch or (received,):
                    self._spend()
                yield received

        return super().StreamTraces(spending(), context)


def serve_null(servicer: NullServicer) -> None:
    config = ServerConfig(listen="127.0.0.1:0")
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=config.max_workers),
        options=_options(config),
        maximum_concurrent_rpcs=config.max_concurrent_rpcs,
    )
    pml_pb2_grpc.add_PmlServiceServicer_to_server(servicer, server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    port = server.add_insecure_port(config.listen)
    server.start()
    health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    stop = StopSignal()  # caught before the port is announced
    print(f"PORT {port}", flush=True)
    stop.wait()
    server.stop(2.0).wait()


def main(argv: list[str]) -> None:
    command = argv[0]
    if command == "populate":
        populate(Path(argv[1]), int(argv[2]), argv[3], argv[4] == "vectors")
    elif command == "serve":
        serve(Path(argv[1]), argv[2], argv[3])
    elif command == "null":
        serve_null(NullServicer())
    elif command == "embed-only":
        sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)  # as `start_server` sets it
        serve_null(EmbedOnlyServicer())
    elif command == "null-spending":
        sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)  # as `start_server` sets it
        serve_null(SpendingServicer(float(argv[1]), float(argv[2])))
    elif command == "canned":
        serve_canned(Path(argv[1]))
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
