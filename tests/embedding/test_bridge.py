"""The companion's bridge to MiniLM's geometry (pml_server/embedding/bridge.py; docs/ranking.md,
Other languages, "The bridge to MiniLM's geometry")."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pml_server.embedding import make_companion_embedder
from pml_server.embedding.bridge import (
    BRIDGE_WEIGHT,
    MAP_PATH,
    MAP_SHA256,
    MAP_SHAPE,
    BridgedEmbedder,
    bridged,
    fit,
    shipped_map,
)
from pml_server.embedding.hashing import HashingEmbedder


def _unit_rows(seed: int, rows: int, dim: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)
    normalized: np.ndarray = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return normalized


def test_the_shipped_map_is_the_fitted_file() -> None:
    assert hashlib.sha256(MAP_PATH.read_bytes()).hexdigest() == MAP_SHA256
    mapping = shipped_map()
    assert mapping.shape == MAP_SHAPE
    assert np.isfinite(mapping).all()


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), weight=st.sampled_from([0.0, 0.3, BRIDGE_WEIGHT, 1.0]))
def test_a_bridged_cosine_is_the_weighted_sum_of_both_readings(seed: int, weight: float) -> None:
    u = _unit_rows(seed, 2, MAP_SHAPE[0])
    mapping = shipped_map()
    out = bridged(u, mapping, weight)
    assert out.shape == (2, MAP_SHAPE[0] + MAP_SHAPE[1])
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    mapped = u @ mapping
    mapped /= np.linalg.norm(mapped, axis=1, keepdims=True)
    expected = (1 - weight) * float(u[0] @ u[1]) + weight * float(mapped[0] @ mapped[1])
    assert float(out[0] @ out[1]) == pytest.approx(expected, abs=1e-5)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_the_fit_recovers_an_exact_linear_map(seed: int) -> None:
    rng = np.random.default_rng(seed)
    source = _unit_rows(seed, 200, 8)
    truth = rng.standard_normal((8, 5))
    found = fit(source, source @ truth, ridge=1e-9)
    assert np.allclose(found, truth, atol=1e-5)


def test_a_map_of_another_width_is_refused() -> None:
    with pytest.raises(ValueError, match="the bridge maps 512-d vectors, not 256"):
        BridgedEmbedder(HashingEmbedder(dim=256), shipped_map())


def test_only_the_use_companion_of_minilm_is_bridged() -> None:
    bridged_use = make_companion_embedder("use", "minilm", cache_size=1)
    assert bridged_use.dim == MAP_SHAPE[0] + MAP_SHAPE[1]
    assert bridged_use.model_id.endswith("+bridge-minilm-v1")
    plain = make_companion_embedder("use", "e5", cache_size=1)
    assert plain.dim == MAP_SHAPE[0]
    assert "bridge" not in plain.model_id


@pytest.mark.model
def test_the_bridged_companion_keeps_translations_together_and_unrelated_requests_apart() -> None:
    """Translations stay nearest neighbours, and an unrelated request stays below min_match
    (0.3), as with USE alone."""
    same = [
        "Read a JSON file",
        "Lire un fichier JSON",
        "Eine JSON-Datei lesen",
        "读取一个 JSON 文件",
    ]
    other = "Send an email to my boss"
    vectors = make_companion_embedder("use", "minilm", cache_size=1).embed([*same, other])
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    together = vectors[:4] @ vectors[:4].T
    unrelated = vectors[:4] @ vectors[4]
    assert together.min() > unrelated.max()
    assert unrelated.max() < 0.3


def test_a_replaced_map_file_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from pml_server.embedding import bridge
    from pml_server.embedding.base import ModelIntegrityError

    replaced = tmp_path / "use_to_minilm.npy"
    replaced.write_bytes(MAP_PATH.read_bytes()[:-2] + b"\x00\x00")
    monkeypatch.setattr(bridge, "MAP_PATH", replaced)
    bridge.shipped_map.cache_clear()
    try:
        with pytest.raises(ModelIntegrityError, match=r"use_to_minilm\.npy: sha256"):
            bridge.shipped_map()
    finally:
        bridge.shipped_map.cache_clear()
