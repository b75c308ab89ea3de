"""Stored records -> the API's views (capture/views.py)."""

from __future__ import annotations

from pml_server.capture.views import MAX_CAPABILITY_INTENTS, capability_view
from pml_server.domain.records import CapabilityRecord, PatternCounters


class _CountedText(str):
    """An intent text that counts how often it is compared with another."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        _CountedText.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_a_capability_lists_its_first_distinct_intents_at_a_cost_linear_in_its_intents() -> None:
    """A capability's view names the first `MAX_CAPABILITY_INTENTS` distinct texts of the
    intents it is given, in order, and takes no more of them (docs/api.md, Capabilities).
    Finding them compared every text with every distinct one before it: a capability with
    thousands of intents cost GetCapability and each listing page a time quadratic in them."""
    per_member = 1500
    texts = [_CountedText(f"read file {m * 7 + n}") for m in range(3) for n in range(per_member)]
    # repeated texts (m * 7 + n overlaps) are listed once
    expected = list(dict.fromkeys(texts))
    given = iter(texts)
    members = [(f"pat_{m}", PatternCounters(usage=m + 1, success=m)) for m in range(3)]
    record = CapabilityRecord("cap", ("read_file",), tuple(p for p, _ in members), 1)
    _CountedText.compared = 0
    view = capability_view(record, members, ["pat_2", "pat_1"], given)
    assert list(view.intents) == expected[:MAX_CAPABILITY_INTENTS]
    assert next(given) == texts[MAX_CAPABILITY_INTENTS]  # read no further
    assert view.pattern_ids == ("pat_2", "pat_1")
    assert (view.best_pattern_id, view.pattern_count) == ("pat_2", 3)
    assert (view.usage_count, view.success_count) == (6, 3)
    assert _CountedText.compared <= 3 * per_member
