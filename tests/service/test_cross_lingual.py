"""The cross-lingual companion (docs/ranking.md, Other languages): MiniLM for English, USE
multilingual for requests in other languages, on real engines with the real models."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from pml_server.domain.errors import FailedPreconditionError
from pml_server.domain.model import SuggestQuery
from pml_server.embedding import make_embedder
from pml_server.service import Engine
from testing.engine import record_memory
from testing.ranking_oracle import path as oracle
from tests.service._companion_profiles import assert_profiles_move_the_step_factor
from tests.support import make_record, open_engine

pytestmark = pytest.mark.model  # every test here runs a real embedding model

MEMORY = [
    ("Find restaurants in Dallas", "restaurant_search"),
    ("Send an email to my boss", "gmail_send"),
    ("Resize vacation photos", "image_resize"),
    ("Get the weather forecast for Paris", "weather_forecast"),
    ("Convert my ABC notation to MIDI files", "abc_to_midi"),
]
REQUESTS = [
    ("Trouve des restaurants à Dallas.", "restaurant_search"),
    ("Envoie un e-mail à mon patron", "gmail_send"),
    ("Wie wird das Wetter morgen in Paris?", "weather_forecast"),
    ("Redimensiona las fotos de mis vacaciones", "image_resize"),
    ("把我的 ABC 记谱转换成 MIDI 文件", "abc_to_midi"),
]


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Engine, dict[str, str]]]:
    engine = open_engine(tmp_path_factory.mktemp("store"), embedder="minilm")
    yield engine, record_memory(engine, "t", MEMORY)
    engine.close()


@pytest.mark.parametrize(("request_text", "tool"), REQUESTS)
def test_a_request_in_another_language_finds_the_english_capability(
    filled: tuple[Engine, dict[str, str]], request_text: str, tool: str
) -> None:
    engine, caps = filled
    result = engine.suggest("t", SuggestQuery(request_text, k=3))
    assert result.suggestions[0].capability_id == caps[tool]
    explained = engine.suggest("t", SuggestQuery(request_text, k=3, explain=True))
    assert explained.suggestions[0].capability_id == caps[tool]
    # ranked by the core in the companion's space as the oracle's Python path ranks it
    python = oracle.rank_suggestions(engine._state, "t", SuggestQuery(request_text, k=3))
    assert result.suggestions == python.suggestions
    python = oracle.rank_suggestions(engine._state, "t", SuggestQuery(request_text, explain=True))
    assert engine.suggest("t", SuggestQuery(request_text, explain=True)) == python


def test_english_requests_keep_the_english_model(filled: tuple[Engine, dict[str, str]]) -> None:
    engine, caps = filled
    result = engine.suggest("t", SuggestQuery("Look for places to eat in Dallas", k=1))
    top = result.suggestions[0]
    assert top.capability_id == caps["restaurant_search"]
    minilm = make_embedder("minilm")
    vectors = minilm.embed(["Look for places to eat in Dallas", "Find restaurants in Dallas"])
    # the semantic part is MiniLM's cosine (HNSW half precision: within 5e-4)
    assert abs(top.score.semantic - float(vectors[0] @ vectors[1])) < 1e-3


def test_a_client_vector_is_the_primary_models_whatever_the_language(
    filled: tuple[Engine, dict[str, str]],
) -> None:
    engine, caps = filled
    text = "Envoie un e-mail à mon patron"
    vector = make_embedder("minilm").embed(["Send a mail to my manager"])[0]
    query = SuggestQuery(text, k=1, intent_embedding=tuple(float(x) for x in vector))
    result = engine.suggest("t", query)
    assert result.suggestions[0].capability_id == caps["gmail_send"]


def test_the_companion_is_rebuilt_at_open_and_follows_deletions(tmp_path: Path) -> None:
    engine = open_engine(tmp_path, embedder="minilm")
    caps = record_memory(engine, "t", MEMORY)
    engine.close()
    engine = open_engine(tmp_path, embedder="minilm")
    try:
        for request_text, tool in REQUESTS:
            top = engine.suggest("t", SuggestQuery(request_text, k=1)).suggestions[0]
            assert top.capability_id == caps[tool]
        engine.delete_capability("t", caps["gmail_send"])
        after = engine.suggest("t", SuggestQuery("Envoie un e-mail à mon patron", k=5))
        assert caps["gmail_send"] not in {s.capability_id for s in after.suggestions}
        # a capture after the open is found in the other language at once
        added = engine.record("t", make_record("new", "Translate a text to Japanese", ["tr"]))
        found = engine.suggest("t", SuggestQuery("Traduis un texte en japonais", k=1))
        assert found.suggestions[0].capability_id == added.capability_id
    finally:
        engine.close()


def test_without_the_companion_other_languages_use_the_english_model(tmp_path: Path) -> None:
    engine = open_engine(tmp_path, embedder="minilm", cross_lingual="none")
    try:
        record_memory(engine, "t", MEMORY)
        text = "给我的老板发一封邮件"  # "send an email to my boss"
        top = engine.suggest("t", SuggestQuery(text, k=1, min_match=0.0)).suggestions[0]
        intent = top.pattern.intents[0].text
        vectors = make_embedder("minilm").embed([text, intent])
        assert abs(top.score.semantic - max(0.0, float(vectors[0] @ vectors[1]))) < 1e-3
    finally:
        engine.close()


def test_a_request_with_no_shared_word_is_found_through_the_companion(
    filled: tuple[Engine, dict[str, str]],
) -> None:
    engine, caps = filled
    top = engine.suggest("t", SuggestQuery("给我的老板发一封邮件", k=1)).suggestions[0]
    assert top.capability_id == caps["gmail_send"]
    assert top.score.lexical == 0.0


def test_use_vectors_are_normalized_and_cross_lingual() -> None:
    use = make_embedder("use")
    vectors = use.embed(["Read JSON file", "Lire un fichier JSON", "读取JSON文件", "Send an email"])
    assert vectors.shape == (4, 512)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    same = vectors[:3] @ vectors[:3].T
    assert same.min() > 0.8
    assert float(vectors[0] @ vectors[3]) < 0.3
    alone = use.embed(["Lire un fichier CSV"])[0]
    beside = make_embedder("use").embed(["Lire un fichier CSV", "un texte bien plus long " * 30])
    assert np.array_equal(alone, beside[0])  # a text's vector does not depend on its batch


def test_only_tenants_that_ask_in_other_languages_pay_for_the_companion(tmp_path: Path) -> None:
    from pml_server.service._companion import SYNC_FILL

    engine = open_engine(tmp_path, embedder="minilm")
    try:
        caps = {}
        for n in range(SYNC_FILL + 8):  # more than a Suggest fills by itself
            tool = f"tool_{n}"
            caps[tool] = engine.record(
                "big", make_record(f"b{n}", f"Run batch job number {n} on the cluster", [tool])
            ).capability_id
        caps["gmail_send"] = engine.record(
            "big", make_record("mail", "Send an email to my boss", ["gmail_send"])
        ).capability_id
        engine.suggest("big", SuggestQuery("Send a mail to my manager", k=1))  # English
        index = engine._state.indexes.get("big")
        assert index is not None
        assert index.companion is not None
        assert len(index.companion) == 0  # English requests only: nothing computed
        request = SuggestQuery("给我的老板发一封邮件", k=1, min_match=0.0)
        first = engine.suggest("big", request).suggestions[0]
        # too many vectors missing for this call: answered by MiniLM, the thread fills
        vectors = make_embedder("minilm").embed([request.intent, first.pattern.intents[0].text])
        assert abs(first.score.semantic - max(0.0, float(vectors[0] @ vectors[1]))) < 1e-3
        assert engine.admin.wait_cross_lingual(120)
        assert len(index.companion) == SYNC_FILL + 9
        later = engine.suggest("big", request).suggestions[0]
        assert later.capability_id == caps["gmail_send"]
        # from now on the tenant's captures are embedded by the thread too
        added = engine.record("big", make_record("tr", "Translate a text to Japanese", ["tr"]))
        assert engine.admin.wait_cross_lingual(60)
        assert len(index.companion) == SYNC_FILL + 10
        found = engine.suggest("big", SuggestQuery("Traduis un texte en japonais", k=1))
        assert found.suggestions[0].capability_id == added.capability_id
    finally:
        engine.close()


def test_the_companion_stores_nothing_so_its_setting_can_change(tmp_path: Path) -> None:
    """Only the primary model's id is stored and checked at open (its vectors are stored); the
    companion's are recomputed, so a store opens with any `cross_lingual`."""
    engine = open_engine(tmp_path, embedder="minilm", cross_lingual="use")
    caps = record_memory(engine, "t", MEMORY)
    engine.close()
    engine = open_engine(tmp_path, embedder="minilm", cross_lingual="none")
    try:
        result = engine.suggest("t", SuggestQuery("Find restaurants in Dallas", k=1))
        assert result.suggestions[0].capability_id == caps["restaurant_search"]
    finally:
        engine.close()
    with pytest.raises(FailedPreconditionError, match="all-MiniLM-L6-v2"):
        open_engine(tmp_path, embedder="hashing", cross_lingual="use")


# multi-step patterns (their neighbours open the step gate: docs/ranking.md, Steps, "Gate")
STEPS_MEMORY = [
    ("Search flights to Rome and book a hotel there", ["flight_search", "hotel_booking"]),
    ("Find a flight to Berlin and reserve a hotel room", ["flight_search", "hotel_booking"]),
    ("Search flights to Madrid", ["flight_search"]),
    ("Book a hotel in Lisbon", ["hotel_booking"]),
    ("Find a flight to Tokyo and rent a car at the airport", ["flight_search", "car_rental"]),
    ("Rent a car in Nice", ["car_rental"]),
]


def test_a_request_in_another_language_reads_the_companions_tool_profiles(
    tmp_path: Path,
) -> None:
    """Ranked in the companion's space, a request's step factor includes the tool profiles
    summed from the companion's vectors (docs/ranking.md, Other languages, "Tool profiles in
    the companion's space"): the core's answer is the oracle's, and it differs from the same
    engine's without the profiles."""
    assert_profiles_move_the_step_factor(
        tmp_path, STEPS_MEMORY, "Cherche un vol pour Rome et réserve un hôtel"
    )
