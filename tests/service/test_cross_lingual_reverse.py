"""The reverse direction of the cross-lingual companion (docs/ranking.md, Other languages):
intents recorded in French, German, Spanish or Chinese, requests in English, on real engines
with the real models (MiniLM and USE multilingual)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pml_server.domain.model import SuggestQuery
from pml_server.embedding import make_companion_embedder, make_embedder
from pml_server.service import Engine
from testing.engine import record_memory
from testing.ranking_oracle import path as oracle
from tests.service._companion_profiles import assert_profiles_move_the_step_factor
from tests.support import make_record, open_engine

# a memory recorded partly in other languages, partly in English
MEMORY = [
    ("Trouve des restaurants à Dallas", "restaurant_search"),
    ("Schick meinem Chef eine E-Mail", "gmail_send"),
    ("Redimensiona las fotos de mis vacaciones", "image_resize"),
    ("把我的 ABC 记谱转换成 MIDI 文件", "abc_to_midi"),
    ("Get the weather forecast for Paris", "weather_forecast"),
    ("Create a new GitHub repository", "github_create_repo"),
]
REQUESTS = [
    ("Find restaurants in Dallas", "restaurant_search"),
    ("Send an email to my boss", "gmail_send"),
    ("Resize my vacation photos", "image_resize"),
    ("Convert my ABC notation to MIDI files", "abc_to_midi"),
    ("What will the weather be like in Paris?", "weather_forecast"),
]


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Engine, dict[str, str]]]:
    engine = open_engine(tmp_path_factory.mktemp("store"), embedder="minilm")
    yield engine, record_memory(engine, "t", MEMORY)
    engine.close()


@pytest.mark.parametrize(("request_text", "tool"), REQUESTS)
def test_an_english_request_finds_the_capability_recorded_in_another_language(
    filled: tuple[Engine, dict[str, str]], request_text: str, tool: str
) -> None:
    engine, caps = filled
    for explain in (False, True):
        result = engine.suggest("t", SuggestQuery(request_text, k=3, explain=explain))
        assert result.suggestions[0].capability_id == caps[tool]
        # ranked by the core, each intent in its space, as the oracle's Python path ranks it
        query = SuggestQuery(request_text, k=3, explain=explain)
        assert result == oracle.rank_suggestions(engine._state, "t", query)


def test_each_intent_is_compared_in_the_space_that_reads_it(
    filled: tuple[Engine, dict[str, str]],
) -> None:
    """English intents: MiniLM's cosine, exactly as without the companion; the others: the
    companion's, USE's bridged to MiniLM's geometry (docs/ranking.md, Other languages)."""
    engine, _ = filled
    minilm, use = make_embedder("minilm"), make_companion_embedder("use", "minilm")
    request = "Find restaurants in Dallas"
    answer = engine.suggest("t", SuggestQuery(request, k=6, min_match=0.0))
    seen = {s.pattern.intents[0].text: s.score.semantic for s in answer.suggestions}
    french, english = "Trouve des restaurants à Dallas", "Create a new GitHub repository"
    assert french in seen
    assert english in seen
    use_vectors = use.embed([request, french])
    minilm_vectors = minilm.embed([request, english])
    # HNSW half precision: within 1e-3
    bridged = float(use_vectors[0] @ use_vectors[1])
    assert abs(seen[french] - min(1.0, max(0.0, bridged))) < 1e-3
    assert abs(seen[english] - max(0.0, float(minilm_vectors[0] @ minilm_vectors[1]))) < 1e-3


def test_a_tenant_recorded_in_english_never_runs_the_companion(tmp_path: Path) -> None:
    engine = open_engine(tmp_path, embedder="minilm")
    try:
        engine.record("en", make_record("a", "Send an email to my boss", ["gmail_send"]))
        engine.suggest("en", SuggestQuery("Send a mail to my manager", k=1))
        index = engine._state.indexes.get("en")
        assert index is not None
        assert index.companion is not None
        assert not index.companion.active
        assert not index.companion.has_foreign()
        assert engine.admin.wait_cross_lingual(60)
        assert len(index.companion) == 0
    finally:
        engine.close()


def test_an_intent_in_another_language_starts_the_companion_and_deletion_ends_the_mix(
    tmp_path: Path,
) -> None:
    engine = open_engine(tmp_path, embedder="minilm")
    try:
        english = engine.record("t", make_record("a", "Send an email to my boss", ["gmail_send"]))
        index = engine._state.indexes.get("t")
        assert index is not None
        assert index.companion is not None
        assert not index.companion.active
        french = engine.record(
            "t", make_record("b", "Trouve des restaurants à Dallas", ["restaurant_search"])
        )
        assert index.companion.active
        assert index.companion.has_foreign()
        assert engine.admin.wait_cross_lingual(120)
        assert len(index.companion) == 2
        top = engine.suggest("t", SuggestQuery("Find restaurants in Dallas", k=1))
        assert top.suggestions[0].capability_id == french.capability_id
        engine.delete_capability("t", french.capability_id)
        assert not index.companion.has_foreign()
        after = engine.suggest("t", SuggestQuery("Send a mail to my manager", k=1))
        assert after.suggestions[0].capability_id == english.capability_id
    finally:
        engine.close()


def test_the_reverse_survives_a_restart(tmp_path: Path) -> None:
    engine = open_engine(tmp_path, embedder="minilm")
    caps = record_memory(engine, "t", MEMORY)
    engine.close()
    engine = open_engine(tmp_path, embedder="minilm")
    try:
        index = engine._state.indexes.get("t")
        assert index is not None
        assert index.companion is not None
        assert index.companion.has_foreign()
        assert engine.admin.wait_cross_lingual(120)
        for request_text, tool in REQUESTS:
            top = engine.suggest("t", SuggestQuery(request_text, k=1)).suggestions[0]
            assert top.capability_id == caps[tool], request_text
    finally:
        engine.close()


