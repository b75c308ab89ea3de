"""The view-reads bench (benches/view_reads.py) at a tiny size: both stores are filled, every
query finds its patterns in each, each round times both, and the filter setting is restored.
Shapes only, never a timing."""

from __future__ import annotations

import re

import pytest

from benches import view_reads
from pml_server.storage import rocks


def test_both_stores_are_read_in_every_round(capsys: pytest.CaptureFixture[str]) -> None:
    default = rocks.READ_CACHED, rocks.BLOOM_BITS_PER_KEY
    try:
        view_reads.main(["300", "2", "20"])
    finally:
        restored_cache = rocks.READ_CACHED
        rocks.READ_CACHED = default[0]
    out = capsys.readouterr().out
    assert default[1] == rocks.BLOOM_BITS_PER_KEY
    assert restored_cache == frozenset()  # the bench read RocksDB, not the read cache
    rounds = re.findall(r"round (\d) bloom (\d+): ([\d.]+) ms wall", out)
    assert sorted((r, b) for r, b, _ in rounds) == sorted(
        (str(n), str(bits)) for n in range(2) for bits in (0, default[1])
    )
    assert f"bloom {default[1]}: patterns" in out
