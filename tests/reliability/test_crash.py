"""Crash: a real server killed with SIGKILL at random moments while four clients record
concurrently, 20 times over one store (durability alternating sync / fast: a process crash
must lose nothing in either). After every restart the workload's checks run (see workload.py):
acknowledged writes present, counters exact after resending what was in flight, vector index
in agreement with the store, deleted patterns gone."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from pml_server._proto.pml.v1 import pml_pb2
from testing.server_process import ServerProcess
from tests.reliability import workload
from tests.reliability.report import report

CYCLES = 20
CLIENTS = 4


@pytest.mark.slow
def test_sigkill_during_concurrent_captures_loses_nothing(tmp_path: Path) -> None:
    rng = random.Random(9)
    ledger = workload.Ledger()
    data = tmp_path / "data"
    server = ServerProcess(data, "--durability", "sync")
    server.start()
    names = workload.seed(server.target, ledger, rng)

    def crash(cycle: int) -> None:
        server.kill()
        server.flags = ("--durability", "fast" if cycle % 2 else "sync")

    totals = workload.interrupted_rounds(
        server,
        ledger,
        names,
        rng,
        rounds=CYCLES,
        rounds_key="cycles",
        clients=CLIENTS,
        pause=(0.3, 2.0),
        cut=crash,
    )
    totals["sent_total"] = len(ledger.sent)
    summary = report("crash_sigkill", totals)
    assert totals["cycles"] == CYCLES, summary
    assert totals["acked_found"] == totals["acked"] > CYCLES, summary


BATCH = 64  # records a StreamTraces batch message holds here (a bulk upload's)
BATCHES = 12  # batches one stream sends (so what is resent after a crash is bounded)


def _stream_writer(target: str, ledger: workload.Ledger, seed: int) -> None:
    """Stream `BATCHES` batches of `BATCH` records on one stream, or until the server dies:
    every record is in the ledger before its batch is sent, and acknowledged only once its ack
    came back."""
    rng = random.Random(seed)

    def batches() -> Iterator[pml_pb2.StreamTracesRequest]:
        sequence = 0
        for _ in range(BATCHES):
            messages = []
            for _ in range(BATCH):
                p = rng.randrange(workload.PATTERNS)
                failed = rng.random() < 0.2
                rid = f"s{seed}-{sequence}"
                rec = workload.record(p, workload.intent_text(p, rng), rid, failed, rng)
                with ledger.lock:
                    ledger.sent[rid] = workload.Sent(p, failed, rec)
                sequence += 1
                messages.append(
                    pml_pb2.StreamTracesRequest(execution_id=rid, sequence=sequence, record=rec)
                )
            yield pml_pb2.StreamTracesRequest(batch=messages)

    channel, stub = workload.stub_for(target)
    with channel:
        try:
            for reply in stub.StreamTraces(batches(), timeout=600):
                for ack in reply.batch or [reply]:
                    if ack.HasField("result"):
                        with ledger.lock:
                            ledger.acked.add(ack.execution_id)
        except grpc.RpcError:
            return  # the server is gone: what was not acknowledged is resent after restart


@pytest.mark.slow
def test_sigkill_during_streamed_batches_loses_no_acknowledged_capture(tmp_path: Path) -> None:
    """A real server killed with SIGKILL while two streams upload batches of 64 records (a
    batch's captures are held to reach the disk together, `writes_held`), three times: every
    acknowledged record is found after the restart (its resend is `replayed`), and once what
    was in flight is resent, each pattern's counters and the executions count are exact."""
    rng = random.Random(37)
    ledger = workload.Ledger()
    server = ServerProcess(tmp_path / "data", "--durability", "sync")
    server.start()
    names = workload.seed(server.target, ledger, rng)
    acked_before = 0
    try:
        for cycle in range(3):
            writers = [
                threading.Thread(
                    target=_stream_writer, args=(server.target, ledger, cycle * 10 + i)
                )
                for i in range(2)
            ]
            for thread in writers:
                thread.start()
            time.sleep(rng.uniform(0.5, 2.0))
            server.kill()
            for thread in writers:
                thread.join(60)
            server.start()
            with ledger.lock:
                acked = set(ledger.acked)
            assert len(acked) > acked_before  # the cycle acknowledged some records
            acked_before = len(acked)
            figures = workload.check_after_restart(server.target, ledger, names, acked, rng, 10)
            assert figures.acked_present == len(acked)
    finally:
        server.kill()
