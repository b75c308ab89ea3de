"""LexicalIndex: BM25 behaviour, incremental add/remove, tokenization, thread safety."""

from __future__ import annotations

import gc
import random
import re
import string
import threading
import tracemalloc

import pytest
import Stemmer
from hypothesis import given, settings
from hypothesis import strategies as st
from snowballstemmer.english_stemmer import EnglishStemmer

from benches.harness import devset
from pml_server.ranking import LexicalIndex, tokenize
from pml_server.ranking.lexical import CACHED_WORD_CHARS, _stem, query_terms


def test_tokenize_stems_drops_stop_words_and_keeps_compound_names() -> None:
    assert tokenize("Parse the spreadsheets") == ["pars", "spreadsheet"]
    assert tokenize("read_file") == ["read", "file", "read_file"]
    assert tokenize("gmail:send") == ["gmail", "send", "gmail:send"]
    assert tokenize("parseCSV") == ["pars", "csv", "parsecsv"]
    assert tokenize("Ünïcode café") == ["ünïcode", "café"]
    assert tokenize("") == []
    assert tokenize("batch123 in 2024") == ["batch", "123", "batch123", "2024"]


def test_text_without_spaces_gives_character_pairs_and_its_latin_names_apart() -> None:
    # Chinese and Japanese run words together, and a name typed inside such a clause was part
    # of one token with it: "netlify" could never meet the English document naming it
    assert tokenize("部署到Netlify上") == ["部署", "署到", "netlifi", "上"]
    assert tokenize("用read_file读取文件") == [
        "用",
        "read",
        "file",
        "read_file",
        "读取",
        "取文",
        "文件",
    ]
    assert tokenize("JSONファイルを読む") == [
        "json",
        "ファ",
        "ァイ",
        "イル",
        "ルを",
        "を読",
        "読む",
    ]
    assert tokenize("JSON 파일을 읽기") == ["json", "파일", "일을", "읽기"]
    assert tokenize("字") == ["字"]


def test_a_request_without_spaces_meets_the_documents_sharing_its_words_and_names() -> None:
    index = LexicalIndex()
    index.add("deploy", "deploy a website to Netlify")
    index.add("email", "send an email")
    index.add("zh", "把文件上传到服务器")
    assert [d for d, _ in index.search("帮我部署到Netlify上", 3)] == ["deploy"]
    assert [d for d, _ in index.search("请上传这个文件", 3)] == ["zh"]


@given(st.text(alphabet="文件读取上传字ファイル파일ab_ .", max_size=30))
def test_each_pair_of_neighbouring_cjk_characters_is_a_term_and_nothing_else_is(text: str) -> None:
    terms = tokenize(text)
    runs = re.findall("[文件读取上传字ファイル파일]+", text)
    pairs = {run[i : i + 2] for run in runs for i in range(len(run) - 1)}
    alone = {run for run in runs if len(run) == 1}
    assert {t for t in terms if not t.isascii()} == pairs | alone


@given(st.text(alphabet="0123456789", min_size=1, max_size=24))
def test_numbers_skip_the_stemmer_because_it_leaves_them_unchanged(number: str) -> None:
    # `tokenize` passes ASCII numbers through without stemming: sound only while the
    # stemmer itself returns them unchanged
    assert Stemmer.Stemmer("english").stemWord(number) == number
    assert tokenize(f"invoice {number}") == ["invoic", number]


# Words the English algorithm treats specially (its exceptions, the -ly/-ies/-ing/-eed/-y
# rules, apostrophes), then accented and non-Latin words, which the stemmer receives as they are.
_TRICKY_WORDS = [
    "skies",
    "dying",
    "lying",
    "tying",
    "news",
    "innings",
    "outing",
    "canning",
    "herring",
    "earring",
    "proceed",
    "exceed",
    "succeed",
    "gently",
    "ugly",
    "early",
    "only",
    "singly",
    "sky",
    "idly",
    "spreadsheets",
    "generously",
    "consigned",
    "knightly",
    "fluently",
    "abilities",
    "agreed",
    "feed",
    "bleed",
    "hopping",
    "hoping",
    "cry",
    "cries",
    "crying",
    "say",
    "arsenal",
    "generic",
    "communism",
    "commune",
    "universal",
    "yes",
    "ys",
    "y'",
    "'tis",
    "don't",
    "fish's",
    "café",
    "naïve",
    "über",
    "straße",
    "привет",
    "文件",
    "résumés",
    "crème",
]


def _python_stem(word: str) -> str:
    # The pure-Python generation of the same Snowball algorithm, imported from its module:
    # `snowballstemmer.stemmer` itself would hand back PyStemmer's when that is installed.
    return str(EnglishStemmer().stemWord(word))


