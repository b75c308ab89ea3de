"""Clients that give up, against a real server process (docs/reliability.md, Clients that give
up): unary writes and Suggests whose deadline runs out while the server works, and streams
cancelled or whose client process is SIGKILLed after some acknowledgements. An acknowledged
execution is never lost (checked after a restart), one never acknowledged is applied whole or
not at all and counts once when resent with its request id, and the server keeps no state of
the calls it lost: it goes on answering, its stream slots are free again, and it stops cleanly
on SIGTERM."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc

from pml_server._proto.pml.v1 import pml_pb2, pml_pb2_grpc, resources_pb2
from testing.server_process import ROOT, ServerProcess
from tests.reliability import workload
from tests.reliability.report import report
from tests.reliability.stream_client import records
from tests.reliability.test_concurrency import _stream_requests

THREADS = 16
N = 400  # executions per stream


def _no_server_error(server: ServerProcess) -> None:
    log = server.log_path.read_text()
    assert "Traceback" not in log, log[-4000:]
    assert '"code": "INTERNAL"' not in log, log[-4000:]
    assert '"code": "UNKNOWN"' not in log, log[-4000:]


def _code(method: Callable[..., object], request: object) -> str:
    """The status of `method(request)` called with a 1 ms deadline."""
    try:
        method(request, timeout=0.001)
    except grpc.RpcError as err:
        return str(err.code().name)
    return "OK"


def test_calls_whose_deadline_runs_out_apply_once_or_not_at_all(tmp_path: Path) -> None:
    """16 threads send 240 RecordExecutions (one in seven a failed run) and as many Suggests
    with a 1 ms deadline, each on its own channel; then every record is resent with its
    request id: each pattern's usage, successes and failures equal what was sent, exactly."""
    server = ServerProcess(tmp_path / "data", "--durability", "sync")
    server.start()
    try:
        rng = random.Random(7)
        patterns = [40, 41, 42]
        channel, stub = workload.stub_for(server.target)
        with channel:
            for p in patterns:  # a success first: a failed run is then a try of the pattern
                workload.send(stub, workload.record(p, f"deadline p{p}", f"seed-{p}", False, rng))
        sent = [
            workload.record(p, f"deadline p{p}", f"late-{i}", i % 7 == 0, rng)
            for i, p in enumerate(random.Random(8).choices(patterns, k=240))
        ]
        codes: Counter[str] = Counter()
        lock = threading.Lock()

        def impatient(part: int) -> None:
            channel, stub = workload.stub_for(server.target)
            with channel:
                for rec in sent[part::THREADS]:
                    write = pml_pb2.RecordExecutionRequest(record=rec)
                    read = pml_pb2.SuggestRequest(intent=rec.intent)
                    found = [_code(stub.RecordExecution, write), _code(stub.Suggest, read)]
                    with lock:
                        codes.update(found)

        threads = [threading.Thread(target=impatient, args=(t,)) for t in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        channel, stub = workload.stub_for(server.target)
        with channel:
            applied_before = sum(workload.send(stub, rec).replayed for rec in sent)
            found = {}
            for p in patterns:
                rec = next(r for r in sent if r.intent == f"deadline p{p}")
                name = workload.send(stub, rec).pattern
                pattern = stub.GetPattern(pml_pb2.GetPatternRequest(name=name), timeout=30).pattern
                found[p] = (pattern.usage_count, pattern.success_count, pattern.failure_count)
            executions = stub.GetStats(pml_pb2.GetStatsRequest(), timeout=30).executions
            answered = stub.Suggest(pml_pb2.SuggestRequest(intent="deadline p40"), timeout=30)
        expected = {}
        for p in patterns:
            mine = [r for r in sent if r.intent == f"deadline p{p}"]
            failed = sum(r.status == resources_pb2.EXECUTION_STATUS_FAILURE for r in mine)
            expected[p] = (len(mine) + 1, len(mine) + 1 - failed, failed)
        summary = report(
            "clients_giving_up_deadlines",
            {
                "calls": sum(codes.values()),
                "codes": dict(codes),
                "records_applied_before_resend": applied_before,
                "counters": found,
            },
        )
        assert codes["DEADLINE_EXCEEDED"] > 0, summary  # the deadlines did run out
        assert set(codes) <= {"OK", "DEADLINE_EXCEEDED"}, summary
        assert found == expected, summary
        assert executions == len(sent) + len(patterns), summary
        assert answered.suggestions, summary
        assert server.terminate() == 0
    finally:
        server.kill()
    _no_server_error(server)


def _kill_after_acks(target: str, prefix: str, pattern: int, kind: str, acks: int) -> list[str]:
    """A client process streams `records(prefix, pattern, N)` and is SIGKILLed once it has
    printed `acks` acknowledgements; returns the acknowledged execution ids."""
    args = [target, prefix, str(pattern), str(N), kind]
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.reliability.stream_client", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert child.stdout is not None
    acked: list[str] = []
    try:
        while len(acked) < acks:
            line = child.stdout.readline().split()
            assert line[2:] == ["result"], line
            acked.append(line[1])
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        child.stdout.close()
    return acked


def _cancel_unread(target: str, server_stats: pml_pb2_grpc.PmlServiceStub, prefix: str) -> None:
    """A stream whose client never reads its acknowledgements (the server's sends then wait
    on HTTP/2 flow control), cancelled once the server has captured some of it."""
    before = server_stats.GetStats(pml_pb2.GetStatsRequest(), timeout=30).executions
    channel, stub = workload.stub_for(target)
    with channel:
        call = stub.StreamTraces(iter(_stream_requests(records(prefix, 52, N), False)), timeout=600)
        for _ in range(1200):
            stats = server_stats.GetStats(pml_pb2.GetStatsRequest(), timeout=30)
            if stats.executions >= before + 100:
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"the stream captured only {stats.executions - before}")
        call.cancel()


