"""TenantSearchIndex's lexical side: one document per pattern, all its intents and its tools."""

from __future__ import annotations

import numpy as np

from pml_server.domain.records import IntentRecord
from pml_server.search.tenant import TenantSearchIndex


def intent(intent_id: int, pattern_id: str, text: str) -> IntentRecord:
    vector = np.zeros(4, dtype=np.float32)
    vector[intent_id % 4] = 1.0
    return IntentRecord(intent_id, pattern_id, text, 1, 0, "test", vector)


def test_a_pattern_is_found_by_words_from_any_of_its_intents_and_its_tools() -> None:
    index = TenantSearchIndex("exact", 4)
    index.add(intent(1, "pat_csv", "Process CSV file"), ("read_file", "parse_csv"))
    index.add(intent(2, "pat_csv", "load the sales spreadsheet"), ("read_file", "parse_csv"))
    index.add(intent(3, "pat_mail", "Send an email"), ("gmail_send",))
    assert [p for p, _ in index.lexical_hits("sales csv", 5)] == ["pat_csv"]
    assert [p for p, _ in index.lexical_hits("gmail_send", 5)] == ["pat_mail"]
    assert len(index.lexical) == 2  # documents are patterns, not intents


def test_removing_intents_takes_their_words_out_and_the_last_one_the_pattern() -> None:
    index = TenantSearchIndex("exact", 4)
    index.add(intent(1, "pat_csv", "Process CSV file"), ("read_file", "parse_csv"))
    index.add(intent(2, "pat_csv", "load the sales spreadsheet"), ("read_file", "parse_csv"))
    index.add(intent(2, "pat_csv", "load the sales spreadsheet"), ("read_file", "parse_csv"))
    index.remove([2])
    assert index.lexical_hits("sales spreadsheet", 5) == []
    assert [p for p, _ in index.lexical_hits("parse_csv", 5)] == ["pat_csv"]
    index.remove([1])
    assert index.lexical_hits("parse_csv", 5) == []
    assert len(index.lexical) == 0
    index.remove([1])  # replayed deletion
    assert index.pattern_of == {}