@pytest.mark.parametrize("word", _TRICKY_WORDS)
def test_the_stemmer_agrees_with_snowballs_python_generation(word: str) -> None:
    assert _stem(word) == _python_stem(word)


@settings(max_examples=500)
@given(
    st.text(
        alphabet=st.characters(
            categories=("Ll", "Lo", "Nd"), include_characters="'", max_codepoint=0x2FFF
        ),
        min_size=1,
        max_size=20,
    )
)
def test_the_stemmer_agrees_with_snowballs_python_generation_on_any_word(word: str) -> None:
    assert Stemmer.Stemmer("english").stemWord(word) == _python_stem(word)


def make_index() -> LexicalIndex:
    index = LexicalIndex()
    index.add("csv", "Process CSV file read_file parse_csv")
    index.add("json", "Read JSON file read_file parse_json")
    index.add("mail", "Send an email to my boss gmail:send")
    index.add("git", "Commit and push changes git_commit git_push")
    return index


def test_search_ranks_the_document_sharing_rare_terms_first() -> None:
    index = make_index()
    hits = index.search("parse a csv", 10)
    assert hits[0][0] == "csv"
    assert all(score > 0 for _, score in hits)
    assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
    assert index.search("email my boss", 1)[0][0] == "mail"
    assert index.search("unrelated words entirely", 5) == []


def test_exact_tool_name_beats_scattered_words() -> None:
    index = LexicalIndex()
    index.add("exact", "use gmail:send")
    index.add("scattered", "send gmail")
    assert index.search("gmail:send", 2)[0][0] == "exact"


def test_limit_and_empty_cases() -> None:
    index = make_index()
    assert len(index.search("file", 1)) == 1
    assert index.search("file", 0) == []
    assert index.search("", 5) == []
    assert LexicalIndex().search("file", 5) == []


def test_remove_forgets_a_document_for_good() -> None:
    index = make_index()
    index.remove("csv")
    assert len(index) == 3
    assert "csv" not in index
    assert all(doc != "csv" for doc, _ in index.search("process csv file", 10))
    index.remove("csv")  # idempotent
    index.remove("never-there")
    assert len(index) == 3


def test_add_again_replaces_the_document() -> None:
    index = make_index()
    index.add("csv", "Resize images")
    assert index.search("csv", 5) == []
    assert index.search("resize image", 5)[0][0] == "csv"
    assert len(index) == 4


def test_scores_match_the_bm25_formula() -> None:
    index = LexicalIndex(k1=1.2, b=0.75)
    index.add("a", "alpha beta")
    index.add("b", "beta gamma delta")
    (doc, got), *_ = index.search("alpha", 5)
    import math

    idf = math.log1p((2 - 1 + 0.5) / (1 + 0.5))
    avgdl = 2.5
    expected = idf * 2.2 / (1 + 1.2 * (1 - 0.75 + 0.75 * 2 / avgdl))
    assert doc == "a"
    assert got == pytest.approx(expected)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="doc_id"):
        LexicalIndex().add("", "text")
    with pytest.raises(ValueError, match="k1"):
        LexicalIndex(k1=-1.0)


def test_concurrent_adds_removes_and_searches_stay_consistent() -> None:
    index = LexicalIndex()
    errors: list[BaseException] = []

    def worker(worker_id: int) -> None:
        try:
            for i in range(300):
                doc = f"w{worker_id}-{i}"
                index.add(doc, f"read file number {i} with tool t{worker_id}")
                index.search("read file", 5)
                if i % 2:
                    index.remove(doc)
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(index) == 4 * 150
    assert len(index.search("read", 10_000)) == 4 * 150


def same_hits(got: list[tuple[str, float]], expected: list[tuple[str, float]]) -> bool:
    return [d for d, _ in got] == [d for d, _ in expected] and [s for _, s in got] == pytest.approx(
        [s for _, s in expected]
    )


def test_add_terms_grows_a_document_and_remove_terms_shrinks_it_back() -> None:
    grown = LexicalIndex()
    grown.add("other", "send an email")
    grown.add_terms("p", "read_file parse_csv")
    grown.add_terms("p", "Process CSV file")
    whole = LexicalIndex()
    whole.add("other", "send an email")
    whole.add("p", "read_file parse_csv Process CSV file")
    assert same_hits(grown.search("csv file", 5), whole.search("csv file", 5))
    grown.remove_terms("p", "Process CSV file")
    alone = LexicalIndex()
    alone.add("other", "send an email")
    alone.add("p", "read_file parse_csv")
    assert same_hits(grown.search("csv file", 5), alone.search("csv file", 5))
    assert grown.search("process", 5) == []
    grown.remove_terms("p", "read_file parse_csv")
    assert "p" not in grown  # a document without terms is gone
    assert len(grown) == 1
    grown.remove_terms("p", "anything")  # unknown ids do nothing (replayed deletions)
    with pytest.raises(ValueError, match="doc_id"):
        grown.add_terms("", "text")


