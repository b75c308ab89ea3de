"""`codec.stored_view` (a view straight from the stored JSON, what Suggest shows) against the
reference: `capture.views.pattern_view` over the decoded records."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pml_server.capture.views import pattern_view
from pml_server.domain.records import (
    FailureSignature,
    IntentRecord,
    ParamSpec,
    PatternCounters,
    PatternRecord,
)
from pml_server.storage.codec import intent_without_vector, stored_view

_text = st.text(max_size=12)
_names = st.lists(st.text(min_size=1, max_size=6), max_size=4, unique=True)


@st.composite
def _stored(draw: st.DrawFn) -> tuple[bytes, bytes, list[bytes]]:
    names = draw(_names)
    record = PatternRecord(
        id=draw(st.text(min_size=1, max_size=8)),
        code_hash=draw(_text),
        template=draw(_text),
        original_code=draw(_text),
        language=draw(st.sampled_from(["javascript", "python"])),
        tools_used=tuple(draw(st.lists(_text, max_size=3))),
        params=tuple(ParamSpec(n, draw(_text), draw(st.booleans())) for n in names),
        parameter_schema_json=draw(_text),
        capability_id=draw(_text),
        first_seen_ms=draw(st.integers(0, 2**40)),
        code_tools=tuple(draw(st.lists(_text, max_size=2))),
        parse_ok=draw(st.booleans()),
        flagged_for_removal=draw(st.booleans()),
        superseded_by=draw(_text),
    )
    # recent values for some of the params, and for a name no param has
    keyed = draw(st.lists(st.sampled_from([*names, "x"]), unique=True))
    recent = {n: draw(st.lists(_text, max_size=3)) for n in keyed}
    counters = PatternCounters(
        usage=draw(st.integers(0, 10**6)),
        success=draw(st.integers(0, 10**6)),
        failure=draw(st.integers(0, 10**6)),
        last_used_ms=draw(st.integers(0, 2**40)),
        duration_sum_ms=draw(st.floats(0, 1e9)),
        duration_runs=draw(st.integers(0, 100)),
        mismatch_count=draw(st.integers(0, 100)),
        recent_values=recent,
        failure_signatures=[FailureSignature("s", "t", "e", 1, 2, {"a": "1"})],
        tags=sorted(draw(st.lists(_text, max_size=2, unique=True))),
    )
    intents = [
        IntentRecord(
            id=draw(st.integers(0, 2**64 - 1)),
            pattern_id=record.id,
            text=draw(_text),
            # few distinct counts: ties are ordered by id
            hit_count=draw(st.integers(0, 2)),
            last_seen_ms=draw(st.integers(0, 2**40)),
            model_id="m",
            vector=np.ones(4, dtype=np.float32),
        )
        for _ in range(draw(st.integers(1, 5)))
    ]
    return record.to_json(), counters.to_json(), [i.to_json() for i in intents]


@settings(max_examples=200, deadline=None)
@given(_stored())
def test_stored_view_is_pattern_view_of_the_decoded_records(
    stored: tuple[bytes, bytes, list[bytes]],
) -> None:
    pattern, counters, intents = stored
    expected = pattern_view(
        PatternRecord.from_json(pattern),
        PatternCounters.from_json(counters),
        [intent_without_vector(raw) for raw in intents],
    )
    assert stored_view(pattern, counters, intents, len(intents)) == expected


def test_stored_view_reads_counters_written_before_their_later_fields() -> None:
    """A counters record of an older store lacks fields added since: the defaults, as
    `PatternCounters.from_json` gives them."""
    record = PatternRecord(
        "p", "h", "t", "c", "javascript", ("a",), (ParamSpec("P", "string", False),), "{}", "k", 1
    )
    old_counters = b'{"usage":3,"success":2,"failure":1,"last_used_ms":9,"failure_signatures":[]}'
    intent = IntentRecord(7, "p", "read it", 1, 5, "m", np.ones(2, dtype=np.float32)).to_json()
    expected = pattern_view(
        record, PatternCounters.from_json(old_counters), [intent_without_vector(intent)]
    )
    assert stored_view(record.to_json(), old_counters, [intent], 1) == expected
