"""The Suggest answer's conversion: timestamps set field by field as `FromMilliseconds` sets
them, and an answer cut at its byte budget keeps the best-ranked suggestions that fit, whole."""

from __future__ import annotations

import dataclasses

import pytest
from google.protobuf import timestamp_pb2
from hypothesis import given
from hypothesis import strategies as st

from pml_server.api import convert
from pml_server.api.admission import budget
from pml_server.domain.model import (
    FilteredCandidate,
    IntentView,
    ScoreParts,
    Suggestion,
    SuggestResult,
)
from tests.support import pattern

# The range a Timestamp may hold: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999Z.
FIRST_MS = -62_135_596_800_000
LAST_MS = 253_402_300_799_999


@given(st.integers(FIRST_MS, LAST_MS))
def test_timestamps_are_those_from_milliseconds(ms: int) -> None:
    ours, theirs = timestamp_pb2.Timestamp(), timestamp_pb2.Timestamp()
    convert._set_ts(ours, ms)
    if ms:
        theirs.FromMilliseconds(ms)
    assert ours == theirs
    assert ours.ToMilliseconds() == ms


@pytest.mark.parametrize("ms", [LAST_MS + 1, FIRST_MS - 1])
def test_a_time_out_of_range_is_refused(ms: int) -> None:
    with pytest.raises(ValueError, match="Timestamp is not valid"):
        convert._set_ts(timestamp_pb2.Timestamp(), ms)


def _suggestion(n: int, code_chars: int) -> Suggestion:
    view = dataclasses.replace(
        pattern(f"p{n}"),
        original_code="x" * code_chars,
        intents=(IntentView(id=f"i{n}", text=f"intent {n}", hit_count=n, last_seen_ms=1_000 * n),),
    )
    score = ScoreParts(0.9, 0.9, 0.1, 0.8, 1.0, 1.0, 1.0, 0.7 - n / 100)
    return Suggestion(view.capability_id, view, score)


def test_an_answer_stops_before_the_first_suggestion_past_its_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    suggestions = tuple(_suggestion(n, 1_000) for n in range(5))
    whole = convert.suggest_response(SuggestResult(suggestions))
    assert [s.pattern.name for s in whole.suggestions] == [
        convert.name(convert.PATTERNS, f"p{n}") for n in range(5)
    ]
    sizes = [s.ByteSize() for s in whole.suggestions]
    # Room for the first three only: the answer holds them, each as it is alone.
    monkeypatch.setattr(budget, "RESPONSE_BYTES", sum(sizes[:3]) + sizes[3] - 1)
    cut = convert.suggest_response(SuggestResult(suggestions))
    assert list(cut.suggestions) == list(whole.suggestions[:3])
    first = whole.suggestions[0]
    assert first.pattern.intents[0].last_seen_time.ToMilliseconds() == 0
    assert whole.suggestions[2].pattern.intents[0].last_seen_time.ToMilliseconds() == 2_000


def test_the_first_suggestion_always_fits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(budget, "RESPONSE_BYTES", 1)
    cut = convert.suggest_response(SuggestResult(tuple(_suggestion(n, 10) for n in range(3))))
    assert [s.pattern.name for s in cut.suggestions] == [convert.name(convert.PATTERNS, "p0")]


def _filtered(n: int, detail_chars: int) -> FilteredCandidate:
    detail = "needs tools the caller cannot reach: " + "t" * detail_chars
    return FilteredCandidate(f"c{n}", f"f{n}", "available_tools", detail)


def test_a_filtered_candidates_long_detail_is_cut_saying_how_much() -> None:
    reply = convert.suggest_response(SuggestResult((), (_filtered(0, 300_000), _filtered(1, 10))))
    cut, whole = reply.filtered
    assert cut.detail.startswith("needs tools the caller cannot reach: ttt")
    assert cut.detail.endswith(f"... ({300_037 - budget.TRIMMED_DETAIL_CHARS} more characters)")
    assert whole.detail == _filtered(1, 10).detail


def test_the_filtered_candidates_count_in_the_answers_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """They were outside it: suggestions up to the budget, then every filtered candidate, went
    past it (and past a client's default 4 MiB limit). They come first: an explained answer is
    whole, the suggestions take what is left, the first one always."""
    suggestions = tuple(_suggestion(n, 1_000) for n in range(5))
    filtered = tuple(_filtered(n, 500) for n in range(6))
    whole = convert.suggest_response(SuggestResult(suggestions, filtered))
    assert len(whole.suggestions) == 5
    assert len(whole.filtered) == 6
    monkeypatch.setattr(budget, "RESPONSE_BYTES", whole.ByteSize() - 1)
    cut = convert.suggest_response(SuggestResult(suggestions, filtered))
    assert list(cut.filtered) == list(whole.filtered)
    assert list(cut.suggestions) == list(whole.suggestions[:4])
    assert cut.ByteSize() <= budget.RESPONSE_BYTES
    # the filtered candidates within their own share, the first suggestion beside them
    share = sum(f.ByteSize() + budget.FRAMING_BYTES for f in whole.filtered[:4])
    monkeypatch.setattr(budget, "FILTERED_BYTES", share)
    monkeypatch.setattr(budget, "RESPONSE_BYTES", share)
    cut = convert.suggest_response(SuggestResult(suggestions, filtered))
    assert list(cut.filtered) == list(whole.filtered[:4])
    assert list(cut.suggestions) == list(whole.suggestions[:1])
