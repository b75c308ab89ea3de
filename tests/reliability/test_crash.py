"""Crash: a real server killed with SIGKILL at random moments while four clients record
concurrently, 20 times over one store (durability alternating sync / fast: a process crash
must lose nothing in either). After every restart the workload's checks run (see workload.py):
acknowledged writes present, counters exact after resending what was in flight, vector index
in agreement with the store, deleted patterns gone."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

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
