"""Crash: a real server killed with SIGKILL at random moments while four clients record
concurrently, 20 times over one store (durability alternating sync / fast: a process crash
must lose nothing in either). After every restart the workload's checks run (see workload.py):
acknowledged writes present, counters exact after resending what was in flight, vector index
in agreement with the store, deleted patterns gone."""

from __future__ import annotations

import random
import time
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
    totals = {
        "cycles": 0,
        "acked": 0,
        "acked_found": 0,
        "in_flight_resent": 0,
        "intents_checked": 0,
        "deleted_checked": 0,
    }
    try:
        for cycle in range(CYCLES):
            workload.doom_one(server.target, ledger, cycle)
            acked_before = set(ledger.acked)
            writers = workload.Writers(server.target, ledger, cycle, CLIENTS)
            time.sleep(rng.uniform(0.3, 2.0))
            server.kill()
            writers.join()
            new_acked = ledger.acked - acked_before
            server = ServerProcess(
                data, "--durability", "fast" if cycle % 2 else "sync", log_path=server.log_path
            )
            server.start()
            figures = workload.check_after_restart(server.target, ledger, names, new_acked, rng)
            totals["cycles"] += 1
            totals["acked"] += len(new_acked)
            totals["acked_found"] += figures.acked_present
            totals["in_flight_resent"] += figures.in_flight_resent
            totals["intents_checked"] += figures.intents_checked
            totals["deleted_checked"] = figures.deleted_checked
    finally:
        server.kill()
    totals["sent_total"] = len(ledger.sent)
    summary = report("crash_sigkill", totals)
    assert totals["cycles"] == CYCLES, summary
    assert totals["acked_found"] == totals["acked"] > CYCLES, summary
