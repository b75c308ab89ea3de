"""Acknowledged captures survive a killed process (SIGKILL mid-stream), in both durability
modes; the reopened store is consistent (counters match the acknowledged runs)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pml_server.domain.model import PageRequest
from tests.support import make_record, open_engine

WRITER = """
import sys
from pathlib import Path
from tests.support import make_record, open_engine
engine = open_engine(Path(sys.argv[1]), durability=sys.argv[2])
i = 0
while True:
    engine.record("t", make_record(f"r{i}", "Read JSON file", ["read_file", "parse_json"]))
    print(i, flush=True)
    i += 1
"""


@pytest.mark.parametrize("durability", ["sync", "fast"])
def test_acknowledged_captures_survive_sigkill(tmp_path: Path, durability: str) -> None:
    root = Path(__file__).resolve().parents[2]
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path), durability],
        cwd=root,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    acked = -1
    for line in child.stdout:
        acked = int(line)
        if acked >= 300:
            break
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    child.stdout.close()
    engine = open_engine(tmp_path, durability=durability)
    [pattern] = engine.list_patterns("t", PageRequest()).items
    assert pattern.usage_count >= acked + 1  # every acknowledged run (a later one may be in)
    assert pattern.usage_count == engine.stats("t").executions  # one batch: all or nothing
    for i in range(acked + 1):
        record = make_record(f"r{i}", "Read JSON file", ["read_file", "parse_json"])
        assert engine.record("t", record).replayed
    engine.close()
