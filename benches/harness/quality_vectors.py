"""Intent vectors of the dev-set quality bench, computed once per (model, text) and cached.

The bench sends these as the client-computed `intent_embedding` of RecordExecution and Suggest
(a documented field of the public API), so the server stores and searches exactly the vectors
it would have computed itself, and a second run skips the model (the skewed variant's 21k
texts cost about 5 minutes of MiniLM on this machine). The cache lives in benches/.cache
(gitignored): per model id, the sha1 of every text embedded so far and its vector, so a changed
model or text never reuses a stale vector, and any subset of texts is served from it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from pml_server.embedding import make_embedder

CACHE = Path(__file__).resolve().parents[1] / ".cache" / "quality_vectors"
BATCH = 16


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def vectors(embedder_name: str, texts: Sequence[str]) -> NDArray[np.float32]:
    """One row per text, as `make_embedder(embedder_name)` computes it; texts this model has
    embedded before come from the cache."""
    embedder = make_embedder(embedder_name, cache_size=1)
    stem = CACHE / hashlib.sha1(embedder.model_id.encode()).hexdigest()[:16]
    keys_path, rows_path = stem.with_suffix(".keys.json"), stem.with_suffix(".npy")
    keys: list[str] = []
    rows = np.zeros((0, embedder.dim), dtype=np.float32)
    if keys_path.exists() and rows_path.exists():
        keys, rows = json.loads(keys_path.read_text()), np.load(rows_path)
        if rows.shape != (len(keys), embedder.dim):
            keys, rows = [], np.zeros((0, embedder.dim), dtype=np.float32)
    position = {k: i for i, k in enumerate(keys)}
    missing = sorted({t for t in texts if _digest(t) not in position}, key=len)
    if missing:
        # by length: one long text pads its whole batch (measured-facts)
        fresh = np.concatenate(
            [embedder.embed(missing[i : i + BATCH]) for i in range(0, len(missing), BATCH)]
        )
        for text in missing:
            position[_digest(text)] = len(keys)
            keys.append(_digest(text))
        rows = np.concatenate([rows, fresh.astype(np.float32)])
        CACHE.mkdir(parents=True, exist_ok=True)
        np.save(rows_path.with_suffix(".tmp.npy"), rows)
        rows_path.with_suffix(".tmp.npy").replace(rows_path)
        keys_path.write_text(json.dumps(keys))
    return rows[[position[_digest(t)] for t in texts]]
