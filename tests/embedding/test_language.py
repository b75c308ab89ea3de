"""The language guess that picks the vector space of a request (docs/ranking.md, Other
languages), on the multilingual probe's hand translations and on edge cases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pml_server.embedding.language import SAMPLE_CHARS, is_english

PROBE = Path(__file__).resolve().parents[2] / "benches" / "data" / "multilingual" / "probe.json"


def test_the_probe_english_requests_are_english_and_their_translations_are_not() -> None:
    probe = json.loads(PROBE.read_text())
    queries = probe["queries"]
    assert all(is_english(q["en"]) for q in queries)
    for language in ("fr", "de", "es", "zh"):
        missed = [q[language] for q in queries if is_english(q[language])]
        assert missed == []
    for group in probe["reverse"]:
        for execution in group["executions"]:
            assert not is_english(execution[group["language"]])


@pytest.mark.parametrize(
    "text",
    ["", "{}", "12345", "json_to_csv", "JSON to CSV", "Read the JSON file"],
)
def test_texts_without_other_language_evidence_are_english(text: str) -> None:
    assert is_english(text)


@pytest.mark.parametrize(
    "text",
    [
        "Привет, найди ресторан",
        "東京のレストランを探して",
        "서울 날씨 알려줘",
        "¿Dónde está?",
        "Télécharge la page https://example.com/docs et résume-la",
    ],
)
def test_other_scripts_and_marks_are_not_english(text: str) -> None:
    assert not is_english(text)


@pytest.mark.parametrize(
    ("text", "english"),
    [
        ("Finde Restaurants in Dallas.", False),  # one German word, one English: even
        ("Finde Restaurants in the Dallas area.", True),  # English words outnumber it
        ("Update my résumé", True),  # even, but by an accented word alone
        ("Montre-moi le fichier", False),
    ],
)
def test_an_even_count_tips_only_with_a_function_word_of_another_language(
    text: str, english: bool
) -> None:
    assert is_english(text) is english


def test_only_a_bounded_prefix_is_read() -> None:
    french = "Trouve le fichier de la semaine dernière et envoie-le à mon patron. "
    # the English words past the sample are never counted
    assert not is_english(french * (SAMPLE_CHARS // len(french) + 1) + "the " * 10**5)


def test_every_dev_set_intent_reads_as_english() -> None:
    """The guess also runs on every captured intent (an intent that is not English makes the
    tenant read it in the companion's space): none of the dev set's 3,846 executions and 923
    requests does, so a memory recorded in English is ranked exactly as before."""
    from benches.harness.devset import available, load

    if not available("default"):
        pytest.skip("../shared/devset is absent")
    executions, queries = load("default")
    assert [e.intent for e in executions if not is_english(e.intent)] == []
    assert [q.intent for q in queries if not is_english(q.intent)] == []


@pytest.mark.parametrize(
    "text",
    ["git commit -m 'fix typo'", "SELECT * FROM users", "curl https://example.com/api/v1"],
)
def test_command_like_intents_are_english(text: str) -> None:
    assert is_english(text)