def test_streams_given_up_lose_no_acknowledged_execution(tmp_path: Path) -> None:
    """With 2 stream slots and a window of 8: client processes SIGKILLed after 30 acks (whole
    records, live events) and a stream cancelled without reading its acks. Then two new
    streams at once and a Suggest are served, SIGTERM stops the server (exit 0), and after the
    restart every acknowledged execution is there (resending it answers `replayed`); resending
    everything, each pattern counts each execution once."""
    flags = ("--durability", "sync", "--max-streams", "2", "--stream-window", "8")
    server = ServerProcess(tmp_path / "data", *flags)
    server.start()
    try:
        acked = {
            "killed-records": _kill_after_acks(server.target, "killed-records", 50, "records", 30),
            "killed-live": _kill_after_acks(server.target, "killed-live", 51, "live", 30),
        }
        channel, stub = workload.stub_for(server.target)
        with channel:
            _cancel_unread(server.target, stub, "cancelled-unread")
            refused = _two_streams_at_once(server.target)
            answered = stub.Suggest(
                pml_pb2.SuggestRequest(intent="give up killed-records p50"), timeout=30
            )
        assert answered.suggestions
        assert server.terminate() == 0  # prompt: `terminate` fails past 60 s, with a dump
        server.start()
        channel, stub = workload.stub_for(server.target)
        with channel:
            lost = {
                prefix: [
                    rec.request_id
                    for rec in records(prefix, pattern, N)
                    if rec.request_id in acked[prefix] and not workload.send(stub, rec).replayed
                ]
                for prefix, pattern in (("killed-records", 50), ("killed-live", 51))
            }
            usage = {}
            for prefix, pattern in (
                ("killed-records", 50),
                ("killed-live", 51),
                ("cancelled-unread", 52),
            ):
                names = {workload.send(stub, rec).pattern for rec in records(prefix, pattern, N)}
                assert len(names) == 1, names
                got = stub.GetPattern(pml_pb2.GetPatternRequest(name=names.pop()), timeout=30)
                usage[prefix] = got.pattern.usage_count
        summary = report(
            "clients_giving_up_streams",
            {
                "executions_per_stream": N,
                "acked_before_kill": {k: len(v) for k, v in acked.items()},
                "lost": {k: len(v) for k, v in lost.items()},
                "usage_after_resend": usage,
                "refusals_before_two_new_streams": refused,
            },
        )
        assert lost == {"killed-records": [], "killed-live": []}, summary
        assert usage == dict.fromkeys(usage, N), summary
        assert server.terminate() == 0
    finally:
        server.kill()
    _no_server_error(server)


def _two_streams_at_once(target: str) -> int:
    """Two streams open together (both slots) and complete; returns how many attempts were
    refused RESOURCE_EXHAUSTED first (a slot is freed once its lost stream has ended, which
    takes the server a moment; a slot never freed fails here)."""
    for refused in range(100):
        outcome = _both_streams(target, refused)
        if outcome is None:
            return refused
        assert outcome is grpc.StatusCode.RESOURCE_EXHAUSTED, outcome
        time.sleep(0.1)
    raise AssertionError("a stream slot was never freed")


def _both_streams(target: str, attempt: int) -> grpc.StatusCode | None:
    """Two streams held open until each has its first ack, then completed; None when both
    were served whole, else the status that refused one."""
    opened = threading.Event()
    rng = random.Random(attempt)

    def held(prefix: str) -> Iterator[pml_pb2.StreamTracesRequest]:
        batch = [workload.record(53, "after", f"{prefix}-{i}", False, rng) for i in range(3)]
        yield from _stream_requests(batch, False)
        opened.wait(30)  # both streams are open before either ends

    channel, stub = workload.stub_for(target)
    with channel:
        calls = [stub.StreamTraces(held(f"after-{attempt}-{k}"), timeout=60) for k in range(2)]
        try:
            first = [next(call) for call in calls]
            opened.set()
            rest = [list(call) for call in calls]
        except grpc.RpcError as err:
            opened.set()
            return err.code()
    assert all(ack.WhichOneof("outcome") == "result" for ack in first), first
    assert [len(acks) for acks in rest] == [2, 2], rest
    return None
