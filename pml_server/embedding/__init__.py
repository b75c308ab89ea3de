"""Embeddings: the only package that imports onnxruntime and tokenizers.

`make_embedder("minilm" | "e5" | "use" | "hashing")` gives a cached Embedder (a vector
supplied by a client is checked by `pml_server.domain.vectors.client_vector`). The indexes over
the vectors live in `pml_server.search`. `e5` and `use` are multilingual: the cross-lingual
companion of MiniLM (docs/ranking.md, Other languages); `language.is_english` picks the space.
"""

from __future__ import annotations

from pml_server.embedding.base import Embedder, l2_normalize
from pml_server.embedding.cache import CACHE_BYTES, CACHE_ENTRIES, CachedEmbedder
from pml_server.embedding.hashing import HashingEmbedder
from pml_server.embedding.metered import MeteredEmbedder

EMBEDDERS = ("minilm", "e5", "use", "hashing")


def make_embedder(
    name: str, cache_size: int = CACHE_ENTRIES, cache_bytes: int = CACHE_BYTES
) -> CachedEmbedder:
    """The embedder named in the configuration, wrapped in the (model, text) cache; its
    `usage()` counts the model's own runs (MeteredEmbedder sits right around the model)."""
    if name == "minilm":
        from pml_server.embedding.minilm import MiniLMEmbedder  # loads onnxruntime lazily

        # Concurrent callers share the model's workers (one queue of texts, minilm.py).
        return CachedEmbedder(MeteredEmbedder(MiniLMEmbedder()), cache_size, cache_bytes)
    if name == "e5":
        from pml_server.embedding.e5 import E5Embedder  # loads the C engine lazily

        return CachedEmbedder(MeteredEmbedder(E5Embedder()), cache_size, cache_bytes)
    if name == "use":
        from pml_server.embedding.use import USEEmbedder  # loads numpy weights lazily

        return CachedEmbedder(MeteredEmbedder(USEEmbedder()), cache_size, cache_bytes)
    if name == "hashing":
        return CachedEmbedder(MeteredEmbedder(HashingEmbedder()), cache_size, cache_bytes)
    raise ValueError(f"unknown embedder {name!r}; choose one of {EMBEDDERS}")


def make_companion_embedder(
    name: str, primary: str, cache_size: int = CACHE_ENTRIES, cache_bytes: int = CACHE_BYTES
) -> CachedEmbedder:
    """The cross-lingual companion `name` of the primary model `primary`: USE beside MiniLM is
    read through the bridge to MiniLM's geometry (bridge.py); any other pair as it is."""
    if name == "use" and primary == "minilm":
        from pml_server.embedding.bridge import BridgedEmbedder
        from pml_server.embedding.use import USEEmbedder

        return CachedEmbedder(
            MeteredEmbedder(BridgedEmbedder(USEEmbedder())), cache_size, cache_bytes
        )
    return make_embedder(name, cache_size, cache_bytes)


__all__ = [
    "EMBEDDERS",
    "CachedEmbedder",
    "Embedder",
    "HashingEmbedder",
    "MeteredEmbedder",
    "l2_normalize",
    "make_companion_embedder",
    "make_embedder",
]
