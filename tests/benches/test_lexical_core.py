"""The lexical core bench's query kinds (benches/profile/lexical_core.py `--kinds`) at a tiny size,
with a second copy of this build as the baseline: both builds index the same documents, agree on
every query's hits (the bench asserts it), before and after a churn, and are each reported for
both query kinds. Shapes only, never a timing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from benches.profile import lexical_core
from pml_server import _core


def test_both_query_kinds_are_timed_in_every_build(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "_core.abi3.so"  # another file: loaded as its own module
    shutil.copy(_core.__file__, copy)
    builds = {"copy": lexical_core.load_core(str(copy)), "this build": _core}
    lexical_core.compare_kinds(1500, 12, 40, 1, builds)
    lines = capsys.readouterr().out.splitlines()
    assert sum("1500 documents" in line and "B a posting" in line for line in lines) == 2
    assert sum("churn of 30 documents" in line for line in lines) == 2
    for kind in ("j < 1000", "j >= 1000"):
        for name in builds:
            timed = [line for line in lines if kind in line and f"{name}: p50" in line]
            assert len(timed) == 2, (kind, name)  # before and after the churn
