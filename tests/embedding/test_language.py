"""The language guess that picks the vector space of a request (docs/ranking.md, Other
languages), on the multilingual probe's hand translations and on edge cases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pml_server.embedding.language import (
    _NOT_PROSE,
    _WORD,
    ENGLISH,
    OTHER,
    SAMPLE_CHARS,
    is_english,
)

PROBE = Path(__file__).resolve().parents[2] / "benches" / "data" / "multilingual" / "probe.json"
# the same 52 requests in six more languages USE reads (benches/README.md, Multilingual probe)
PROBE_MORE = PROBE.parent / "probe_more.json"


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


def test_the_probe_translations_into_six_more_languages_are_not_english() -> None:
    """Italian, Portuguese, Dutch, Polish, Turkish and Russian: every language USE reads goes
    to the companion, not only the four the probe started with."""
    more = json.loads(PROBE_MORE.read_text())
    assert set(more["languages"]) == {"it", "pt", "nl", "pl", "tr", "ru"}
    ids = [q["id"] for q in json.loads(PROBE.read_text())["queries"]]
    assert [q["id"] for q in more["queries"]] == ids
    for language in more["languages"]:
        missed = [q[language] for q in more["queries"] if is_english(q[language])]
        assert missed == [], language


@pytest.mark.parametrize(
    "text",
    [
        # Dutch
        "Kun je het weerbericht voor morgen in Utrecht opzoeken?",
        "Ik wil een tafel reserveren voor vier personen.",
        "Zet deze CSV om naar een Excel-bestand.",
        "Wat is de wisselkoers van de euro?",
        # Polish
        "Znajdź mi tani hotel w Krakowie na weekend.",
        "Jaka jest pogoda w Warszawie?",
        "Czy możesz przetłumaczyć ten tekst na angielski?",
        "Wyślij e-mail do zespołu z raportem.",
        # Turkish
        "Yarın İstanbul'da hava nasıl olacak?",
        "Bu dosyayı PDF formatına dönüştür.",
        "Bana yakındaki restoranları göster.",
        "Bir toplantı planla ve ekibe davet gönder.",
        # Italian
        "Trova un hotel economico a Roma per il fine settimana.",
        "Mi mostri le ultime notizie sul calcio?",
        "Ho bisogno di tradurre questo documento in inglese.",
        # Portuguese
        "Quais são os melhores restaurantes em Lisboa?",
        "Preciso converter este arquivo para PDF.",
        "Me mostre a previsão do tempo para amanhã.",
    ],
)
def test_requests_in_dutch_polish_turkish_italian_and_portuguese_are_not_english(
    text: str,
) -> None:
    assert not is_english(text)


@pytest.mark.parametrize(
    "name", ["Łódź", "Gdańsk", "İstanbul", "Eskişehir", "IJsselmeer", "Ĳmuiden"]
)
@pytest.mark.parametrize(
    "sentence",
    [
        "Find cheap flights to {} for next weekend.",
        "What is the weather in {} today?",
        "Book a table for two near {}.",
    ],
)
def test_an_english_request_naming_a_polish_turkish_or_dutch_place_stays_english(
    sentence: str, name: str
) -> None:
    """Their letters are evidence of another language, never enough alone to outweigh the
    English function words around a name."""
    assert is_english(sentence.format(name))


@pytest.mark.parametrize(
    "text",
    [
        # a terse English instruction with no function word stays English: a text without
        # evidence of another language is read by the English model
        "Deploy static website Netlify production branch",
        "Generate unit tests covering edge cases",
        "Retrieve sci-fi fan fiction.",
        "{'api': 'getFoodCulture', 'parameters': {'country': 'Italy', 'occasion': 'Xmas'}}",
    ],
)
def test_words_no_list_knows_are_not_evidence_of_another_language(text: str) -> None:
    assert is_english(text)


def _english_dev_texts() -> dict[str, list[str]]:
    """Every request and execution intent of the dev set, its skewed variant and the
    multistep set (../shared/devset): all English."""
    from benches.harness.devset import DEVSET

    out = {}
    for part in ("", "skewed", "multistep"):
        for kind in ("executions", "queries"):
            path = DEVSET / part / f"{kind}.jsonl"
            if path.exists():
                lines = path.read_text().splitlines()
                out[f"{part or 'default'} {kind}"] = [json.loads(line)["intent"] for line in lines]
    return out


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


def test_every_skewed_and_multistep_text_reads_as_english() -> None:
    """The skewed variant's 17,176 executions and 4,149 requests and the multistep set's
    1,885 executions and 168 requests too."""
    texts = _english_dev_texts()
    if "skewed queries" not in texts or "multistep queries" not in texts:
        pytest.skip("../shared/devset's skewed or multistep set is absent")
    for part, intents in texts.items():
        assert [t for t in intents if not is_english(t)] == [], part


def test_no_word_of_another_language_is_frequent_in_the_english_dev_texts() -> None:
    """Common English words ("such", "per", "non", "son", "met", "serve") and pieces of
    English words ("ve" of "I've", "ai" of "AI") must not be evidence of another language:
    each listed word is in at most 0.2% of the dev sets' English texts ("los" of Los Angeles
    and "las" of Las Vegas excepted: Spanish articles), and no word is both English and
    another language's (URLs and file names left out, as the guess does)."""
    texts = [t for intents in _english_dev_texts().values() for t in intents]
    if len(texts) < 1000:
        pytest.skip("../shared/devset is absent")
    assert not OTHER & ENGLISH
    counts: dict[str, int] = {}
    for text in set(texts):
        for word in {w.lower() for w in _WORD.findall(_NOT_PROSE.sub(" ", text))} & OTHER:
            counts[word] = counts.get(word, 0) + 1
    frequent = {w: n for w, n in counts.items() if n > 0.002 * len(set(texts))}
    assert set(frequent) <= {"los", "las"}, frequent


@pytest.mark.parametrize(
    "text",
    ["git commit -m 'fix typo'", "SELECT * FROM users", "curl https://example.com/api/v1"],
)
def test_command_like_intents_are_english(text: str) -> None:
    assert is_english(text)
