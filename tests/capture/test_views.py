"""Stored records -> the API's views (capture/views.py)."""

from __future__ import annotations

from pml_server.capture.views import MAX_CAPABILITY_INTENTS, capability_view
from pml_server.domain.model import IntentView, PatternView
from pml_server.domain.records import CapabilityRecord


class _CountedText(str):
    """An intent text that counts how often it is compared with another."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        _CountedText.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def _member(pattern_id: str, texts: list[str]) -> PatternView:
    return PatternView(
        id=pattern_id,
        code_hash="",
        template="",
        original_code="",
        language="typescript",
        tools_used=("read_file",),
        params=(),
        parameter_schema_json="{}",
        usage_count=1,
        success_count=1,
        failure_count=0,
        first_seen_ms=1,
        last_used_ms=1,
        mean_duration_ms=0.0,
        capability_id="cap",
        intents=tuple(IntentView(f"{pattern_id}-{n}", t, 1, 1) for n, t in enumerate(texts)),
    )


def test_a_capability_lists_its_first_distinct_intents_at_a_cost_linear_in_its_intents() -> None:
    """A capability's view names its first `MAX_CAPABILITY_INTENTS` distinct intent texts, in
    member order. Finding them compared every text with every distinct one before it: a
    capability with thousands of intents cost GetCapability and each listing page a time
    quadratic in them."""
    per_member = 1500
    members = [
        _member(f"pat_{m}", [_CountedText(f"read file {m * 7 + n}") for n in range(per_member)])
        for m in range(3)
    ]
    # repeated texts across members (m * 7 + n overlaps) are listed once
    expected = list(dict.fromkeys(i.text for p in members for i in p.intents))
    record = CapabilityRecord("cap", ("read_file",), tuple(p.id for p in members), 1)
    _CountedText.compared = 0
    view = capability_view(record, members)
    assert list(view.intents) == expected[:MAX_CAPABILITY_INTENTS]
    assert view.pattern_ids == ("pat_0", "pat_1", "pat_2")
    assert _CountedText.compared <= 3 * per_member