def test_without_the_companion_the_reverse_is_the_english_models(tmp_path: Path) -> None:
    engine = open_engine(tmp_path, embedder="minilm", cross_lingual="none")
    try:
        record_memory(engine, "t", MEMORY)
        index = engine._state.indexes.get("t")
        assert index is not None
        assert index.companion is None
        request = "Convert my ABC notation to MIDI files"
        answer = engine.suggest("t", SuggestQuery(request, k=6, min_match=0.0))
        minilm = make_embedder("minilm")
        for s in answer.suggestions:
            vectors = minilm.embed([request, s.pattern.intents[0].text])
            assert abs(s.score.semantic - max(0.0, float(vectors[0] @ vectors[1]))) < 1e-3
    finally:
        engine.close()


def test_a_request_in_another_language_meets_english_words_with_its_accents_folded(
    tmp_path: Path,
) -> None:
    from pml_server.service._companion import lexical_text

    assert lexical_text("¿Hay pódcasts educativos? Vidéo, música") == (
        "¿Hay podcasts educativos? Video, musica"
    )
    assert lexical_text("把我的 ABC 记谱转换成 MIDI 文件") == "把我的 ABC 记谱转换成 MIDI 文件"
    engine = open_engine(tmp_path, embedder="minilm")
    try:
        engine.record("t", make_record("p", "Find educational podcasts", ["podcast_tool"]))
        engine.record("t", make_record("m", "Send an email to my boss", ["gmail_send"]))
        top = engine.suggest("t", SuggestQuery("¿Hay pódcasts educativos?", k=1)).suggestions[0]
        assert top.pattern.tools_used == ("podcast_tool",)
        assert top.score.lexical > 0.0  # "podcasts" met the English document's stem
    finally:
        engine.close()


def test_a_request_in_korean_meets_the_korean_intent_it_repeats_lexically(tmp_path: Path) -> None:
    # a request in another language has its accents folded (`_companion.lexical_text`); NFKD
    # alone split each Hangul syllable into its letters, whose pairs met no Korean intent's
    from pml_server.service._companion import lexical_text

    assert lexical_text("파일을 읽기") == "파일을 읽기"
    engine = open_engine(tmp_path, embedder="minilm")
    try:
        engine.record("t", make_record("k", "JSON 파일을 읽기", ["read_file"]))
        engine.record("t", make_record("m", "상사에게 이메일 보내기", ["gmail_send"]))
        top = engine.suggest("t", SuggestQuery("JSON 파일을 읽어 줘", k=1)).suggestions[0]
        assert top.pattern.tools_used == ("read_file",)
        assert top.score.lexical > 0.0
        # without "JSON", the Korean words alone meet it
        alone = engine.suggest("t", SuggestQuery("파일을 읽기", k=2)).suggestions
        assert [s.score.lexical > 0.0 for s in alone if s.pattern.tools_used == ("read_file",)] == [
            True
        ]
    finally:
        engine.close()


def test_the_agents_tools_restrict_the_reverse_too(filled: tuple[Engine, dict[str, str]]) -> None:
    """With `available_tools`, the answer is the best permitted capability, whichever space
    reads its intents (docs/ranking.md, Context filters)."""
    engine, caps = filled
    for request, tools, expected in [
        (
            "Find restaurants in Dallas",
            ("restaurant_search", "github_create_repo"),
            "restaurant_search",
        ),
        ("Send an email to my boss", ("gmail_send", "github_create_repo"), "gmail_send"),
        ("Send an email to my boss", ("weather_forecast", "gmail_send"), "gmail_send"),
    ]:
        query = SuggestQuery(request, k=3, available_tools=tools)
        answer = engine.suggest("t", query)
        assert answer.suggestions[0].capability_id == caps[expected]
        assert {s.capability_id for s in answer.suggestions} <= {caps[t] for t in tools}


def test_a_tenant_recorded_only_in_other_languages(tmp_path: Path) -> None:
    engine = open_engine(tmp_path, embedder="minilm")
    try:
        caps = record_memory(engine, "t", MEMORY[:4])
        for request_text, tool in REQUESTS[:4]:
            for explain in (False, True):
                query = SuggestQuery(request_text, k=2, explain=explain)
                top = engine.suggest("t", query).suggestions[0]
                assert top.capability_id == caps[tool], request_text
    finally:
        engine.close()


# multi-step patterns, some recorded in French (their neighbours open the step gate)
STEPS_MEMORY = [
    ("Cherche des vols pour Rome et réserve un hôtel", ["flight_search", "hotel_booking"]),
    ("Find a flight to Berlin and reserve a hotel room", ["flight_search", "hotel_booking"]),
    ("Search flights to Madrid", ["flight_search"]),
    ("Réserve un hôtel à Lisbonne", ["hotel_booking"]),
    ("Find a flight to Tokyo and rent a car at the airport", ["flight_search", "car_rental"]),
    ("Loue une voiture à Nice", ["car_rental"]),
]


def test_an_english_request_over_a_mixed_memory_reads_the_companions_tool_profiles(
    tmp_path: Path,
) -> None:
    """Each intent is compared in its own space, and the candidates' tools are judged by the
    tool profiles of the companion's space, which reads every intent, with the request's
    companion vector (docs/ranking.md, Other languages, "Tool profiles in the companion's
    space"): the core's answer is the oracle's, and it differs from the same engine's without
    the profiles."""
    assert_profiles_move_the_step_factor(
        tmp_path, STEPS_MEMORY, "Search flights to Rome and book a hotel"
    )
