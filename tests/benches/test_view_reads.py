"""The view-reads bench (benches/profile/view_reads.py) at a tiny size: both stores are filled,
every query finds its patterns in each, each round times both, and the store's settings are
restored. Shapes only, never a timing."""

from __future__ import annotations

import re

import pytest

from benches.profile import view_reads
from pml_server.storage import rocks


def test_both_stores_are_read_in_every_round(capsys: pytest.CaptureFixture[str]) -> None:
    cached, bits = rocks.READ_CACHED, rocks.BLOOM_BITS_PER_KEY
    view_reads.main(["300", "2", "20"])
    out = capsys.readouterr().out
    assert (cached, bits) == (rocks.READ_CACHED, rocks.BLOOM_BITS_PER_KEY)
    rounds = re.findall(r"round (\d) bloom (\d+): ([\d.]+) ms wall", out)
    assert sorted((r, b) for r, b, _ in rounds) == sorted(
        (str(n), str(b)) for n in range(2) for b in (0, bits)
    )
    assert f"bloom {bits}: patterns" in out