@pytest.mark.skipif(not devset.available(), reason="../shared/devset not present")
def test_the_stemmer_agrees_with_snowballs_python_generation_on_the_dev_sets_words() -> None:
    text = " ".join(
        path.read_text(encoding="utf-8")
        for path in (devset.DEVSET / "executions.jsonl", devset.DEVSET / "queries.jsonl")
    )
    words = {word.lower() for word in re.findall(r"[^\W\d_]+", text)}
    assert len(words) > 1000
    stemmer = Stemmer.Stemmer("english")
    assert [w for w in sorted(words) if stemmer.stemWord(w) != _python_stem(w)] == []


_WORDS = st.sampled_from(["read", "file", "json", "parse", "csv", "write", "report", "mail"])


@given(
    docs=st.lists(st.lists(_WORDS, min_size=1, max_size=6), min_size=1, max_size=30),
    removed=st.sets(st.integers(min_value=0, max_value=29), max_size=8),
    order=st.permutations(list(range(30))),
    queries=st.lists(st.lists(_WORDS, min_size=1, max_size=4, unique=True), max_size=6),
)
@settings(max_examples=150, deadline=None)
def test_renumbering_the_documents_changes_no_answer_or_score_bit(
    docs: list[list[str]], removed: set[int], order: list[int], queries: list[list[str]]
) -> None:
    index = LexicalIndex()
    core = index.core
    for i, words in enumerate(docs):
        core.add_terms(f"p{i}", words)
    for i in removed:  # freed numbers and tombstones in the lists
        core.remove(f"p{i}")
    before = [[core.search(q, k) for k in (1, 3, 50)] for q in queries]
    index.renumber([f"p{i}" for i in order] + ["unknown", "p0"])
    after = [[core.search(q, k) for k in (1, 3, 50)] for q in queries]
    assert after == before  # float equality: the same bits
    assert after == [[core.search(q, k, exhaustive=True) for k in (1, 3, 50)] for q in queries]
    # it goes on updating (a new document takes a freed number) as an index never renumbered
    plain = LexicalIndex().core
    for i, words in enumerate(docs):
        plain.add_terms(f"p{i}", words)
    for i in removed:
        plain.remove(f"p{i}")
    for each in (core, plain):
        each.add_terms("new", ["json", "mail", "json"])
        each.remove_terms("p0", ["read", "file"])
    for q in [*queries, ["json", "mail"], ["read", "file"]]:
        assert core.search(q, 50) == plain.search(q, 50)


def test_long_made_up_words_are_not_kept_by_the_tokenizer() -> None:
    """A Suggest's intent is the client's: one long made-up word a request used to stay in the
    token and stem caches (about 12 KB each, up to 670 MB once full). Words past
    `CACHED_WORD_CHARS` are split and stemmed every time, with the same terms."""
    rng = random.Random(7)
    words = ["".join(rng.choices(string.ascii_lowercase, k=4000)) for _ in range(1000)]
    expected = [_python_stem(words[0])]
    retained = _retained_by_query_terms(words)
    assert retained < 1_000_000, f"{retained} bytes kept after 1000 distinct long words"
    assert query_terms(words[0]) == expected
    short = "x" * CACHED_WORD_CHARS
    assert query_terms(short) == query_terms(short) == [_python_stem(short)]


def test_words_without_spaces_are_not_kept_by_the_tokenizer() -> None:
    """A Han run gives a pair of characters a term: a 64-character one kept 63 terms (about
    6 KB) in the token cache, so distinct Chinese intents filled it to 190 MB, past the 35 MB
    of docs/operations.md ("Limits, keepalive and shutdown"). Such tokens are paired every
    time, with the same terms; their Latin names are cached as any word."""
    rng = random.Random(7)
    han = [chr(c) for c in range(0x4E00, 0x9FFF)]
    tokens = ["".join(rng.choices(han, k=CACHED_WORD_CHARS)) for _ in range(1000)]
    retained = _retained_by_query_terms(tokens)
    assert retained < 1_000_000, f"{retained} bytes kept after 1000 distinct Han tokens"
    pairs = [tokens[0][i : i + 2] for i in range(CACHED_WORD_CHARS - 1)]
    assert query_terms(tokens[0]) == query_terms(tokens[0]) == pairs
    assert query_terms("部署到Netlify上") == ["部署", "署到", "netlifi", "上"]


def _retained_by_query_terms(texts: list[str]) -> int:
    """The bytes still allocated after `query_terms` read each of `texts` once: what the
    tokenizer's caches kept of them."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for text in texts:
            query_terms(text)
        gc.collect()
        return int(tracemalloc.get_traced_memory()[0] - before)
    finally:
        tracemalloc.stop()
