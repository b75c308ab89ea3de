"""Load client of the service benchmark, run as its own process so its CPU is not the server's:

    python -m benches.harness.service_load TARGET OP CONCURRENCY SECONDS MAX_REQUESTS QUERY OFFSET

OP is `suggest`, `record` (unary RecordExecution), `stream` (StreamTraces, one stream and one
connection per caller, a record a message) or `stream-batched` (the same, `UPLOAD_BATCH`
records a message as `PmlClient.upload` sends them); QUERY is `vector` (client-supplied intent
embeddings) or `text` (the server embeds); OFFSET numbers the executions a capture run sends
so runs never repeat a request id. Requests are built before the clock starts; the run stops
after SECONDS or MAX_REQUESTS, whichever comes first. Prints one JSON object: count, errors,
elapsed seconds, qps and latency percentiles (ms).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from functools import partial

import grpc

from benches.harness import service_workload as work
from benches.harness.closed_loop import Load
from pml_server._proto.pml.v1 import pml_pb2, pml_pb2_grpc, resources_pb2
from pml_server.client import UPLOAD_BATCH, batched_messages


def _record(i: int, vector: list[float] | None) -> resources_pb2.ExecutionRecord:
    return resources_pb2.ExecutionRecord(
        request_id=f"load-{i}",
        intent=work.intent_text(i),
        code=work.code_for(i),
        language="javascript",
        tool_calls=[resources_pb2.ToolCall(tool=t, ok=True) for t in work.tools_for(i)],
        status=resources_pb2.EXECUTION_STATUS_SUCCESS,
        intent_embedding=vector or [],
    )


def build_requests(op: str, count: int, query: str, offset: int) -> list[object]:
    if op == "suggest":
        vectors = work.query_vectors(count) if query == "vector" else None
        return [
            pml_pb2.SuggestRequest(
                intent=work.query_text(j),
                page_size=5,
                intent_embedding=vectors[j].tolist() if vectors is not None else [],
            )
            for j in range(count)
        ]
    vectors = work.stored_vectors(count, offset) if query == "vector" else None
    return [
        _record(offset + j, vectors[j].tolist() if vectors is not None else None)
        for j in range(count)
    ]


def run(
    target: str,
    op: str,
    concurrency: int,
    seconds: float,
    max_requests: int,
    query: str,
    offset: int,
) -> dict[str, float]:
    requests = build_requests(op, max_requests, query, offset)
    channel = grpc.insecure_channel(target)
    grpc.channel_ready_future(channel).result(timeout=30)
    stub = pml_pb2_grpc.PmlServiceStub(channel)
    # One connection per stream, as separate agents would open: the server allows
    # `max_streams_per_connection` (4) streams per connection, so 8 streams on one channel ran
    # 4 and had the other 4 refused (counted as errors, their executions never sent). A local
    # subchannel pool keeps grpcio from sharing one connection between the channels.
    stream_channels = [
        grpc.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])
        for _ in range(concurrency if op.startswith("stream") else 0)
    ]
    for extra in stream_channels:
        grpc.channel_ready_future(extra).result(timeout=30)
    stream_stubs = [pml_pb2_grpc.PmlServiceStub(extra) for extra in stream_channels]
    load = Load(concurrency, seconds, range(len(requests)))

    def unary_caller(n: int) -> None:
        call = stub.Suggest if op == "suggest" else stub.RecordExecution
        while (k := load.take()) is not None:
            request = requests[k]
            if op == "record":
                request = pml_pb2.RecordExecutionRequest(record=request)
            load.timed(n, partial(call, request, timeout=30), grpc.RpcError)

    def stream_caller(n: int) -> None:
        sent: dict[str, float] = {}

        def messages() -> Iterator[pml_pb2.StreamTracesRequest]:
            seq = 0
            while (k := load.take()) is not None:
                seq += 1
                execution_id = f"s{n}-{k}"
                sent[execution_id] = time.perf_counter()
                yield pml_pb2.StreamTracesRequest(
                    execution_id=execution_id, sequence=seq, record=requests[k]
                )

        sending = (
            batched_messages(messages(), UPLOAD_BATCH) if op == "stream-batched" else messages()
        )
        try:
            for message in stream_stubs[n].StreamTraces(sending, timeout=seconds + 60):
                for ack in message.batch or (message,):
                    if ack.HasField("error"):
                        load.errors[n] += 1
                        continue
                    load.latencies[n].append(time.perf_counter() - sent.pop(ack.execution_id))
        except grpc.RpcError:
            load.errors[n] += 1

    summary = load.run(stream_caller if op.startswith("stream") else unary_caller)
    channel.close()
    for extra in stream_channels:
        extra.close()
    return summary


def main(argv: list[str]) -> None:
    target, op, concurrency, seconds, max_requests, query, offset = argv
    result = run(
        target, op, int(concurrency), float(seconds), int(max_requests), query, int(offset)
    )
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
