"""The popular-pattern bench (benches/profile/popular_pattern.py) at a tiny size: one pattern
gathers every intent, one figure per step. Shapes only, never a timing."""

from __future__ import annotations

import pytest

from benches.profile import popular_pattern


def test_one_pattern_gathers_every_intent(capsys: pytest.CaptureFixture[str]) -> None:
    steps = popular_pattern.main(["60", "20", "8"])
    out = capsys.readouterr().out
    assert len(steps) == 3
    assert "patterns 1, intents [60]" in out
