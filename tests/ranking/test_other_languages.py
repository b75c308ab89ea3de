"""The parts of a request in another language (`pml_server.ranking.other_languages`;
docs/ranking.md, Other languages, "Request parts in other languages")."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pml_server.ranking.other_languages import split_other_language, words
from pml_server.ranking.plans import MAX_REQUEST_PARTS


def test_chinese_sentences_and_clauses_opening_with_a_connective_are_split_other_language() -> None:
    text = "我想去夏威夷度假。你能推荐一些热门海滩，再推荐几家当地打折的度假村吗？"
    assert split_other_language(text) == (
        "我想去夏威夷度假。",
        "你能推荐一些热门海滩",
        "再推荐几家当地打折的度假村吗？",
    )


def test_japanese_and_korean_connectives_start_a_part() -> None:
    assert split_other_language(
        "東京の天気予報を調べて、それから週末のイベントを探してください。"
    ) == (
        "東京の天気予報を調べて",
        "それから週末のイベントを探してください。",
    )
    assert split_other_language("파리 날씨를 확인하고, 그 다음 호텔을 예약해 줘.") == (
        "파리 날씨를 확인하고",
        "호텔을 예약해 줘",
    )


def test_a_chinese_clause_without_a_connective_stays_in_its_sentence() -> None:
    text = "帮我订一张从纽约到洛杉矶的往返机票，2022 年 4 月 5 日出发，4 月 12 日返回。"
    assert split_other_language(text) == (text,)


def test_a_connective_opening_a_sentence_or_clause_starts_a_part() -> None:
    assert split_other_language(
        "Kannst du mir Wanderwege in den Rocky Mountains vorschlagen? Außerdem habe ich ein "
        "PDF-Dokument mit Karten der Region."
    ) == (
        "Kannst du mir Wanderwege in den Rocky Mountains vorschlagen?",
        "habe ich ein PDF-Dokument mit Karten der Region",
    )
    assert split_other_language(
        "Télécharge le rapport annuel de la société, puis envoie le résumé à mon équipe."
    ) == ("Télécharge le rapport annuel de la société", "envoie le résumé à mon équipe")


def test_a_connective_inside_a_clause_cuts_nothing() -> None:
    # "aussi" after the verb it qualifies is no clause opener
    text = "Pourrais-tu aussi me suggérer des offres d'emploi dans le domaine de l'intelligence"
    assert split_other_language(text) == (text,)


def test_no_cut_at_and_inside_a_sentence_or_after_a_day_number() -> None:
    # an "and" joins two things one step may ask for ("logins and passwords"): no cut
    german = (
        "Buche mir einen Hin- und Rückflug von New York nach Los Angeles mit Abflug am 5. April "
        "2022 und Rückflug am 12. April 2022"
    )
    assert split_other_language(german) == (german,)


def test_words_count_letters_runs_and_half_the_cjk_characters() -> None:
    assert words("le chat de la voisine") == 2  # "chat", "voisine"
    assert words("天气预报") == 2
    assert words("Bad Bunny 个人简介") == 4  # "Bad", "Bunny" and four characters


_TEXT = st.lists(
    st.sampled_from([*"abcdefgh ,.;!?。，再并天", "hello ", " und ", " et ", ", puis ", "5. "]),
    max_size=120,
).map("".join)


@given(_TEXT)
def test_parts_are_bounded_non_empty_and_keep_every_word_in_order(text: str) -> None:
    found = split_other_language(text)
    assert len(found) <= MAX_REQUEST_PARTS
    assert all(p.strip() for p in found)
    # the parts, read in order, are the request less its marks and the connectives cut out
    kept = "".join(found).replace(" ", "")
    source = text.replace(" ", "")
    at = 0
    for char in kept:
        at_char = source.find(char, at)
        assert at_char >= 0, (text, found)
        at = at_char + 1
