"""Concurrency against a real server process: exact counters under 8 concurrent writers on one
pattern and across patterns; duplicate request ids sent concurrently apply exactly once; a
stream cut mid-way and resumed (whole records and live events) applies each execution once."""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from pml_server._proto.pml.v1 import pml_pb2, resources_pb2
from testing.server_process import ServerProcess
from tests.reliability import workload
from tests.reliability.report import report

WRITERS = 8


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path_factory.mktemp("conc") / "data", "--durability", "sync")
    process.start()
    yield process
    process.terminate()


def _pattern(stub: workload.pml_pb2_grpc.PmlServiceStub, name: str) -> resources_pb2.Pattern:
    return stub.GetPattern(pml_pb2.GetPatternRequest(name=name), timeout=30).pattern


def _hammer(server: ServerProcess, per_writer: int, patterns: list[int], tag: str) -> Counter[int]:
    """WRITERS threads, each on its own channel, `per_writer` records each; returns how many
    successes each pattern was sent."""
    sent: Counter[int] = Counter()
    lock = threading.Lock()

    def one_writer(w: int) -> None:
        rng = random.Random(w)
        channel, stub = workload.stub_for(server.target)
        with channel:
            for i in range(per_writer):
                p = rng.choice(patterns)
                rec = workload.record(p, f"count the {tag} p{p}", f"{tag}-{w}-{i}", False, rng)
                workload.send(stub, rec)
                with lock:
                    sent[p] += 1

    with ThreadPoolExecutor(WRITERS) as pool:
        list(pool.map(one_writer, range(WRITERS)))
    return sent


def test_eight_writers_on_one_pattern_count_exactly(server: ServerProcess) -> None:
    channel, stub = workload.stub_for(server.target)
    with channel:
        rng = random.Random(0)
        name = workload.send(stub, workload.record(0, "count one", "one-seed", False, rng)).pattern
        sent = _hammer(server, 150, [0], "one")
        pattern = _pattern(stub, name)
    figures = {"writers": WRITERS, "sent": sent[0] + 1, "usage": pattern.usage_count}
    summary = report("concurrency_one_pattern", figures)
    assert pattern.usage_count == pattern.success_count == sent[0] + 1, summary


def test_eight_writers_across_patterns_count_exactly(server: ServerProcess) -> None:
    patterns = [10, 11, 12, 13]
    channel, stub = workload.stub_for(server.target)
    with channel:
        rng = random.Random(1)
        names = {
            p: workload.send(
                stub, workload.record(p, f"seed {p}", f"across-seed-{p}", False, rng)
            ).pattern
            for p in patterns
        }
        before = stub.GetStats(pml_pb2.GetStatsRequest(), timeout=30).executions
        sent = _hammer(server, 100, patterns, "across")
        usage = {p: _pattern(stub, names[p]).usage_count for p in patterns}
        after = stub.GetStats(pml_pb2.GetStatsRequest(), timeout=30).executions
    summary = report("concurrency_across_patterns", {"sent": dict(sent), "usage": usage})
    assert usage == {p: sent[p] + 1 for p in patterns}, summary
    assert after - before == sum(sent.values()), summary


def test_concurrent_duplicate_request_ids_apply_exactly_once(server: ServerProcess) -> None:
    rng = random.Random(2)
    records = [workload.record(20, f"dup intent {i}", f"dup-{i}", False, rng) for i in range(60)]
    first_results: Counter[str] = Counter()
    lock = threading.Lock()

    def resend_all(w: int) -> None:
        order = list(records)
        random.Random(w).shuffle(order)
        channel, stub = workload.stub_for(server.target)
        with channel:
            for rec in order:
                result = workload.send(stub, rec)
                if not result.replayed:
                    with lock:
                        first_results[rec.request_id] += 1

    with ThreadPoolExecutor(WRITERS) as pool:
        list(pool.map(resend_all, range(WRITERS)))
    channel, stub = workload.stub_for(server.target)
    with channel:
        name = workload.send(stub, records[0]).pattern
        usage = _pattern(stub, name).usage_count
    summary = report(
        "concurrency_duplicates",
        {
            "ids": len(records),
            "sends": len(records) * WRITERS,
            "usage": usage,
            "applied_answers": sum(first_results.values()),
        },
    )
    assert usage == len(records), summary
    assert first_results == Counter({r.request_id: 1 for r in records}), summary


def _stream_requests(
    records: list[resources_pb2.ExecutionRecord], live: bool
) -> list[pml_pb2.StreamTracesRequest]:
    """Whole records, or each one as live events (started, tool calls, finished)."""
    out: list[pml_pb2.StreamTracesRequest] = []
    seq = 0
    for rec in records:
        eid = rec.request_id
        if not live:
            seq += 1
            out.append(pml_pb2.StreamTracesRequest(execution_id=eid, sequence=seq, record=rec))
            continue
        seq += 1
        out.append(
            pml_pb2.StreamTracesRequest(
                execution_id=eid,
                sequence=seq,
                started=pml_pb2.ExecutionStarted(
                    request_id=rec.request_id,
                    intent=rec.intent,
                    code=rec.code,
                    language=rec.language,
                ),
            )
        )
        for call in rec.tool_calls:
            seq += 1
            out.append(
                pml_pb2.StreamTracesRequest(
                    execution_id=eid,
                    sequence=seq,
                    tool_call_finished=pml_pb2.ToolCallFinished(tool_call=call),
                )
            )
        seq += 1
        out.append(
            pml_pb2.StreamTracesRequest(
                execution_id=eid,
                sequence=seq,
                finished=pml_pb2.ExecutionFinished(status=rec.status, duration_ms=1.0),
            )
        )
    return out


@pytest.mark.parametrize("live", [False, True], ids=["records", "live-events"])
def test_resumed_stream_applies_each_execution_once(server: ServerProcess, live: bool) -> None:
    rng = random.Random(3 + live)
    p = 30 + live
    records = [
        workload.record(p, f"stream intent {i}", f"stream-{live}-{i}", False, rng)
        for i in range(80)
    ]
    acked: set[str] = set()
    channel, stub = workload.stub_for(server.target)
    with channel:
        # First connection: everything is sent, the client goes away after 25 acknowledgements.
        call = stub.StreamTraces(iter(_stream_requests(records, live)), timeout=60)
        for ack in call:
            acked.add(ack.execution_id)
            if len(acked) == 25:
                call.cancel()
                break
        # Reconnect: resend every execution not acknowledged, then everything once more.
        missing = [r for r in records if r.request_id not in acked]
        replies = list(
            stub.StreamTraces(iter(_stream_requests(missing + records, live)), timeout=60)
        )
        errors = [r for r in replies if r.WhichOneof("outcome") != "result"]
        name = next(r.result.pattern for r in replies if r.WhichOneof("outcome") == "result")
        usage = _pattern(stub, name).usage_count
    summary = report(
        f"concurrency_stream_resume_{'live' if live else 'records'}",
        {
            "executions": len(records),
            "acked_before_cut": len(acked),
            "resent": len(missing),
            "usage": usage,
        },
    )
    assert not errors, summary
    assert usage == len(records), summary
