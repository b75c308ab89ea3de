"""Intent vectors of the dev-set quality bench, computed once per (model, text) and cached.

The bench sends these as the client-computed `intent_embedding` of RecordExecution and Suggest
(a documented field of the public API), so the server stores and searches exactly the vectors
it would have computed itself, and a second run skips the model (17k skewed intents cost about
7 minutes of MiniLM on this machine). The cache lives in benches/.cache (gitignored), one .npy
per model and text set, keyed by the model id and the sha1 of the texts, so a changed model
or a changed text never reuses a stale vector.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from pml_server.embedding import make_embedder

CACHE = Path(__file__).resolve().parent / ".cache" / "quality_vectors"
BATCH = 16


def _key(model_id: str, texts: Sequence[str]) -> str:
    digest = hashlib.sha1(model_id.encode())
    for text in texts:
        digest.update(b"\0" + text.encode())
    return digest.hexdigest()[:20]


def vectors(embedder_name: str, texts: Sequence[str]) -> NDArray[np.float32]:
    """One row per text, as `make_embedder(embedder_name)` computes it, read from the cache
    when this model has embedded exactly these texts before."""
    embedder = make_embedder(embedder_name, cache_size=1)
    path = CACHE / f"{embedder_name}-{_key(embedder.model_id, texts)}.npy"
    if path.exists():
        cached: NDArray[np.float32] = np.load(path)
        if cached.shape == (len(texts), embedder.dim):
            return cached
    out = np.zeros((len(texts), embedder.dim), dtype=np.float32)
    # by length: one long text pads its whole batch (measured-facts)
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    for start in range(0, len(order), BATCH):
        chunk = order[start : start + BATCH]
        out[chunk] = embedder.embed([texts[i] for i in chunk])
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, out)
    tmp.replace(path)
    return out
